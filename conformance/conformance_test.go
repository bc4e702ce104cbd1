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

// TestReferenceFacts checks the facts DeepSpeed 0.14.5's own code produced
// (conformance/reference/facts.py): every kind present, every value equal.
func TestReferenceFacts(t *testing.T) {
	cases, err := Find("testdata/deepspeed-0.14.5-facts")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, c := range cases {
		r := Run(c)
		kinds[r.Kind] += r.Facts.N
		t.Logf("%s %s: %d entries, %d values, max rel Δ %.2e", r.Case, r.Status, r.Steps, r.Facts.N, r.Facts.MaxRel)
		if r.Status != Pass {
			t.Errorf("%s: %s: %s", r.Case, r.Status, r.Reason)
		}
	}
	for _, k := range []string{KindLRSchedule, KindLossScaler, KindEstimator, KindZeroToFP32} {
		if kinds[k] == 0 {
			t.Errorf("no %s values compared", k)
		}
	}
}

// TestFactsFindDifferences changes one recorded value of each kind and
// expects the case to fail, naming the entry.
func TestFactsFindDifferences(t *testing.T) {
	for _, tc := range []struct{ dir, from, to, want string }{
		{"lr_schedules", `0.0002800000000000001`, `0.00028000001`, "OneCycle: lr of step 2"},
		{"loss_scaler", `"scale": 536870912.0`, `"scale": 536870911.0`, "zero_default_burst: scale after update 3"},
		{"estimators", `"gpu": 5566000000`, `"gpu": 5566000001`, "gpu bytes"},
		{"zero_to_fp32", `"padding": 2`, `"padding": 3`, "padding"},
	} {
		raw, err := os.ReadFile(filepath.Join("testdata/deepspeed-0.14.5-facts", tc.dir, FactsFile))
		if err != nil {
			t.Fatal(err)
		}
		changed := strings.Replace(string(raw), tc.from, tc.to, 1)
		if changed == string(raw) {
			t.Fatalf("%s: %q not in the facts", tc.dir, tc.from)
		}
		dir := filepath.Join(t.TempDir(), tc.dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, FactsFile), []byte(changed), 0o644); err != nil {
			t.Fatal(err)
		}
		r := Run(Case{Name: tc.dir, Dir: dir, Facts: true})
		if r.Status != Fail || !strings.Contains(r.Reason, tc.want) {
			t.Errorf("%s: %s: %s; want a failure naming %q", tc.dir, r.Status, r.Reason, tc.want)
		}
	}
}
