package conformance

import (
	"math"
	"strings"
	"testing"

	"github.com/dszero/dszero/device"
)

const onebitCases = "testdata/deepspeed-0.14.5-cpu-onebit"

// TestOneBitResumeCases runs the 1-bit optimizers' save-and-resume cases
// (DeepSpeed 0.14.5's OnebitAdam, ZeroOneAdam and OnebitLamb on the MLP,
// testdata/deepspeed-0.14.5-cpu-onebit/README.md): the checkpoint matches
// DeepSpeed's key by key, and the resumes from dszero's and from
// DeepSpeed's step-5 checkpoints reproduce DeepSpeed's resumed run. As a
// control, each recorded resumed run must differ from the uninterrupted
// one by more than ten times the loss band, so that reproducing the uninterrupted
// run instead would fail.
func TestOneBitResumeCases(t *testing.T) {
	cases, err := Find(onebitCases)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 6 {
		t.Fatalf("%d cases under %s, want 6", len(cases), onebitCases)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			r := Run(c)
			t.Logf("%s %s: losses %.2e, weights %.2e; checkpoint: %s; resume: %s", r.Case, r.Status, r.Loss.MaxRel, r.Weights.MaxAbs, r.Checkpoint, r.Resume)
			if r.Status != Pass {
				t.Errorf("%s: %s", r.Status, r.Reason)
			}
			if !strings.HasPrefix(r.Checkpoint, "match") {
				t.Errorf("checkpoint: %s", r.Checkpoint)
			}
			if r.ResumeLoss == nil || r.ResumeWeights == nil || !strings.Contains(r.Resume, "dszero's: loss") {
				t.Errorf("resume %q: not held to DeepSpeed's resumed run from both checkpoints", r.Resume)
			}
			if err := c.Load(); err != nil {
				t.Fatal(err)
			}
			ref, err := c.resumedRun()
			if err != nil || ref == nil {
				t.Fatalf("no recorded resumed run: %v", err)
			}
			var d float64
			for s, w := range ref.Steps {
				u := c.Result.Steps[resumeStep+s].Loss
				d = math.Max(d, math.Abs(w.Loss-u)/math.Abs(u))
			}
			if tol := Defaults(device.F32).LossRel; d <= 10*tol {
				t.Errorf("DeepSpeed's resumed run is within %.1e of its uninterrupted run: the case cannot tell them apart (band %.0e)", d, tol)
			}
		})
	}
}
