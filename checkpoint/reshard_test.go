package checkpoint_test

import (
	"fmt"
	"testing"

	"github.com/dszero/dszero/internal/ztest"
)

// TestReshard: a checkpoint saved at one stage and world size loads at
// another (DeepSpeed needs its universal-checkpoint conversion for that):
// the loaded fp32 master is the saved one bit for bit, and so is the
// optimizer state — checked by resharding both the original and the
// resharded-and-saved-again checkpoint into stage 0 on one rank, which
// holds everything. Training then goes on (from the re-saved checkpoint,
// at the first layout again).
func TestReshard(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	const n = 2
	for _, tc := range []struct {
		fromStage, fromWorld, toStage, toWorld, subGroup int
		dtype                                            string
	}{
		{3, 2, 1, 3, 0, "fp32"}, {2, 2, 3, 4, 1000, "fp32"}, {1, 2, 0, 1, 0, "fp32"}, {0, 1, 3, 2, 0, "fp32"}, {3, 2, 3, 3, 3000, "fp32"}, {2, 4, 2, 3, 0, "fp32"},
		// bf16 at stage 0 partitions its files as DeepSpeed's BF16_Optimizer does.
		{0, 2, 3, 3, 0, "bf16"}, {1, 2, 0, 3, 0, "bf16"},
	} {
		t.Run(fmt.Sprintf("z%d_w%d_to_z%d_w%d_%s", tc.fromStage, tc.fromWorld, tc.toStage, tc.toWorld, tc.dtype), func(t *testing.T) {
			from, err := ztest.Plan(stageJSON(tc.fromStage, tc.dtype, 0), tc.fromWorld)
			if err != nil {
				t.Fatal(err)
			}
			to, err := ztest.Plan(stageJSON(tc.toStage, tc.dtype, tc.subGroup), tc.toWorld)
			if err != nil {
				t.Fatal(err)
			}
			canon, err := ztest.Plan(stageJSON(0, tc.dtype, 0), 1)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			saved := runMLP(t, from, d, 0, n, dir, false, true)
			loaded := runMLP(t, to, d, n, n, dir, true, false) // load only
			if i := bitsEqual(loaded.final, saved.final); i >= 0 {
				t.Fatalf("element %d of the loaded fp32 master differs from the saved one", i)
			}
			ref := runMLP(t, canon, d, n, n, dir, true, false)  // the original, whole
			runMLP(t, to, d, n, n, dir, true, true)             // saved again (same tag) from the new layout
			back := runMLP(t, canon, d, n, n, dir, true, false) // round trip, whole
			rg, bg := ref.states[0].Strategy.Groups[0], back.states[0].Strategy.Groups[0]
			nonzero := 0
			for _, x := range rg.Optim.State["exp_avg_sq"] {
				if x != 0 {
					nonzero++
				}
			}
			if len(rg.Optim.State) != 2 || nonzero < len(rg.Master)/2 {
				t.Fatalf("the whole optimizer state has %d tensors, exp_avg_sq %d non-zero of %d: not the trained state", len(rg.Optim.State), nonzero, len(rg.Master))
			}
			if i := bitsEqual(rg.Master, bg.Master); i >= 0 {
				t.Errorf("master element %d changed through the new layout", i)
			}
			for name, v := range rg.Optim.State {
				if i := bitsEqual(v, bg.Optim.State[name]); i >= 0 {
					t.Errorf("optimizer state %s element %d changed through the new layout", name, i)
				}
			}
			if rg.Optim.Steps != bg.Optim.Steps || rg.Optim.Steps != n {
				t.Errorf("optimizer steps %d and %d, want %d", rg.Optim.Steps, bg.Optim.Steps, n)
			}
			if more := runMLP(t, from, d, n, n+2, dir, true, false); len(more.losses) != 2 { // and back to the first layout
				t.Errorf("training after resharding: %v", more.losses)
			}
		})
	}
}
