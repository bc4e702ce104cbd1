package dsconfig

import "testing"

// TestBF16MasterWeightsRules: DeepSpeed 0.19.5's rules for
// bf16_master_weights_and_grads and bf16_optimizer_states (config.py
// _do_error_check, base_optimizer.py _configure_master_weights), each
// refused where DeepSpeed raises with its message; a config DeepSpeed
// runs is refused by name as a feature dszero does not reproduce.
func TestBF16MasterWeightsRules(t *testing.T) {
	const adam = `"optimizer": {"type": "AdamW"}, "train_micro_batch_size_per_gpu": 1, `
	const path = "bf16.bf16_master_weights_and_grads"
	hf := DefaultHFArgs()
	hf.BF16 = true
	for _, c := range []struct {
		name, src string
		hf        bool
		want      wantDiag
	}{
		{"stage 0", `{` + adam + `"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}}`, false,
			wantDiag{Error, path, []string{"only supported with ZeRO Stage 1, 2, or 3"}}},
		{"states at stage 0", `{` + adam + `"bf16": {"enabled": true, "bf16_optimizer_states": true}}`, false,
			wantDiag{Error, "bf16.bf16_optimizer_states", []string{"bf16_optimizer_states is only supported with ZeRO Stage 1, 2, or 3."}}},
		{"states without master", `{` + adam + `"zero_optimization": {"stage": 2}, "bf16": {"enabled": true, "bf16_optimizer_states": true}}`, false,
			wantDiag{Error, "bf16.bf16_optimizer_states", []string{"requires bf16_master_weights_and_grads to be enabled"}}},
		{"stage 2 on the device, fp32 states", `{` + adam + `"zero_optimization": {"stage": 2}, "bf16": {"enabled": true, "bf16_master_weights_and_grads": true}}`, false,
			wantDiag{Error, path, []string{"requires ZeRO-2 Offload with DeepSpeedCPUAdam. Current ZeRO-Offload:False optimizer type FusedAdam"}}},
		{"stage 3 offload with torch AdamW", `{"optimizer": {"type": "AdamW", "params": {"torch_adam": true}}, "train_micro_batch_size_per_gpu": 1, "zero_force_ds_cpu_optimizer": false, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": true, "bf16_master_weights_and_grads": true}}`, false,
			wantDiag{Error, path, []string{"requires ZeRO-3 Offload with DeepSpeedCPUAdam. Current ZeRO-3 Offload:True optimizer type torch.optim.AdamW"}}},
		{"Trainer's CPU Adam with bf16 states", `{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": "auto", "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}}`, true,
			wantDiag{Error, "bf16.bf16_optimizer_states", []string{"fp32_optimizer_states=False"}}},
		// What DeepSpeed runs: offload with DeepSpeedCPUAdam, or bf16
		// states on the device with any optimizer.
		{"stage 2 offload CPU Adam", `{` + adam + `"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": true, "bf16_master_weights_and_grads": true}}`, false,
			wantDiag{Unsupported, path, []string{"the master weight and gradient partitions in bf16", "DeepSpeedCPUAdam"}}},
		{"stage 1 bf16 states on the device", `{` + adam + `"zero_optimization": {"stage": 1}, "bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}}`, false,
			wantDiag{Unsupported, path, []string{"and the optimizer states in bf16", "FusedAdam"}}},
		{"Trainer's CPU Adam, fp32 states", `{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}}, "bf16": {"enabled": "auto", "bf16_master_weights_and_grads": true}}`, true,
			wantDiag{Unsupported, path, []string{"DeepSpeedCPUAdam"}}},
	} {
		opts := Options{WorldSize: 2}
		if c.hf {
			opts.HF = &hf
		}
		_, diags := compileString(t, c.src, opts)
		if !hasDiag(diags, c.want) {
			t.Errorf("%s: want %v %s %q; got:\n%s", c.name, c.want.sev, c.want.path, c.want.frags, diagText(diags))
		}
		if c.want.sev == Unsupported && diags.HasErrors() {
			t.Errorf("%s: DeepSpeed runs it, but:\n%s", c.name, diagText(diags))
		}
	}
}

// TestFP16MasterWeightsRules: fp16_master_weights_and_grads, DeepSpeed
// 0.19.5: ZeRO stage 1-3, not with the bf16 key, and always optimizer
// offload with DeepSpeedCPUAdam; what DeepSpeed runs is refused by name.
func TestFP16MasterWeightsRules(t *testing.T) {
	const adam = `"optimizer": {"type": "AdamW"}, "train_micro_batch_size_per_gpu": 1, `
	const path = "fp16.fp16_master_weights_and_grads"
	for _, c := range []struct {
		name, src string
		want      wantDiag
	}{
		{"stage 0", `{` + adam + `"fp16": {"enabled": true, "fp16_master_weights_and_grads": true}}`,
			wantDiag{Error, path, []string{"Fp16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, or 3."}}},
		{"with the bf16 key", `{` + adam + `"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}, "fp16": {"fp16_master_weights_and_grads": true}, "bf16": {"enabled": true, "bf16_master_weights_and_grads": true}}`,
			wantDiag{Error, path, []string{"mutually exclusive"}}},
		{"on the device", `{` + adam + `"zero_optimization": {"stage": 1}, "fp16": {"enabled": true, "fp16_master_weights_and_grads": true}}`,
			wantDiag{Error, path, []string{"requires ZeRO-1 Offload with DeepSpeedCPUAdam. Current ZeRO-Offload:False optimizer type FusedAdam"}}},
		{"offload CPU Adam", `{` + adam + `"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}, "fp16": {"enabled": true, "fp16_master_weights_and_grads": true}}`,
			wantDiag{Unsupported, path, []string{"in fp16"}}},
	} {
		_, diags := compileString(t, c.src, Options{WorldSize: 2})
		if !hasDiag(diags, c.want) {
			t.Errorf("%s: want %v %s %q; got:\n%s", c.name, c.want.sev, c.want.path, c.want.frags, diagText(diags))
		}
		if c.want.sev == Unsupported && diags.HasErrors() {
			t.Errorf("%s: DeepSpeed runs it, but:\n%s", c.name, diagText(diags))
		}
	}
}
