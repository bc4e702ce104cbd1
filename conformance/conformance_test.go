package conformance

import (
	"os"
	"strings"
	"testing"
)

// TestReferenceCases runs every run of DeepSpeed 0.14.5's reference (both
// models, testdata/README.md) through dszero and fails on any case that
// does not pass; the runs DeepSpeed never finished are skipped.
func TestReferenceCases(t *testing.T) {
	cases, err := Find("testdata/deepspeed-0.14.5-cpu")
	if err != nil {
		t.Fatal(err)
	}
	var reps []Report
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			r := Run(c)
			reps = append(reps, r)
			t.Logf("%s %s: losses max rel Δ %.2e (micro %.2e), grad norms %.2e, weights max |Δ| %.2e, %.2fs", r.Case, r.Status, r.Loss.MaxRel, r.Micro.MaxRel, r.GradNorm.MaxRel, r.Weights.MaxAbs, r.Seconds)
			switch r.Status {
			case Pass:
			case NoResult:
				t.Skip(r.Reason)
			default:
				t.Errorf("%s: %s", r.Status, r.Reason)
			}
		})
	}
	var b strings.Builder
	if err := WriteTable(&b, reps); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	// CONFORMANCE_TABLE=FILE keeps the table.
	if f := os.Getenv("CONFORMANCE_TABLE"); f != "" {
		if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}
