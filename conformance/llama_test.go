package conformance

import (
	"slices"
	"strings"
	"testing"
)

// TestLlamaReferenceCases runs the tiny Llama's cases (stages 0-3, fp32,
// 2 ranks) and the tiny Qwen3's (stages 0 and 3): real DeepSpeed 0.14.5 on
// model/llama's plain-PyTorch LlamaForCausalLM and Qwen3ForCausalLM, testdata/deepspeed-0.14.5-cpu-llama/README.md): every
// one passes, its checkpoint layout matches DeepSpeed's, DeepSpeed's step-5
// checkpoint resumes, and dszero's own resume is bit-exact.
func TestLlamaReferenceCases(t *testing.T) {
	const root = "testdata/deepspeed-0.14.5-cpu-llama"
	cases, err := Find(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cases {
		names = append(names, c.Name)
		r := Run(c)
		t.Logf("%s %s: losses max rel Δ %.2e (micro %.2e), grad norms %.2e, weights max |Δ| %.2e, %.2fs", r.Case, r.Status, r.Loss.MaxRel, r.Micro.MaxRel, r.GradNorm.MaxRel, r.Weights.MaxAbs, r.Seconds)
		switch {
		case r.Status != Pass:
			t.Errorf("%s: %s: %s", c.Name, r.Status, r.Reason)
		case !strings.HasPrefix(r.Checkpoint, "match"):
			t.Errorf("%s: checkpoint layout %s", c.Name, r.Checkpoint)
		case r.ResumeLoss == nil || r.ResumeWeights == nil || !strings.HasPrefix(r.Resume, "bit-exact"):
			t.Errorf("%s: resume %s (DeepSpeed's checkpoint resumed: %v)", c.Name, r.Resume, r.ResumeLoss != nil)
		}
	}
	if want := []string{"llama/z0_fp32", "llama/z1_fp32", "llama/z2_fp32", "llama/z3_fp32", "qwen3/z0_fp32", "qwen3/z3_fp32"}; !slices.Equal(names, want) {
		t.Errorf("cases %v, want %v", names, want)
	}
}
