package train

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/data"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/fdiff"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/llama"
	"github.com/dszero/dszero/model/mlp"
	"github.com/dszero/dszero/profiler"
	"github.com/dszero/dszero/zero/lrsched"
)

// withSP adds sequence_parallel_size to a harness config.
func withSP(js string, sp int) string {
	return strings.Replace(js, "{", fmt.Sprintf(`{"sequence_parallel_size": %d, `, sp), 1)
}

// dpAveraging sets zero_optimization.reduce_scatter false: the stage-3
// path on which DeepSpeed divides a sequence-parallel gradient sum by the
// data-parallel size as stages 0-2 do, so that stage 3 trains like one
// rank (dsconfig.Plan.SeqParallelZeRO3AveragesOverWorld; with the default
// reduce_scatter it averages over every rank, TestSeqParallelZeRO3Averaging).
func dpAveraging(js string) string {
	return strings.Replace(js, `"zero_optimization": {"stage": 3,`, `"zero_optimization": {"stage": 3, "reduce_scatter": false,`, 1)
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
// ZeRO stages 0 to 3 (stage 3 with reduce_scatter false, dpAveraging), one
// case with activation checkpointing: step losses within 1e-6 relative,
// final weights within 1e-6 (‖Δ‖/‖w‖).
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
			recs, w, err := runSP(t, g, dpAveraging(harnessJSON(tc.stage, 2, 2, 20000, false)), tc.world, tc.sp, steps, tc.checkpoint)
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

// TestSeqParallelLayerDrop: progressive layer drop draws the same
// blocks on every rank, so the SP group's exchanges stay matched: 2
// sequence-parallel ranks with PLD train like one rank with it.
func TestSeqParallelLayerDrop(t *testing.T) {
	g := loadGPT(t)
	js := strings.Replace(harnessJSON(0, 2, 2, 20000, false), "{", `{"progressive_layer_drop": {"enabled": true, "theta": 0.5, "gamma": 0.1}, `, 1)
	base, bw, err := runSP(t, g, js, 1, 1, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	recs, w, err := runSP(t, g, js, 2, 2, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	lrel := maxRel(recs, base)
	_, wrel := fdiff.Weights(w, bw)
	if lrel > 1e-6 || wrel > 1e-6 {
		t.Errorf("with layer drop, sp 2 differs from one rank: losses %.2e, weights %.2e relative", lrel, wrel)
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
	// A sequence-length curriculum would cut each rank's slice, not the
	// sequence: refused.
	cur := strings.Replace(harnessJSON(0, 2, 2, 20000, false), "{", `{"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 8, "max_difficulty": 32, "schedule_type": "fixed_linear", "schedule_config": {"total_curriculum_step": 4, "difficulty_step": 8}}, `, 1)
	if _, _, err := runSP(t, g, cur, 2, 2, 1, false); err == nil || !strings.Contains(err.Error(), "curriculum with sequence_parallel_size 2 is not supported") {
		t.Errorf("curriculum with sp 2: %v", err)
	}
	// A model without sequence parallelism is refused, not run whole.
	plan, err := dsconfig.Load(withSP(harnessJSON(0, 2, 2, 20000, false), 2), dsconfig.Options{WorldSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(Config{Plan: plan, Model: mlp.Config{Sizes: []int{4, 8, 2}}, Seed: 1, Steps: 1, SeqLen: 1,
		Devices: []Device{{Acct: mem.NewAccountant(0), Gemm: g.gemm}, {Acct: mem.NewAccountant(1), Gemm: g.gemm}}}, nil)
	if want := "does not support Ulysses sequence parallelism"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the MLP with sequence_parallel_size 2: %v, want %q", err, want)
	}
}

// TestSeqParallelLlama: Ulysses on tiny-llama (4 heads, 2 kv heads,
// T = 32) — kv heads split over 2 ranks, replicated over 4, and 2 × 2 —
// trains like one rank taking the same global batch at stages 0 and 3:
// losses within 1e-6 relative, final weights within 1e-6 (‖Δ‖/‖w‖).
func TestSeqParallelLlama(t *testing.T) {
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := llama.Preset("tiny-llama")
	if err != nil {
		t.Fatal(err)
	}
	corpus := data.TinyShakespeare()
	const steps, T = 3, 32
	run := func(stage, world, sp int) ([]Record, []float32) {
		t.Helper()
		dp := world / sp
		js := dpAveraging(harnessJSON(stage, 2, 2, 20000, false))
		if world == 1 {
			js = harnessJSON(stage, 2, 2*sp, 20000, false) // sp here: the data-parallel shards to stand for
			dp, sp = 1, 1
		}
		plan, err := dsconfig.Load(withSP(js, sp), dsconfig.Options{WorldSize: world})
		if err != nil {
			t.Fatal(err)
		}
		loader, err := data.NewLoader(corpus, data.Layout{B: 2, T: T, GAS: int(plan.Batch.GradientAccumulationSteps), World: dp})
		if err != nil {
			t.Fatal(err)
		}
		devs := make([]Device, world)
		for r := range devs {
			devs[r] = Device{Acct: mem.NewAccountant(r), Gemm: gemm}
		}
		var recs []Record
		final, err := Run(Config{Plan: plan, Model: mc, Seed: 7, Batches: Tokens(loader, T), SeqLen: T, Steps: steps,
			ReturnParams: true, Devices: devs, Workers: 1}, func(r Record) error { recs = append(recs, r); return nil })
		if err != nil {
			t.Fatal(err)
		}
		return recs, final
	}
	for _, tc := range []struct{ world, sp, stage int }{{2, 2, 0}, {2, 2, 3}, {4, 4, 0}, {4, 2, 0}, {4, 2, 3}} {
		t.Run(fmt.Sprintf("world%d/sp%d/stage%d", tc.world, tc.sp, tc.stage), func(t *testing.T) {
			base, bw := run(tc.stage, 1, tc.world/tc.sp)
			recs, w := run(tc.stage, tc.world, tc.sp)
			lrel := maxRel(recs, base)
			wabs, wrel := fdiff.Weights(w, bw)
			t.Logf("losses max rel Δ %.2e; weights max |Δ| %.2e, ‖Δ‖/‖w‖ %.2e", lrel, wabs, wrel)
			if lrel > 1e-6 || wrel > 1e-6 {
				t.Errorf("differs from one rank: losses %.2e, weights %.2e relative", lrel, wrel)
			}
		})
	}
}

// sharedDenom is a Batches whose micro-batches carry LossDenom, the
// count of targets over the whole global step (HF's num_items_in_batch),
// as the SFT loader sets it.
type sharedDenom struct {
	Batches
	denom float64
}

func (s sharedDenom) Batch(step, micro, rank int, b *model.Batch) error {
	err := s.Batches.Batch(step, micro, rank, b)
	b.LossDenom = s.denom
	return err
}

// TestSeqParallelSharedLoss: with LossDenom set (each micro-batch's loss a
// share of the step's sum) sp 2 × dp 2 trains and logs like one rank on
// the same global batch: the logged step loss counts each SP group once.
func TestSeqParallelSharedLoss(t *testing.T) {
	g := loadGPT(t)
	run := func(world, sp int) ([]Record, []float32) {
		t.Helper()
		dp := world / sp
		plan, err := dsconfig.Load(withSP(harnessJSON(3, 2, 2*2/dp, 20000, false), sp), dsconfig.Options{WorldSize: world})
		if err != nil {
			t.Fatal(err)
		}
		devs := make([]Device, world)
		for r := range devs {
			devs[r] = Device{Acct: mem.NewAccountant(r), Gemm: g.gemm}
		}
		src := gptSamples{tokens: g.tokens, B: 2, gas: int(plan.Batch.GradientAccumulationSteps), world: dp}
		var recs []Record
		final, err := Run(Config{Plan: plan, Model: g.cfg, Init: g.init, Batches: sharedDenom{Tokens(src, 32), 2 * 32 * 4}, SeqLen: 32, Steps: 3,
			ReturnParams: true, Devices: devs, Workers: 1}, func(r Record) error { recs = append(recs, r); return nil })
		if err != nil {
			t.Fatal(err)
		}
		return recs, final
	}
	base, bw := run(1, 1)
	recs, w := run(4, 2)
	lrel := maxRel(recs, base)
	_, wrel := fdiff.Weights(w, bw)
	t.Logf("losses %v vs %v", recs[0].Loss, base[0].Loss)
	if lrel > 1e-6 || wrel > 1e-6 {
		t.Errorf("sp 2 × dp 2 with LossDenom differs from one rank: losses %.2e, weights %.2e relative", lrel, wrel)
	}
}

// TestSeqParallelZeRO3Averaging: DeepSpeed's stage 3 under sequence
// parallelism averages the gradients over every rank on its
// reduce_scatter path (the default, or contiguous_gradients off), over the
// data-parallel ranks otherwise; dszero does the same, so the first step's
// gradient norm there is 1/sp of stage 0's (the DeepSpeed 0.14.5 cases
// gpt/z3_sp2_fp32 and gpt/z3_sp2dp2_fp32 in conformance/testdata hold
// DeepSpeed's own). The plan warns of it, and a tensor larger than
// reduce_bucket_size, which DeepSpeed averages the other way, is refused.
func TestSeqParallelZeRO3Averaging(t *testing.T) {
	g := loadGPT(t)
	js3 := harnessJSON(3, 2, 2, 20000, false)
	norm := func(js string, world, sp int) float64 {
		t.Helper()
		recs, _, err := runSP(t, g, js, world, sp, 1, false)
		if err != nil {
			t.Fatal(err)
		}
		return recs[0].GradNorm
	}
	for _, tc := range []struct{ world, sp int }{{2, 2}, {4, 2}, {4, 4}} {
		want := norm(harnessJSON(0, 2, 2, 20000, false), tc.world, tc.sp)
		for _, v := range []struct {
			name, js string
			ratio    float64
		}{
			{"reduce_scatter (default)", js3, 1 / float64(tc.sp)},
			{"contiguous_gradients false", strings.Replace(dpAveraging(js3), `"reduce_scatter": false,`, `"reduce_scatter": false, "contiguous_gradients": false,`, 1), 1 / float64(tc.sp)},
			{"reduce_scatter false", dpAveraging(js3), 1},
		} {
			got := norm(v.js, tc.world, tc.sp)
			if r := got / want; math.Abs(r-v.ratio) > 1e-6*v.ratio {
				t.Errorf("world %d, sp %d, stage 3 with %s: grad norm %.7g, %.7g × stage 0's; want %.7g×", tc.world, tc.sp, v.name, got, r, v.ratio)
			}
		}
	}
	plan, err := dsconfig.Load(withSP(js3, 2), dsconfig.Options{WorldSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	warned := false
	for _, d := range plan.Diagnostics() {
		warned = warned || (d.Severity == dsconfig.Warning && d.Path == "zero_optimization.reduce_scatter" && strings.Contains(d.Msg, "1/2 of stage 0's"))
	}
	if !warned {
		t.Errorf("no warning of stage 3's averaging over every rank: %v", plan.Diagnostics())
	}
	// qkv.weight has 12288 elements: more than a bucket of 10000.
	_, _, err = runSP(t, g, dpAveraging(harnessJSON(3, 2, 2, 10000, false)), 2, 2, 1, false)
	if want := "raise reduce_bucket_size to at least 16384"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a tensor above reduce_bucket_size with reduce_scatter false: %v, want %q", err, want)
	}
}

// TestSeqParallelFlopsProfiler: under Ulysses the FLOPS profile is rank
// 0's forward, as DeepSpeed's profiler counts it on a rank: the layers on
// its T/sp tokens, attention's core on heads/sp heads over all T tokens,
// so the tiny GPT's per-rank MACs and FLOPs are half of one rank's on the
// whole sequence; the data-parallel size printed is the engine's, W/sp.
// DeepSpeed 0.14.5's own profiler on the same GPT (conformance/reference,
// models.py's twin, DistributedAttention, micro-batch 8, T 32) printed
// 14.16 MMACs per rank at sp 2 and 28.31 MMACs on one rank, and
// "data parallel size: 1" on 2 ranks.
func TestSeqParallelFlopsProfiler(t *testing.T) {
	g := loadGPT(t)
	profile := func(world, sp int) string {
		t.Helper()
		js := strings.Replace(harnessJSON(0, 8, 1, 20000, false), "{", `{"flops_profiler": {"enabled": true, "profile_step": 1, "detailed": false}, `, 1)
		plan, err := dsconfig.Load(withSP(js, sp), dsconfig.Options{WorldSize: world})
		if err != nil {
			t.Fatal(err)
		}
		devs := make([]Device, world)
		for r := range devs {
			devs[r] = Device{Acct: mem.NewAccountant(r), Gemm: g.gemm}
		}
		var out bytes.Buffer
		batches := gptSamples{tokens: g.tokens, B: 8, gas: 1, world: world / sp}
		if _, err := Run(Config{Plan: plan, Model: g.cfg, Init: g.init, Batches: Tokens(batches, 32), SeqLen: 32, Steps: 2,
			Devices: devs, Workers: 1, Stdout: &out}, nil); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	// By hand (DeepSpeed's rules, model/flops.go), B 8, T 32, C 64, M 256,
	// V 64, 4 heads of 16, 2 blocks; N = B·T/sp tokens on the rank, the
	// core on 4/sp heads over T.
	const B, T, C, M, V, H, HS, L = 8, 32, 64, 256, 64, 4, 16, 2
	want := func(sp int64) (macs, flops int64) {
		N, h := B*T/sp, H/sp
		core := 2 * B * h * T * T * HS
		macs = L*(N*C*3*C+N*C*C+2*N*C*M+core) + N*C*V
		flops = 2*macs + L*B*h*T*T + (2*L+1)*5*N*C + L*N*M
		return
	}
	for _, tc := range []struct{ world, sp int }{{1, 1}, {2, 2}, {4, 2}} {
		s := profile(tc.world, tc.sp)
		macs, flops := want(int64(tc.sp))
		for _, re := range []string{
			fmt.Sprintf(`(?m)^world size:\s+%d\s*$`, tc.world),
			fmt.Sprintf(`(?m)^data parallel size:\s+%d\s*$`, tc.world/tc.sp),
			`(?m)^fwd MACs per GPU:\s+` + regexp.QuoteMeta(profiler.MACsToString(macs)) + `\s*$`,
			`(?m)^fwd flops per GPU:\s+` + regexp.QuoteMeta(profiler.NumberToString(float64(flops))) + `\s*$`,
		} {
			if !regexp.MustCompile(re).MatchString(s) {
				t.Errorf("world %d, sp %d: no %s in:\n%s", tc.world, tc.sp, re, s)
			}
		}
	}
	m1, _ := want(1)
	m2, _ := want(2)
	if a, b := profiler.MACsToString(m1), profiler.MACsToString(m2); a != "28.31 MMACs" || b != "14.16 MMACs" {
		t.Errorf("by hand: %s on one rank, %s per rank at sp 2; DeepSpeed printed 28.31 and 14.16 MMACs", a, b)
	}
}
