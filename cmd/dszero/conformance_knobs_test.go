package main

import (
	"regexp"
	"testing"
)

// TestConformanceGeneratedCases runs the cases made with
// conformance/reference/gen_case.py (real DeepSpeed 0.14.5 on the CPU),
// among them gpt_tied/z2_curriculum (DeepSpeed's legacy seqlen
// curriculum) and gpt3/z1_pld (progressive layer drop), whose losses,
// gradient norms and final weights dszero must reproduce.
func TestConformanceGeneratedCases(t *testing.T) {
	code, out, errs := runCLI("conformance", "../../conformance/testdata/deepspeed-0.14.5-cpu-generated")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	for _, re := range []string{`(?m)^gpt_tied/z2_curriculum +pass +2 +fp32 `, `(?m)^gpt3/z1_pld +pass +1 +fp32 `, `(?m)^4 cases: 4 pass, 0 fail`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no %s in:\n%s", re, out)
		}
	}
}
