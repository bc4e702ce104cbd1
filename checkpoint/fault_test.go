package checkpoint_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/nvme"
)

// TestNVMeFaultKeepsCheckpoint: with the optimizer state and the
// parameters swapped to NVMe (stage 3), a disk that fails during training
// (ENOSPC on a write, EIO on a read) or during a save fails the step or
// the save with an error naming the swap file — and the last checkpoint
// is untouched: it loads, and the run resumed from it equals the
// uninterrupted run bit for bit.
func TestNVMeFaultKeepsCheckpoint(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	// Every parameter swapped (none persistent), two sub-groups per rank.
	js := strings.Replace(stageJSON(3, "fp32", 1000), `"stage": 3`, `"stage": 3, "stage3_param_persistence_threshold": 0,
    "offload_optimizer": {"device": "nvme", "nvme_path": "/swap"}, "offload_param": {"device": "nvme", "nvme_path": "/swap"}`, 1)
	plan, err := ztest.Plan(js, 2)
	if err != nil {
		t.Fatal(err)
	}
	memfs := func() nvme.FS {
		m := nvme.NewMemFS(0)
		if err := m.Mkdir("/swap"); err != nil {
			t.Fatal(err)
		}
		return m
	}
	whole, err := mlpRun{from: 0, to: 6, swap: memfs()}.run(plan, d)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		at     int  // the step before which the disk fails
		atSave bool // … or the save after it
		fault  nvme.Fault
		want   error
	}{
		{"ENOSPC writing the optimizer state", 4, false, nvme.Fault{Ops: nvme.OpWrite, Path: "exp_avg", Err: syscall.ENOSPC}, syscall.ENOSPC},
		{"EIO reading the parameters", 4, false, nvme.Fault{Ops: nvme.OpRead, Path: "param", Err: syscall.EIO}, syscall.EIO},
		{"short write of a master partition", 3, false, nvme.Fault{Ops: nvme.OpWrite, Path: "master", Short: true}, nil},
		{"EIO reading the state during a save", 3, true, nvme.Fault{Ops: nvme.OpRead, Path: "master", Err: syscall.EIO}, syscall.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fsys := nvme.NewFaultFS(memfs())
			arm := func(step int) {
				if step == tc.at {
					fsys.Inject(tc.fault)
				}
			}
			r := mlpRun{from: 0, to: 6, dir: dir, saveAt: []int{2, 3}, swap: fsys, before: arm}
			if tc.atSave {
				r.before, r.beforeSave = nil, arm
			}
			_, err := r.run(plan, d)
			t.Logf("the run failed: %v", err)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), tc.fault.Path) || !strings.Contains(err.Error(), ".swp") {
				t.Fatalf("want an error naming the swap file and %v, got %v", tc.want, err)
			}
			last := tc.at - 1 // the checkpoint saved before the fault
			tag, err := checkpoint.LatestTag(dir)
			if want := checkpoint.Tag(int64(last)); err != nil || tag != want {
				t.Fatalf("latest: %q, %v; want %s", tag, err, want)
			}
			if _, err := os.Stat(filepath.Join(dir, checkpoint.Tag(int64(tc.at)))); err == nil {
				t.Errorf("a checkpoint of step %d exists", tc.at)
			}
			resumed, err := mlpRun{from: last, to: 6, dir: dir, load: true, swap: memfs()}.run(plan, d)
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range resumed.losses {
				if l != whole.losses[last+i] {
					t.Fatalf("step %d: loss %v after the fault and resume, %v uninterrupted", last+i+1, l, whole.losses[last+i])
				}
			}
			if i := bitsEqual(resumed.final, whole.final); i >= 0 {
				t.Fatalf("final weight %d differs from the uninterrupted run", i)
			}
		})
	}
}
