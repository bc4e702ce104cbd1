package dsconfig

import "testing"

// TestTorchAutocast: DeepSpeed 0.19.5 parses torch_autocast.dtype and
// lower_precision_safe_modules whether or not the block is enabled, and
// raises ValueError on a dtype outside DtypeEnum or a module list that is
// not strings; an enabled block is refused by name with the reason.
func TestTorchAutocast(t *testing.T) {
	const base = `{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}, "torch_autocast": `
	for _, c := range []struct {
		block string
		want  wantDiag
		dtype string
	}{
		{`{"enabled": false, "dtype": "bfloat8"}`, wantDiag{Error, "torch_autocast.dtype", []string{"Invalid dtype for torch autocast"}}, ""},
		{`{"lower_precision_safe_modules": ["torch.nn.Linear", 3]}`, wantDiag{Error, "torch_autocast.lower_precision_safe_modules", []string{"Expected list of strings"}}, ""},
		{`{"enabled": true, "dtype": "torch.bfloat16", "lower_precision_safe_modules": ["torch.nn.Linear"]}`,
			wantDiag{Unsupported, "torch_autocast.enabled", []string{"dtype bf16", "per-op dtype flow", `"bf16": {"enabled": true}`}}, "bf16"},
		{`{"enabled": true, "dtype": "half"}`, wantDiag{Unsupported, "torch_autocast.enabled", []string{"dtype fp16", `"fp16": {"enabled": true}`}}, "fp16"},
		{`{"enabled": true}`, wantDiag{Unsupported, "torch_autocast.enabled", []string{"the device's default"}}, ""},
	} {
		p, diags := compileString(t, base+c.block+`}`, Options{WorldSize: 1})
		if !hasDiag(diags, c.want) {
			t.Errorf("%s: want %v %s %q; got:\n%s", c.block, c.want.sev, c.want.path, c.want.frags, diagText(diags))
		}
		if c.want.sev == Unsupported && (diags.HasErrors() || !p.Precision.TorchAutocast || p.Precision.TorchAutocastDType != c.dtype) {
			t.Errorf("%s: plan %+v\n%s", c.block, p.Precision, diagText(diags))
		}
	}
	// Disabled and well-formed: nothing to say.
	_, diags := compileString(t, base+`{"enabled": false, "dtype": "bf16"}}`, Options{WorldSize: 1})
	if len(diags.Filter(Error))+len(diags.Filter(Unsupported)) != 0 {
		t.Errorf("disabled: %s", diagText(diags))
	}
}
