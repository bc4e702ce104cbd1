package train

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/fdiff"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/lrsched"
)

// withSP adds sequence_parallel_size to a harness config.
func withSP(js string, sp int) string {
	return strings.Replace(js, "{", fmt.Sprintf(`{"sequence_parallel_size": %d, `, sp), 1)
}

// runSP trains the tiny GPT on world ranks in groups of sp (world/sp
// data-parallel shards of the harness data) and returns the records and
// the final fp32 weights.
func runSP(t *testing.T, g gptRef, js string, world, sp, steps int, checkpoint bool) ([]Record, []float32, error) {
	t.Helper()
	plan, err := dsconfig.Load(withSP(js, sp), dsconfig.Options{WorldSize: world})
	if err != nil {
		t.Fatal(err)
	}
	devs := make([]Device, world)
	for r := range devs {
		devs[r] = Device{Acct: mem.NewAccountant(r), Gemm: g.gemm}
	}
	batches := gptSamples{tokens: g.tokens, B: int(plan.Batch.TrainMicroBatchSizePerGPU), gas: int(plan.Batch.GradientAccumulationSteps), world: world / sp}
	var recs []Record
	final, err := Run(Config{Plan: plan, Model: g.cfg, Init: g.init, Batches: Tokens(batches, 32), SeqLen: 32, Steps: steps, ReturnParams: true,
		Devices: devs, Version: lrsched.DeepSpeed0195, Workers: 1, Checkpoint: checkpoint}, func(r Record) error { recs = append(recs, r); return nil })
	return recs, final, err
}

// TestSeqParallelGPT: Ulysses on the tiny GPT (4 heads, T = 32) — 2 ranks
// of one sequence-parallel group, 4 ranks of one, and 2 × 2 (2 groups of
// 2, each a data-parallel shard) — trains like one rank taking the same
// global batch (micro 2, GAS 2 per shard; one rank runs GAS 2·DP), at
// ZeRO stages 0 to 3, one case with activation checkpointing: step losses
// within 1e-6 relative, final weights within 1e-6 (‖Δ‖/‖w‖).
func TestSeqParallelGPT(t *testing.T) {
	g := loadGPT(t)
	const steps = 3
	base := map[int][]Record{}
	baseW := map[int][]float32{}
	for _, dp := range []int{1, 2} {
		base[dp], baseW[dp] = runGPT(t, g, harnessJSON(0, 2, 2*dp, 500000000, false), 1, steps, lrsched.DeepSpeed0195)
	}
	for _, tc := range []struct {
		world, sp, stage int
		checkpoint       bool
	}{
		{2, 2, 0, false}, {2, 2, 1, false}, {2, 2, 2, false}, {2, 2, 3, false}, {2, 2, 3, true},
		{4, 4, 0, false}, {4, 2, 0, false}, {4, 2, 3, false}, {4, 2, 2, false},
	} {
		t.Run(fmt.Sprintf("world%d/sp%d/stage%d/checkpoint=%v", tc.world, tc.sp, tc.stage, tc.checkpoint), func(t *testing.T) {
			dp := tc.world / tc.sp
			recs, w, err := runSP(t, g, harnessJSON(tc.stage, 2, 2, 20000, false), tc.world, tc.sp, steps, tc.checkpoint)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != steps {
				t.Fatalf("%d records, want %d", len(recs), steps)
			}
			lrel := maxRel(recs, base[dp])
			wabs, wrel := fdiff.Weights(w, baseW[dp])
			t.Logf("losses max rel Δ %.2e; weights max |Δ| %.2e, ‖Δ‖/‖w‖ %.2e", lrel, wabs, wrel)
			if lrel > 1e-6 {
				t.Errorf("losses differ from one rank by %.2e relative", lrel)
			}
			if wrel > 1e-6 {
				t.Errorf("final weights differ from one rank by %.2e relative (‖Δ‖/‖w‖)", wrel)
			}
			if recs[steps-1].Loss >= recs[0].Loss {
				t.Errorf("the loss did not fall: %v → %v", recs[0].Loss, recs[steps-1].Loss)
			}
		})
	}
}

// TestSeqParallelRefusals: heads or a sequence length not divisible by
// sequence_parallel_size are refused before training, naming the key.
func TestSeqParallelRefusals(t *testing.T) {
	g := loadGPT(t)
	for _, tc := range []struct {
		world, sp int
		want      string
	}{
		{3, 3, "sequence_parallel_size 3 does not divide the GPT's 4 attention heads"},
		{6, 3, "sequence_parallel_size 3 does not divide the GPT's 4 attention heads"},
		{8, 8, "sequence_parallel_size 8 does not divide the GPT's 4 attention heads"},
	} {
		_, _, err := runSP(t, g, harnessJSON(0, 2, 2, 20000, false), tc.world, tc.sp, 1, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("world %d, sp %d: %v, want an error with %q", tc.world, tc.sp, err, tc.want)
		}
	}
}
