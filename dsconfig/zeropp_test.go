package dsconfig

import "testing"

// TestZeroPPKeys: qwZ and qgZ compile at stage 3 (the engine refuses
// them off fp16); elsewhere DeepSpeed ignores them, and so does dszero,
// with a warning; zeropp_loco_param (LoCo, newer than 0.14.5) is refused
// with qgZ and ignored, with a warning, without it.
func TestZeroPPKeys(t *testing.T) {
	const head = `{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}, "fp16": {"enabled": true}, "zero_optimization": `
	for _, c := range []struct {
		zero string
		want []wantDiag
		none string // a path with no diagnostic
	}{
		{zero: `{"stage": 3, "zero_quantized_weights": true, "zero_quantized_gradients": true}`, none: "zero_optimization.zero_quantized_weights"},
		{zero: `{"stage": 2, "zero_quantized_weights": true}`, want: []wantDiag{{Warning, "zero_optimization.zero_quantized_weights", []string{"stage 3", "ignored at stage 2"}}}},
		{zero: `{"stage": 1, "zero_quantized_gradients": true}`, want: []wantDiag{{Warning, "zero_optimization.zero_quantized_gradients", []string{"ignored at stage 1"}}}},
		{zero: `{"stage": 3, "zero_quantized_gradients": true, "zeropp_loco_param": {"err_beta": 0.8, "reset_T": 1024}}`, want: []wantDiag{{Unsupported, "zero_optimization.zeropp_loco_param", []string{"LoCo"}}}},
		{zero: `{"stage": 3, "zeropp_loco_param": {"err_beta": 0.8}}`, want: []wantDiag{{Warning, "zero_optimization.zeropp_loco_param", []string{"ignores it"}}}},
		{zero: `{"stage": 3, "zero_quantized_nontrainable_weights": true}`, want: []wantDiag{{Unsupported, "zero_optimization.zero_quantized_nontrainable_weights", nil}}},
	} {
		p, ds := compileString(t, head+c.zero+"}", Options{})
		for _, w := range c.want {
			if !hasDiag(ds, w) {
				t.Errorf("%s: no %v diagnostic at %s naming %q; got %v", c.zero, w.sev, w.path, w.frags, ds)
			}
		}
		for _, d := range ds {
			if c.none != "" && d.Path == c.none {
				t.Errorf("%s: unexpected %v", c.zero, d)
			}
		}
		if c.none != "" && (!p.Zero.QuantizedWeights || !p.Zero.QuantizedGradients) {
			t.Errorf("%s: plan %+v", c.zero, p.Zero)
		}
	}
}
