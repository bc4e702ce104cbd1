package train

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/google/go-cmp/cmp"
)

// folders is a SaveLayout of one folder per save, dir/save-N, that
// records the calls it gets and fails Rank on failRank at failStep.
type folders struct {
	root               string
	failRank, failStep int
	mu                 sync.Mutex
	calls              []string
}

func (f *folders) Dir(step int64) string { return filepath.Join(f.root, fmt.Sprintf("save-%d", step)) }

func (f *folders) Rank(dir string, step int64, rank int) error {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf("rank %d step %d", rank, step))
	f.mu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "latest")); err != nil {
		return fmt.Errorf("DeepSpeed's files are not there yet: %w", err)
	}
	if rank == f.failRank && int(step) == f.failStep {
		return errors.New("disk full")
	}
	return os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank%d", rank)), nil, 0o644)
}

func (f *folders) Commit(dir string, step int64) (string, error) {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf("commit step %d", step))
	f.mu.Unlock()
	for r := range 2 {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("rank%d", r))); err != nil {
			return "", fmt.Errorf("rank %d's file is not there: %w", r, err)
		}
	}
	return dir + ".done", os.Rename(dir, dir+".done")
}

// TestSaveLayout: with a Layout, each save goes to the layout's folder,
// every rank's Rank runs after DeepSpeed's files are written and before
// rank 0's Commit, OnCheckpoint hears the committed path, and a rank
// whose Rank fails stops the run naming it, with nothing committed; a
// resumed run continues from a committed folder.
func TestSaveLayout(t *testing.T) {
	g := loadGPT(t)
	plan, err := dsconfig.Load(saveJSON(2, 1e-3, ""), dsconfig.Options{WorldSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	run := func(l *folders, steps int, load string) ([]string, error) {
		devs := []Device{{Acct: mem.NewAccountant(0), Gemm: g.gemm}, {Acct: mem.NewAccountant(1), Gemm: g.gemm}}
		var saved []string
		_, err := Run(Config{Plan: plan, Model: g.cfg, Init: g.init, SeqLen: 32, Steps: steps, Devices: devs, Workers: 1,
			Batches: Tokens(gptSamples{tokens: g.tokens, B: 1, gas: 1, world: 2}, 32), SaveDir: l.root, SaveInterval: 2, Layout: l, LoadDir: load,
			OnCheckpoint: func(ev CheckpointEvent) {
				if ev.Saved {
					saved = append(saved, ev.Path())
				}
			}}, nil)
		return saved, err
	}
	l := &folders{root: t.TempDir(), failRank: -1}
	saved, err := run(l, 4, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(l.root, "save-2.done"), filepath.Join(l.root, "save-4.done")}
	if diff := cmp.Diff(want, saved); diff != "" {
		t.Errorf("saved paths (-want +got):\n%s", diff)
	}
	for i, c := range l.calls {
		if strings.HasPrefix(c, "commit") && (i < 2 || !strings.HasPrefix(l.calls[i-1], "rank") || !strings.HasPrefix(l.calls[i-2], "rank")) {
			t.Errorf("calls %q: a commit before both ranks wrote their files", l.calls)
		}
	}
	for _, p := range want {
		if tag, err := checkpoint.LatestTag(p); err != nil || !strings.HasPrefix(tag, "global_step") {
			t.Errorf("%s: latest %q, %v", p, tag, err)
		}
	}
	if _, err := run(&folders{root: t.TempDir(), failRank: -1}, 5, want[1]); err != nil {
		t.Errorf("resuming from %s: %v", want[1], err)
	}

	bad := &folders{root: t.TempDir(), failRank: 1, failStep: 4}
	_, err = run(bad, 4, "")
	if err == nil || !strings.Contains(err.Error(), "rank 1 could not write its files") || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("rank 1 failing: %v", err)
	}
	for _, c := range bad.calls {
		if c == "commit step 4" {
			t.Errorf("step 4 committed though rank 1 failed: %q", bad.calls)
		}
	}
	if _, err := os.Stat(filepath.Join(bad.root, "save-2.done")); err != nil {
		t.Errorf("the save before the failure: %v", err)
	}
}
