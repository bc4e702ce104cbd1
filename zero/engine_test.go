package zero

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/mlp"
	"github.com/dszero/dszero/zero/lrsched"
)

const mlpRef = "../model/mlp/testdata/"

func mustPlan(t *testing.T, js string) dsconfig.Plan {
	t.Helper()
	p, err := dsconfig.Load(js, dsconfig.Options{WorldSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func gonumEngine(t *testing.T) blas.Engine {
	t.Helper()
	e, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// mlpRun trains the harness's TinyMLP with plan for steps steps on the
// reference data (micro-batch mb = micro of step s: samples [4mb, 4mb+4)).
func mlpRun(t *testing.T, plan dsconfig.Plan, steps int, v Version, x, y []float32, init []float32, corrupt func(step int, grads []float32)) ([]StepStats, []float64, []float32) {
	t.Helper()
	cfg, _ := mlp.Preset("tiny")
	layout := cfg.Layout()
	acct := mem.NewAccountant(0)
	eng, err := NewEngine(plan, Options{Acct: acct, Layout: &layout, Init: init, Workers: 2, Version: v})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	m, err := mlp.New(cfg, mlp.Options{Gemm: gonumEngine(t), Acct: acct, Hooks: eng.Strategy(), Round: eng.Round()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Bind(eng.ModelBuffers()); err != nil {
		t.Fatal(err)
	}
	B, gas := int(plan.Batch.TrainMicroBatchSizePerGPU), int(plan.Batch.GradientAccumulationSteps)
	var stats []StepStats
	var losses []float64
	for s := 0; s < steps; s++ {
		sum := 0.0
		for micro := 0; micro < gas; micro++ {
			lo := (s*16 + micro*B) // sample index within the step's 16
			loss, err := m.Forward(model.Batch{X: x[lo*16 : (lo+B)*16], B: B, Y: y[lo*8 : (lo+B)*8]})
			if err != nil {
				t.Fatal(err)
			}
			sum += float64(loss)
			if err := m.Backward(eng.GradScale()); err != nil {
				t.Fatal(err)
			}
		}
		if corrupt != nil {
			_, g := eng.ModelBuffers()
			corrupt(s, g)
		}
		st, err := eng.Step()
		if err != nil {
			t.Fatal(err)
		}
		stats = append(stats, st)
		losses = append(losses, sum/float64(gas))
	}
	master, err := eng.MasterParams()
	if err != nil {
		t.Fatal(err)
	}
	return stats, losses, append([]float32(nil), master...)
}

func loadMLPRef(t *testing.T) (x, y, init, final []float32, refLoss []float64) {
	t.Helper()
	cfg, _ := mlp.Preset("tiny")
	layout := cfg.Layout()
	init = make([]float32, layout.Numel)
	final = make([]float32, layout.Numel)
	if err := model.ReadLayout(mlpRef+"mlp_init.safetensors", &layout, init); err != nil {
		t.Fatal(err)
	}
	if err := model.ReadLayout(mlpRef+"plain_dsclip_final_fp32.safetensors", &layout, final); err != nil {
		t.Fatal(err)
	}
	f, err := model.OpenSafetensors(mlpRef + "mlp_data.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	x, y = make([]float32, 10*16*16), make([]float32, 10*16*8)
	if err := f.ReadFloat32("x", x); err != nil {
		t.Fatal(err)
	}
	if err := f.ReadFloat32("y", y); err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Steps []struct {
			Loss float64 `json:"loss"`
		} `json:"steps"`
	}
	raw, err := os.ReadFile(mlpRef + "plain_dsclip_result.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	for _, s := range ref.Steps {
		refLoss = append(refLoss, s.Loss)
	}
	return
}

const harnessConfig = `{
  "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 10, "warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3, "warmup_num_steps": 3, "warmup_type": "linear"}}
}`

// TestMLPPlainPyTorchParity: 10 steps of the harness's MLP setup equal plain
// PyTorch (losses within 1e-5 relative, weights within 1e-5 absolute).
func TestMLPPlainPyTorchParity(t *testing.T) {
	x, y, init, want, refLoss := loadMLPRef(t)
	_, losses, final := mlpRun(t, mustPlan(t, harnessConfig), 10, lrsched.DeepSpeed0145, x, y, init, nil)
	for i, l := range losses {
		if rel := math.Abs(l-refLoss[i]) / refLoss[i]; rel > 1e-5 {
			t.Errorf("step %d: loss %.9g, PyTorch %.9g (rel %.2g)", i+1, l, refLoss[i], rel)
		}
	}
	maxd := 0.0
	for i := range final {
		maxd = math.Max(maxd, math.Abs(float64(final[i]-want[i])))
	}
	t.Logf("max |Δ| of final weights: %.3g", maxd)
	if maxd > 1e-5 {
		t.Errorf("final weights differ by %.3g", maxd)
	}
}

// TestFP16OverflowSkipsStep injects an inf gradient: the step is skipped,
// the weights and the scheduler stay, and the loss scale follows
// FP16_Optimizer's rule (halved at once, no hysteresis without ZeRO).
func TestFP16OverflowSkipsStep(t *testing.T) {
	x, y, init, _, _ := loadMLPRef(t)
	plan := mustPlan(t, `{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4,
	  "fp16": {"enabled": true, "initial_scale_power": 8, "loss_scale_window": 2},
	  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3}},
	  "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3, "warmup_num_steps": 5, "warmup_type": "linear"}}}`)
	stats, _, _ := mlpRun(t, plan, 7, lrsched.DeepSpeed0195, x, y, init, func(step int, g []float32) {
		if step == 2 {
			g[7] = float32(math.Inf(1))
		}
	})
	// FP16_Optimizer: on overflow at iteration 2 the scale halves; it doubles
	// when stable = iter - last_overflow - 1 > 0 and stable % window == 0,
	// i.e. after iteration 5, so step 7 (iteration 6) runs at 256 again.
	wantScale := []float64{256, 256, 256, 128, 128, 128, 256}
	for i, st := range stats {
		if st.LossScale != wantScale[i] {
			t.Errorf("step %d: loss scale %g, want %g", st.Step, st.LossScale, wantScale[i])
		}
		if st.Skipped != (i == 2) {
			t.Errorf("step %d: skipped=%v", st.Step, st.Skipped)
		}
	}
	// The skipped step does not advance the schedule: steps 3 and 4 use the same lr.
	if stats[2].LR != stats[3].LR || stats[1].LR == stats[2].LR {
		t.Errorf("lr around the skipped step: %g %g %g", stats[1].LR, stats[2].LR, stats[3].LR)
	}
}

// TestAccumulationEqualsLargerBatch: micro 4 × 4 accumulation steps equals
// one micro-batch of 16.
func TestAccumulationEqualsLargerBatch(t *testing.T) {
	x, y, init, _, _ := loadMLPRef(t)
	_, la, wa := mlpRun(t, mustPlan(t, harnessConfig), 3, lrsched.DeepSpeed0195, x, y, init, nil)
	big := `{"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
	  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3, "weight_decay": 0.01}},
	  "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 10, "warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3, "warmup_num_steps": 3, "warmup_type": "linear"}}}`
	_, lb, wb := mlpRun(t, mustPlan(t, big), 3, lrsched.DeepSpeed0195, x, y, init, nil)
	for i := range la {
		if math.Abs(la[i]-lb[i]) > 1e-6*math.Abs(lb[i]) {
			t.Errorf("step %d: loss %g vs %g", i+1, la[i], lb[i])
		}
	}
	for i := range wa {
		if math.Abs(float64(wa[i]-wb[i])) > 1e-6 {
			t.Fatalf("weight %d: %g vs %g", i, wa[i], wb[i])
		}
	}
}

// TestUnsupportedRefusedByName: a plan that asks for something dszero does
// not run is refused with the feature's name.
func TestUnsupportedRefusedByName(t *testing.T) {
	cfg, _ := mlp.Preset("tiny")
	layout := cfg.Layout()
	for js, want := range map[string]string{
		`{"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "OneBitLamb"}, "fp16": {"enabled": true}}`:                                                               "1-bit Lamb under fp16",
		`{"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}}`: "offload_optimizer",
	} {
		_, err := NewEngine(mustPlan(t, js), Options{Acct: mem.NewAccountant(0), Layout: &layout, Init: make([]float32, layout.Numel)})
		if err == nil {
			t.Errorf("%s: accepted", js)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to name %q", js, err, want)
		}
	}
}

// TestDeviceBudget: a budget smaller than the model states fails like an
// out-of-memory error that names the category.
func TestDeviceBudget(t *testing.T) {
	cfg, _ := mlp.Preset("tiny")
	layout := cfg.Layout()
	acct := mem.NewAccountant(0)
	acct.SetCapacity(mem.Device, int64(layout.Numel)*4*2)
	_, err := NewEngine(mustPlan(t, harnessConfig), Options{Acct: acct, Layout: &layout, Init: make([]float32, layout.Numel)})
	var oom *mem.OOMError
	if err == nil || !errors.As(err, &oom) {
		t.Fatalf("want an OOM error, got %v", err)
	}
	t.Log(err)
}
