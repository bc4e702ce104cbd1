package dsconfig

import "testing"

// TestZeroPPKeys: qwZ and qgZ compile at stage 3 with fp16; off fp16
// they run with a warning (DeepSpeed would quantize the wrong bits, dszero
// quantizes the values); a communication_data_type other than the model's
// is refused with qgZ; at other stages DeepSpeed ignores them, and so does
// dszero, with a warning;
// zeropp_loco_param (LoCo, newer than 0.14.5) is refused with qgZ and
// ignored, with a warning, without it.
func TestZeroPPKeys(t *testing.T) {
	const fp16 = `"fp16": {"enabled": true}`
	for _, c := range []struct {
		prec, zero string
		want       []wantDiag
		clean      bool // no diagnostic about the ZeRO++ keys, both on in the plan
		runs       bool // no error or unsupported diagnostic at all
	}{
		{prec: fp16, zero: `{"stage": 3, "zero_quantized_weights": true, "zero_quantized_gradients": true}`, clean: true},
		{prec: fp16, zero: `{"stage": 2, "zero_quantized_weights": true}`, want: []wantDiag{{Warning, "zero_optimization.zero_quantized_weights", []string{"stage 3", "ignored at stage 2"}}}},
		{prec: fp16, zero: `{"stage": 1, "zero_quantized_gradients": true}`, want: []wantDiag{{Warning, "zero_optimization.zero_quantized_gradients", []string{"ignored at stage 1"}}}},
		{prec: fp16, zero: `{"stage": 3, "zero_quantized_gradients": true, "zeropp_loco_param": {"err_beta": 0.8, "reset_T": 1024}}`, want: []wantDiag{{Unsupported, "zero_optimization.zeropp_loco_param", []string{"LoCo"}}}},
		{prec: fp16, zero: `{"stage": 3, "zeropp_loco_param": {"err_beta": 0.8}}`, want: []wantDiag{{Warning, "zero_optimization.zeropp_loco_param", []string{"ignores it"}}}},
		{prec: fp16, zero: `{"stage": 3, "zero_quantized_nontrainable_weights": true}`, want: []wantDiag{{Unsupported, "zero_optimization.zero_quantized_nontrainable_weights", nil}}},
		{prec: `"bf16": {"enabled": true}`, zero: `{"stage": 3, "zero_quantized_weights": true, "zero_quantized_gradients": true}`, want: []wantDiag{
			{Warning, "zero_optimization.zero_quantized_weights", []string{"qwZ with bf16", "__half", "quantizes the bf16 values"}},
			{Warning, "zero_optimization.zero_quantized_gradients", []string{"qgZ with bf16"}}}, runs: true},
		{prec: `"fp16": {"enabled": false}`, zero: `{"stage": 3, "zero_quantized_weights": true}`, want: []wantDiag{
			{Warning, "zero_optimization.zero_quantized_weights", []string{"qwZ with fp32"}}}, runs: true},
		{prec: `"bf16": {"enabled": true}, "communication_data_type": "bf16"`, zero: `{"stage": 3, "zero_quantized_gradients": true}`, want: []wantDiag{
			{Warning, "zero_optimization.zero_quantized_gradients", []string{"qgZ with bf16"}}}, runs: true},
		{prec: fp16 + `, "communication_data_type": "fp32"`, zero: `{"stage": 3, "zero_quantized_gradients": true}`, want: []wantDiag{
			{Unsupported, "zero_optimization.zero_quantized_gradients", []string{"communication_data_type", "(fp16)"}}}},
		{prec: `"bf16": {"enabled": true}, "communication_data_type": "fp16"`, zero: `{"stage": 3, "zero_quantized_gradients": true}`, want: []wantDiag{
			{Unsupported, "zero_optimization.zero_quantized_gradients", []string{"communication_data_type", "(bf16)"}}}},
	} {
		src := `{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}, ` + c.prec + `, "zero_optimization": ` + c.zero + `}`
		p, ds := compileString(t, src, Options{})
		for _, w := range c.want {
			if !hasDiag(ds, w) {
				t.Errorf("%s: no %v diagnostic at %s naming %q; got %v", src, w.sev, w.path, w.frags, ds)
			}
		}
		if c.runs {
			for _, d := range ds {
				if d.Severity != Warning {
					t.Errorf("%s: want it to run; got %v", src, d)
				}
			}
		}
		if !c.clean {
			continue
		}
		for _, d := range ds {
			if d.Path == "zero_optimization.zero_quantized_weights" || d.Path == "zero_optimization.zero_quantized_gradients" {
				t.Errorf("%s: unexpected %v", src, d)
			}
		}
		if !p.Zero.QuantizedWeights || !p.Zero.QuantizedGradients {
			t.Errorf("%s: plan %+v", src, p.Zero)
		}
	}
}
