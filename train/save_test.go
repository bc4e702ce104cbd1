package train

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/google/go-cmp/cmp"
)

// TestSaveAsync: training with SaveAsync gives the losses of synchronous
// saving and checkpoints byte for byte the same (every file of every
// step's checkpoint), and tells of each checkpoint once it is published,
// at stages 1 and 3 on 2 ranks.
func TestSaveAsync(t *testing.T) {
	g := loadGPT(t)
	for _, stage := range []int{1, 3} {
		run := func(async bool) (dir string, losses []float64, events []CheckpointEvent) {
			dir = t.TempDir()
			plan, err := dsconfig.Load(saveJSON(stage, 1e-3, ""), dsconfig.Options{WorldSize: 2})
			if err != nil {
				t.Fatal(err)
			}
			devs := []Device{{Acct: mem.NewAccountant(0), Gemm: g.gemm}, {Acct: mem.NewAccountant(1), Gemm: g.gemm}}
			cfg := Config{Plan: plan, Model: g.cfg, Init: g.init, SeqLen: 32, Steps: 4, Devices: devs, Workers: 1,
				Batches: Tokens(gptSamples{tokens: g.tokens, B: 1, gas: 1, world: 2}, 32), SaveDir: dir, SaveInterval: 1, SaveAsync: async,
				OnCheckpoint: func(ev CheckpointEvent) {
					if _, err := os.Stat(filepath.Join(ev.Dir, ev.Tag)); err != nil {
						t.Errorf("told of %s before it is published: %v", ev.Tag, err)
					}
					events = append(events, ev)
				}}
			if _, err := Run(cfg, func(r Record) error { losses = append(losses, r.Loss); return nil }); err != nil {
				t.Fatal(err)
			}
			return dir, losses, events
		}
		syncDir, syncLosses, syncEvents := run(false)
		asyncDir, asyncLosses, asyncEvents := run(true)
		if diff := cmp.Diff(syncLosses, asyncLosses); diff != "" {
			t.Errorf("stage %d: losses (-sync +async):\n%s", stage, diff)
		}
		tags := func(evs []CheckpointEvent) (out []string) {
			for _, e := range evs {
				out = append(out, e.Tag)
			}
			return out
		}
		if diff := cmp.Diff(tags(syncEvents), tags(asyncEvents)); diff != "" || len(syncEvents) != 4 {
			t.Errorf("stage %d: checkpoints told (-sync +async):\n%s", stage, diff)
		}
		for _, tag := range tags(syncEvents) {
			names, err := os.ReadDir(filepath.Join(syncDir, tag))
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				a, _ := os.ReadFile(filepath.Join(syncDir, tag, n.Name()))
				b, err := os.ReadFile(filepath.Join(asyncDir, tag, n.Name()))
				if err != nil || !slices.Equal(a, b) {
					t.Errorf("stage %d: %s/%s differs with an asynchronous save (%v)", stage, tag, n.Name(), err)
				}
			}
		}
		if got, _ := os.ReadFile(filepath.Join(asyncDir, "latest")); string(got) != "global_step4" {
			t.Errorf("stage %d: latest %q, want global_step4", stage, got)
		}
	}
}
