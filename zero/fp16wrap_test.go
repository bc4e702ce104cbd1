package zero

import (
	"math"
	"testing"

	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model/mlp"
)

// TestFP16WrapperInitialStep: at stage 0 in fp16 the engine starts as
// DeepSpeed's wrappers leave their optimizer after initialize_optimizer_states
// (one torch.optim.AdamW step on zero gradients at the config's lr): the
// step count is 1 and the fp32 master has decayed once, p·(1 − lr·wd) in
// float32, while the fp16 working weights keep their values. In fp32 and
// at stage 1 nothing has stepped.
func TestFP16WrapperInitialStep(t *testing.T) {
	const lr, wd = 1e-3, 0.01
	cfg, _ := mlp.Preset("tiny")
	layout := cfg.Layout()
	init := make([]float32, layout.Numel)
	for i := range init {
		init[i] = float32(i%97-48) / 64 // exactly representable in fp16
	}
	for _, tc := range []struct {
		name    string
		js      string
		stepped bool
	}{
		{"z0_fp16", `"fp16": {"enabled": true}, "zero_optimization": {"stage": 0}`, true},
		{"z0_fp32", `"zero_optimization": {"stage": 0}`, false},
		{"z1_fp16", `"fp16": {"enabled": true}, "zero_optimization": {"stage": 1}`, false},
	} {
		plan := mustPlan(t, `{"train_micro_batch_size_per_gpu": 4, `+tc.js+`,
		  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3, "weight_decay": 0.01}}}`)
		eng, err := NewEngine(plan, Options{Acct: mem.NewAccountant(0), Layout: &layout, Init: init})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := eng.Optimizer().StepCount() == 1, tc.stepped; got != want {
			t.Errorf("%s: the optimizer's step count is %d", tc.name, eng.Optimizer().StepCount())
		}
		master, err := eng.MasterParams()
		if err != nil {
			t.Fatal(err)
		}
		work, _ := eng.ModelBuffers()
		for i, p := range init[:len(master)] {
			want := p
			if tc.stepped {
				want = p * float32(1-lr*wd)
			}
			if math.Float32bits(master[i]) != math.Float32bits(want) {
				t.Fatalf("%s: master[%d] = %v, want %v", tc.name, i, master[i], want)
			}
			if tc.stepped && work[i] != p {
				t.Fatalf("%s: working weight %d = %v, want the initial %v", tc.name, i, work[i], p)
			}
		}
		eng.Close()
	}
}
