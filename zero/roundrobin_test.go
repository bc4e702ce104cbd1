package zero_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/internal/fdiff"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero"
	"github.com/dszero/dszero/zero/lrsched"
)

// roundRobin turns round_robin_gradients on in a harness config.
func roundRobin(js string) string {
	out := strings.Replace(js, `"zero_optimization": {`, `"zero_optimization": {"round_robin_gradients": true, `, 1)
	if out == js {
		panic("roundRobin: no zero_optimization block")
	}
	return out
}

// TestRoundRobinPartitions: with round_robin_gradients each rank's master
// partition holds the MLP's parameters in DeepSpeed's round-robin order
// (_round_robin_reorder: parameter i goes to bucket i % world, the buckets
// concatenated), worked out by hand below. The MLP's named_parameters are
// fc1.weight (1024), fc1.bias (64), fc2.weight (4096), fc2.bias (64),
// fc3.weight (512), fc3.bias (8): 5768 elements.
func TestRoundRobinPartitions(t *testing.T) {
	d := loadMLP(t)
	// Where each parameter lies in the model's own (named_parameters) buffer.
	off := map[string][2]int{"fc1.w": {0, 1024}, "fc1.b": {1024, 1088}, "fc2.w": {1088, 5184},
		"fc2.b": {5184, 5248}, "fc3.w": {5248, 5760}, "fc3.b": {5760, 5768}}
	if d.Layout.Numel != 5768 || d.Layout.Specs[2].Offset != 1088 || d.Layout.Specs[4].Offset != 5248 {
		t.Fatalf("the MLP's layout changed: %d elements", d.Layout.Numel)
	}
	// piece is elements [lo, hi) of a parameter's init values.
	type piece struct {
		name   string
		lo, hi int
	}
	cat := func(ps ...piece) []float32 {
		var out []float32
		for _, p := range ps {
			o := off[p.name]
			if p.hi < 0 {
				p.hi = o[1] - o[0]
			}
			out = append(out, d.Init[o[0]+p.lo:o[0]+p.hi]...)
		}
		return out
	}
	for _, tc := range []struct {
		world int
		want  [][]float32 // each rank's master partition, without padding
	}{
		// world 2: order fc1.w fc2.w fc3.w | fc1.b fc2.b fc3.b; 5768
		// elements (a multiple of 4), 2884 per rank.
		{2, [][]float32{
			cat(piece{"fc1.w", 0, -1}, piece{"fc2.w", 0, 1860}),
			cat(piece{"fc2.w", 1860, -1}, piece{"fc3.w", 0, -1}, piece{"fc1.b", 0, -1}, piece{"fc2.b", 0, -1}, piece{"fc3.b", 0, -1}),
		}},
		// world 3: order fc1.w fc2.b | fc1.b fc3.w | fc2.w fc3.b, padded
		// to 5772 (a multiple of 6), 1924 per rank, the last 4 padding.
		{3, [][]float32{
			cat(piece{"fc1.w", 0, -1}, piece{"fc2.b", 0, -1}, piece{"fc1.b", 0, -1}, piece{"fc3.w", 0, -1}, piece{"fc2.w", 0, 260}),
			cat(piece{"fc2.w", 260, 2184}),
			cat(piece{"fc2.w", 2184, -1}, piece{"fc3.b", 0, -1}),
		}},
	} {
		for _, stage := range []int{1, 2} {
			plan, err := ztest.Plan(roundRobin(harnessJSON(stage, 4, 2, 1000, false)), tc.world)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			got := make([][]float32, tc.world)
			full := make([][]float32, tc.world)
			err = inproc.New(tc.world, inproc.Options{}).Run(func(c comm.Comm) error {
				eng, err := zero.NewEngine(plan, zero.Options{Acct: mem.NewAccountant(c.Rank()), Layout: &d.Layout, Init: d.Init, Comm: c})
				if err != nil {
					return err
				}
				defer eng.Close()
				f := make([]float32, d.Layout.Numel)
				if err := eng.GatherMaster(f); err != nil {
					return err
				}
				master, err := eng.MasterParams()
				if err != nil {
					return err
				}
				mu.Lock()
				got[c.Rank()], full[c.Rank()] = slices.Clone(master), f
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for r := range tc.world {
				if !slices.Equal(got[r], tc.want[r]) {
					t.Errorf("stage %d, world %d, rank %d: master partition of %d elements is not the round-robin one (%d)", stage, tc.world, r, len(got[r]), len(tc.want[r]))
				}
				if !slices.Equal(full[r], d.Init) {
					t.Errorf("stage %d, world %d, rank %d: GatherMaster does not give the parameters back in the model's order", stage, tc.world, r)
				}
			}
		}
	}
}

// TestRoundRobinTraining: round_robin_gradients moves which rank owns what
// and the order in which the gradient norm adds its fragments, nothing
// else, so training with it ends where training without it ends, within
// float32 rounding, at stages 1 and 2 over 2 to 4 ranks, in fp32 and bf16
// — but for bf16 on 3 and 4 ranks: there the all-reduce adds in gloo's
// ring order, which follows each element's place in the bucket, which
// round robin moves, and a bf16 sum rounds at every hop, so the runs agree
// within bf16 rounding (1e-4).
func TestRoundRobinTraining(t *testing.T) {
	d := loadMLP(t)
	for _, prec := range []string{"fp32", "bf16"} {
		for stage := 1; stage <= 2; stage++ {
			for world := 2; world <= 4; world++ {
				t.Run(fmt.Sprintf("%s/stage%d/world%d", prec, stage, world), func(t *testing.T) {
					js := harnessJSON(stage, 2, 2, 1000, stage == 2)
					if prec == "bf16" {
						js = withKeys(js, `"bf16": {"enabled": true}`)
					}
					run := func(js string) ztest.Run {
						plan, err := ztest.Plan(js, world)
						if err != nil {
							t.Fatal(err)
						}
						got, err := ztest.RunMLP(plan, 4, lrsched.DeepSpeed0195, d, nil)
						if err != nil {
							t.Fatal(err)
						}
						return got
					}
					base, rr := run(js), run(roundRobin(js))
					lrel := fdiff.MaxRel(rr.Losses, base.Losses)
					abs, rel := fdiff.Weights(rr.Final, base.Final)
					t.Logf("losses max rel Δ %.2e; weights max |Δ| %.2e, ‖Δ‖/‖w‖ %.2e", lrel, abs, rel)
					tol := 1e-6
					if prec == "bf16" && world > 2 {
						tol = 1e-4
					}
					if lrel > tol || rel > tol {
						t.Errorf("round robin changed the run by more than float32 rounding")
					}
				})
			}
		}
	}
}
