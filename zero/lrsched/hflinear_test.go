package lrsched

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The Trainer's linear schedule by hand: transformers'
// get_linear_schedule_with_warmup(opt, num_warmup_steps=2,
// num_training_steps=5) is LambdaLR with λ(s) = s/2 for s < 2, then
// (5 − s)/3; the constructor sets base·λ(0) and each applied optimizer step
// advances s, so steps 1..6 run with base × 0, 1/2, 1, 2/3, 1/3, 0.
func TestHFLinearByHand(t *testing.T) {
	s, err := New(KindHFLinear, HFLinearParams{WarmupSteps: 2, TrainingSteps: 5}, 3e-4)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{0, 1.5e-4, 3e-4, 2e-4, 1e-4, 0, 0}
	if d := cmp.Diff(want, usedLRs(s, len(want)), cmpopts.EquateApprox(0, 1e-18)); d != "" {
		t.Errorf("lrs (-want +got):\n%s", d)
	}
	// No warm-up: the first step runs at the full lr, then linear decay.
	s, _ = New(KindHFLinear, HFLinearParams{TrainingSteps: 4}, 1.0)
	if d := cmp.Diff([]float64{1, 0.75, 0.5, 0.25, 0}, usedLRs(s, 5)); d != "" {
		t.Errorf("no warm-up (-want +got):\n%s", d)
	}
	// A checkpoint's last_batch_iteration resumes at the same lr.
	s.StepTo(1)
	r, _ := New(KindHFLinear, HFLinearParams{TrainingSteps: 4}, 1.0)
	if err := r.LoadStateDict(s.StateDict()); err != nil || r.LR() != 0.5 {
		t.Errorf("resumed lr %v (%v), want 0.5", r.LR(), err)
	}
}

func TestHFLinearNeedsTheStepCount(t *testing.T) {
	for _, p := range []HFLinearParams{{TrainingSteps: 0}, {TrainingSteps: -1}, {WarmupSteps: -1, TrainingSteps: 3}} {
		if _, err := New(KindHFLinear, p, 1); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
}

// TestHFLinearStateDict: the checkpointed state is torch 1.13's
// LambdaLR.state_dict() after two applied steps of a schedule built at
// lr 1e-3 (warm-up 2, 5 steps): last_epoch 2, _step_count 3, _last_lr the
// lr of the next step (λ(2) = 1), lr_lambdas one partial's empty __dict__;
// loading it resumes at that lr.
func TestHFLinearStateDict(t *testing.T) {
	s, _ := New(KindHFLinear, HFLinearParams{WarmupSteps: 2, TrainingSteps: 5}, 1e-3)
	s.Step()
	s.Step()
	want := map[string]any{"base_lrs": []float64{1e-3}, "last_epoch": int64(2), "verbose": false, "_step_count": int64(3),
		"_get_lr_called_within_step": false, "_last_lr": []float64{1e-3}, "lr_lambdas": []any{map[string]any{}}}
	if d := cmp.Diff(want, s.StateDict()); d != "" {
		t.Errorf("state dict (-LambdaLR +got):\n%s", d)
	}
	r, _ := New(KindHFLinear, HFLinearParams{WarmupSteps: 2, TrainingSteps: 5}, 1e-3)
	if err := r.LoadStateDict(s.StateDict()); err != nil || r.LR() != 1e-3 || r.LastBatchIteration() != 1 {
		t.Errorf("loaded: lr %v at %d (%v)", r.LR(), r.LastBatchIteration(), err)
	}
	if err := r.LoadStateDict(map[string]any{"last_batch_iteration": 3}); err == nil {
		t.Error("a DeepSpeed scheduler's state loaded into the LambdaLR")
	}
}
