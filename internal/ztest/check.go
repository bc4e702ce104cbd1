package ztest

import (
	"testing"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/lrsched"
)

// StageRun trains the MLP d for 2 steps with Adam in fp32 at a ZeRO stage
// (StageJSON with bucket and overlap) on world ranks, for the stages'
// memory tests. pad is the padding of the flat layout, Padded − Ψ
// elements.
func StageRun(d MLPData, stage, bucket int, overlap bool, world int) (run Run, pad int64, err error) {
	plan, err := Plan(StageJSON(stage, bucket, overlap), world)
	if err != nil {
		return Run{}, 0, err
	}
	run, err = RunMLP(plan, 2, lrsched.DeepSpeed0195, d, nil)
	if err != nil {
		return Run{}, 0, err
	}
	fl := zcore.FlatLayout(&d.Layout, world)
	return run, int64(fl.Padded) - int64(d.Layout.Numel), nil
}

// CheckPeaks reports each category of want whose device peak on a (one
// rank's accountant) differs, as "<who>: <category> peak … bytes, want …",
// and returns the peaks.
func CheckPeaks(t testing.TB, who string, a *mem.Accountant, want map[mem.Category]int64) map[mem.Category]int64 {
	t.Helper()
	got := Peaks(a)
	for c, w := range want {
		if got[c] != w {
			t.Errorf("%s: %v peak %d bytes, want %d", who, c, got[c], w)
		}
	}
	return got
}

// MustLoadMLP is LoadMLP for a test: it fails t when dir cannot be read.
func MustLoadMLP(t testing.TB, dir string) MLPData {
	t.Helper()
	d, err := LoadMLP(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
