package main

import (
	"io"
	"strings"
	"testing"
)

// TestMathFlag: dszero train computes with the fast kernels unless
// --math exact; a value that is neither is a usage error naming the flag
// and both choices; dszero conformance has no --math (it is always exact).
func TestMathFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		fast bool
	}{
		{nil, true},
		{[]string{"--math", "fast"}, true},
		{[]string{"--math", "exact"}, false},
		{[]string{"--math=Exact"}, false},
	} {
		f, err := parseTrainFlags(tc.args, io.Discard)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if f.fastMath != tc.fast {
			t.Errorf("%v: fast math %v, want %v", tc.args, f.fastMath, tc.fast)
		}
	}
	code, _, errs := runCLI("train", "--math", "quick", "--steps", "1")
	if code != 2 || !strings.Contains(errs, "math") || !strings.Contains(errs, `"quick"`) || !strings.Contains(errs, "give fast or exact") {
		t.Errorf("train --math quick: exit %d, stderr %q; want exit 2 naming the flag, the value and the choices", code, errs)
	}
	code, _, errs = runCLI("conformance", confRef, "--math", "fast")
	if code != 2 || !strings.Contains(errs, "math") {
		t.Errorf("conformance --math fast: exit %d, stderr %q; want a usage error: conformance is always exact", code, errs)
	}
	_, help, _ := runCLI("help", "train")
	if !strings.Contains(help, "--math fast|exact") {
		t.Errorf("help train does not document --math fast|exact:\n%s", help)
	}
}
