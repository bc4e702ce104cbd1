package dsconfig

import "testing"

// TestNoOptimizerSaysHowToRunAsTrainer: a config without an optimizer
// block names, in its fix, the HF flags that run it as the Trainer would
// without a mismatch (its micro-batch, accumulation and precision).
func TestNoOptimizerSaysHowToRunAsTrainer(t *testing.T) {
	cases := []struct {
		name, src string
		want      wantDiag
	}{
		{"stage 0 bf16", `{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "bf16": {"enabled": true}}`,
			wantDiag{Unsupported, "optimizer", []string{"--learning_rate 5e-5 --per_device_train_batch_size 4 --gradient_accumulation_steps 2 --bf16"}}},
		{"stage 2 fp32", `{"train_batch_size": 8, "zero_optimization": {"stage": 2}}`,
			wantDiag{Error, "optimizer", []string{"requires an optimizer", "--per_device_train_batch_size 8 --gradient_accumulation_steps 1"}}},
		{"stage 3 offload", `{"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}`,
			wantDiag{Unsupported, "optimizer", []string{"--learning_rate 5e-5 --per_device_train_batch_size 8 --gradient_accumulation_steps 1"}}},
	}
	for _, c := range cases {
		_, diags := compileString(t, c.src, Options{WorldSize: 1})
		if !hasDiag(diags, c.want) {
			t.Errorf("%s: want %v %s %q; got:\n%s", c.name, c.want.sev, c.want.path, c.want.frags, diagText(diags))
		}
	}
}
