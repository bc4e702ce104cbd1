package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/fdiff"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/zero/lrsched"
)

// gptSamples serves the harness's GPT data to any split of a global batch
// of G = B·GAS·world samples: step s, micro-batch mb (rank r reads
// mb = micro·world + r) takes samples s·G + mb·B … + B−1 (mod 160). For
// B 4, GAS 2, world 2 that is the harness's own layout.
type gptSamples struct {
	tokens        []int64 // [160, 33]
	B, gas, world int
}

func (g gptSamples) Micro(step, micro, rank int, in, tg []int32) {
	G := g.B * g.gas * g.world
	mb := micro*g.world + rank
	for b := 0; b < g.B; b++ {
		row := g.tokens[((step*G+mb*g.B+b)%160)*33:][:33]
		for t := 0; t < 32; t++ {
			in[b*32+t] = int32(row[t])
			tg[b*32+t] = int32(row[t+1])
		}
	}
}

type gptRef struct {
	cfg    gpt.Config
	layout model.Layout
	init   []float32
	tokens []int64
	gemm   blas.Engine
}

func loadGPT(t *testing.T) gptRef {
	t.Helper()
	cfg, _ := gpt.Preset("tiny")
	g := gptRef{cfg: cfg, layout: cfg.Layout()}
	g.init = make([]float32, g.layout.Numel)
	if err := model.ReadLayout(refDir+"gpt_init.safetensors", &g.layout, g.init); err != nil {
		t.Fatal(err)
	}
	f, err := model.OpenSafetensors(refDir + "gpt_data.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g.tokens = make([]int64, 160*33)
	if err := f.ReadInt64("tokens", g.tokens); err != nil {
		t.Fatal(err)
	}
	if g.gemm, err = blas.New(blas.Options{Backend: blas.Gonum}); err != nil {
		t.Fatal(err)
	}
	return g
}

// harnessJSON is the harness's setup at a stage, batch split and bucket.
func harnessJSON(stage, micro, gas, bucket int, overlap bool) string {
	return fmt.Sprintf(`{
  "train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": %d, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 10, "warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3, "warmup_num_steps": 3, "warmup_type": "linear"}},
  "zero_optimization": {"stage": %d, "reduce_bucket_size": %d, "overlap_comm": %v}
}`, micro, gas, stage, bucket, overlap)
}

// runGPT trains the tiny GPT on world ranks and returns the records and
// the final fp32 weights.
func runGPT(t *testing.T, g gptRef, js string, world, steps int, v lrsched.Version) ([]Record, []float32) {
	t.Helper()
	plan, err := dsconfig.Load(js, dsconfig.Options{WorldSize: world})
	if err != nil {
		t.Fatal(err)
	}
	devs := make([]Device, world)
	for r := range devs {
		devs[r] = Device{Acct: mem.NewAccountant(r), Gemm: g.gemm}
	}
	batches := gptSamples{tokens: g.tokens, B: int(plan.Batch.TrainMicroBatchSizePerGPU), gas: int(plan.Batch.GradientAccumulationSteps), world: world}
	var recs []Record
	final, err := Run(Config{Plan: plan, Model: g.cfg, Init: g.init, Batches: Tokens(batches, 32), SeqLen: 32, Steps: steps, ReturnParams: true,
		Devices: devs, Version: v, Workers: 1}, func(r Record) error { recs = append(recs, r); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return recs, final
}

func maxRel(got []Record, want []Record) float64 {
	m := 0.0
	for i := range got {
		m = math.Max(m, math.Abs(got[i].Loss-want[i].Loss)/math.Abs(want[i].Loss))
	}
	return m
}

// TestWorldParityGPT: stages 0, 1 and 2 on 1 to 4 in-process ranks train
// the tiny GPT (tied embeddings: the head borrows wte) like one rank of
// stage 0 on the same global batches: losses within 1e-6 relative,
// weights within 1e-6 of each tensor's scale. Buckets of 20000 elements
// (the model has 110336) split the reductions; stage 2 overlaps them at
// even world sizes.
func TestWorldParityGPT(t *testing.T) {
	g := loadGPT(t)
	const steps = 3
	for world := 1; world <= 4; world++ {
		base, bw := runGPT(t, g, harnessJSON(0, 2, 2*world, 500000000, false), 1, steps, lrsched.DeepSpeed0195)
		for stage := 0; stage <= 3; stage++ {
			t.Run(fmt.Sprintf("stage%d/world%d", stage, world), func(t *testing.T) {
				recs, w := runGPT(t, g, harnessJSON(stage, 2, 2, 20000, stage == 2 && world%2 == 0), world, steps, lrsched.DeepSpeed0195)
				lrel := maxRel(recs, base)
				wabs, wrel := fdiff.Weights(w, bw)
				t.Logf("losses max rel Δ %.2e; weights max |Δ| %.2e, ‖Δ‖/‖w‖ %.2e", lrel, wabs, wrel)
				if lrel > 1e-6 {
					t.Errorf("losses differ from one rank by %.2e relative", lrel)
				}
				if wrel > 1e-6 {
					t.Errorf("final weights differ from one rank by %.2e relative (‖Δ‖/‖w‖)", wrel)
				}
			})
		}
	}
}

// dsResult is the part of a reference run's result.json read here.
type dsResult struct {
	Steps []struct {
		LRUsed      float64              `json:"lr_used"`
		Loss        float64              `json:"loss"`
		GradNorm    float64              `json:"grad_norm"`
		MicroLosses map[string][]float64 `json:"micro_losses"`
	} `json:"steps"`
	FinalIdenticalTo string `json:"final_fp32_identical_to"`
}

// vsDeepSpeed compares a run with DeepSpeed's record of it: the largest
// relative differences of the step losses and gradient norms, and the
// largest absolute difference of the final weights from want. A step run
// at another lr than DeepSpeed's is an error.
func vsDeepSpeed(t *testing.T, recs []Record, final []float32, ref dsResult, want []float32) (loss, norm, wabs float64) {
	t.Helper()
	for i, r := range recs {
		w := ref.Steps[i]
		loss = math.Max(loss, math.Abs(r.Loss-w.Loss)/w.Loss)
		norm = math.Max(norm, math.Abs(r.GradNorm-w.GradNorm)/w.GradNorm)
		if r.LR != w.LRUsed {
			t.Errorf("step %d: lr %g, DeepSpeed %g", r.Step, r.LR, w.LRUsed)
		}
	}
	wabs, _ = fdiff.Weights(final, want)
	return loss, norm, wabs
}

// TestDeepSpeedParityGPT reproduces DeepSpeed 0.14.5's 2-rank fp32 runs of
// the tiny GPT at stages 0, 1 and 2 (micro 4, GAS 2, 10 steps; see
// testdata/README.md): step losses and gradient norms within 1e-5
// relative, final weights within 1e-5 absolute.
func TestDeepSpeedParityGPT(t *testing.T) {
	g := loadGPT(t)
	finals := map[string]string{
		"plain_dsclip":    refDir + "plain_dsclip_final_fp32.safetensors",
		"plain_torchclip": "testdata/gpt_plain_torchclip_final_fp32.safetensors",
		"":                "testdata/gpt_z2_fp32_final_fp32.safetensors",
	}
	for stage := 0; stage <= 3; stage++ {
		t.Run(fmt.Sprintf("z%d_fp32", stage), func(t *testing.T) {
			var ref dsResult
			raw, err := os.ReadFile(fmt.Sprintf("testdata/gpt_z%d_fp32_result.json", stage))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &ref); err != nil {
				t.Fatal(err)
			}
			want := make([]float32, g.layout.Numel)
			file := finals[ref.FinalIdenticalTo]
			if stage == 3 {
				file = "testdata/gpt_z3_fp32_final_fp32.safetensors"
			}
			if err := model.ReadLayout(file, &g.layout, want); err != nil {
				t.Fatal(err)
			}
			recs, final := runGPT(t, g, harnessJSON(stage, 4, 2, 500000000, false), 2, 10, lrsched.DeepSpeed0145)
			loss, norm, wabs := vsDeepSpeed(t, recs, final, ref, want)
			t.Logf("vs DeepSpeed: step losses max rel Δ %.2e, grad norms %.2e; final weights max |Δ| %.2e", loss, norm, wabs)
			if loss > 1e-5 || norm > 1e-5 {
				t.Errorf("losses or gradient norms differ from DeepSpeed by more than 1e-5 relative")
			}
			if wabs > 1e-5 {
				t.Errorf("final weights differ from DeepSpeed's by %.2e", wabs)
			}
		})
	}
}

// TestRankFailure: a rank that runs out of memory makes the run fail
// with that rank's error, promptly, instead of the others' collectives
// hanging; the others' "rank 1 failed" errors are left out.
func TestRankFailure(t *testing.T) {
	g := loadGPT(t)
	plan, err := dsconfig.Load(harnessJSON(2, 2, 2, 20000, true), dsconfig.Options{WorldSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	devs := make([]Device, 3)
	for r := range devs {
		devs[r] = Device{Acct: mem.NewAccountant(r), Gemm: g.gemm}
	}
	devs[1].Acct.SetCapacity(mem.Device, 1_100_000) // room for the model states, not for the activations
	_, err = Run(Config{Plan: plan, Model: g.cfg, Init: g.init, Batches: Tokens(gptSamples{g.tokens, 2, 2, 3}, 32), SeqLen: 32, Steps: 2,
		Devices: devs, Workers: 1}, nil)
	t.Log(err)
	var oom *mem.OOMError
	if !errors.As(err, &oom) || oom.Rank != 1 || !strings.HasPrefix(err.Error(), "rank 1: ") || strings.Contains(err.Error(), "rank 0:") {
		t.Errorf("want rank 1's out-of-memory error alone, got %v", err)
	}
}

// stalling serves gptSamples, except that rank victim stops for good when
// it asks for step stopAt's data (a hung data loader, a deadlock).
type stalling struct {
	gptSamples
	victim, stopAt int
	stopped        chan struct{}
}

func (s stalling) Micro(step, micro, rank int, in, tg []int32) {
	if rank == s.victim && step == s.stopAt {
		<-s.stopped
	}
	s.gptSamples.Micro(step, micro, rank, in, tg)
}

// TestStoppedRankTimesOut: a rank that stops during step 3 makes the run
// fail within the communicator timeout (2s here), naming the step, the
// collective and the rank that did not arrive, and naming the stopped rank
// as stopped or hung, instead of waiting for it forever.
func TestStoppedRankTimesOut(t *testing.T) {
	g := loadGPT(t)
	plan, err := dsconfig.Load(harnessJSON(2, 2, 2, 20000, true), dsconfig.Options{WorldSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	devs := []Device{{mem.NewAccountant(0), g.gemm}, {mem.NewAccountant(1), g.gemm}}
	stopped := make(chan struct{})
	defer close(stopped)
	done := make(chan error, 1)
	go func() {
		_, err := Run(Config{Plan: plan, Model: g.cfg, Init: g.init, Batches: Tokens(stalling{gptSamples{g.tokens, 2, 2, 2}, 1, 2, stopped}, 32), SeqLen: 32, Steps: 5,
			Devices: devs, Workers: 1, Timeout: 2 * time.Second}, nil)
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute): // generous: the run ends ~7s after the stop
		t.Fatal("Run did not return 2 minutes after rank 1 stopped")
	}
	t.Log(err)
	for _, want := range []string{"rank 0: step 3", "on world (rank 0 of 2): timed out after 2s: rank 1 did not arrive", "rank 1: stopped or hung"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q", want)
		}
	}
	if !errors.Is(err, comm.ErrTimeout) {
		t.Errorf("error is not a comm.ErrTimeout: %v", err)
	}
}

// TestStopAllRanks: ErrStop from onStep (called on rank 0) ends every rank
// after that step, and the parameters are still gathered.
func TestStopAllRanks(t *testing.T) {
	g := loadGPT(t)
	plan, err := dsconfig.Load(harnessJSON(1, 2, 1, 20000, false), dsconfig.Options{WorldSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	devs := []Device{{mem.NewAccountant(0), g.gemm}, {mem.NewAccountant(1), g.gemm}}
	steps := 0
	final, err := Run(Config{Plan: plan, Model: g.cfg, Init: g.init, Batches: Tokens(gptSamples{g.tokens, 2, 1, 2}, 32), SeqLen: 32, Steps: 5,
		ReturnParams: true, Devices: devs, Workers: 1}, func(r Record) error {
		steps++
		if r.Step == 2 {
			return ErrStop
		}
		return nil
	})
	if err != nil || steps != 2 || len(final) != g.layout.Numel {
		t.Errorf("stopped after %d steps, %d parameters, error %v", steps, len(final), err)
	}
	_, err = Run(Config{Plan: plan, Model: g.cfg, Init: g.init, Batches: Tokens(gptSamples{g.tokens, 2, 1, 2}, 32), SeqLen: 32, Steps: 5,
		ReturnParams: true, Devices: devs, Workers: 1}, func(r Record) error { return errors.New("disk full") })
	if err == nil || err.Error() != "rank 0: disk full" {
		t.Errorf("onStep's error: got %v", err)
	}
}
