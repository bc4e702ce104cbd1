package conformance

import (
	"os"
	"path/filepath"
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
	// Every recorded checkpoint layout and every DeepSpeed step-5
	// checkpoint shipped was checked, not skipped.
	layouts, _ := filepath.Glob("testdata/deepspeed-0.14.5-cpu/*/*/" + CheckpointRecordFile)
	dsCkpts, _ := filepath.Glob("testdata/deepspeed-0.14.5-cpu/*/*/" + DeepSpeedCheckpoint + "/global_step5")
	var matched, resumed, exact, results int
	for _, r := range reps {
		if r.Status != NoResult {
			results++
		}
		if strings.HasPrefix(r.Checkpoint, "match") {
			matched++
		}
		if r.ResumeLoss != nil && r.ResumeWeights != nil {
			resumed++
		}
		if strings.HasPrefix(r.Resume, "bit-exact") {
			exact++
		}
	}
	if matched != len(layouts) || resumed != len(dsCkpts) || exact != results {
		t.Errorf("%d of %d checkpoint layouts matched, %d of %d DeepSpeed checkpoints resumed, %d of %d cases resumed bit-exact",
			matched, len(layouts), resumed, len(dsCkpts), exact, results)
	}
	t.Logf("%d checkpoint layouts match DeepSpeed's; %d DeepSpeed step-5 checkpoints resumed; %d cases resume bit-exact", matched, resumed, exact)
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
