package lrsched

import (
	"fmt"
	"math"
)

// KindHFLinear is the schedule HF's Trainer builds when the ds_config has
// no scheduler block (lr_scheduler_type "linear", the default):
// transformers' get_linear_schedule_with_warmup, a torch LambdaLR. It is
// not one of DeepSpeed's VALID_LR_SCHEDULES, so Kinds leaves it out.
const KindHFLinear = "get_linear_schedule_with_warmup"

// HFLinearParams are the Trainer's arguments to the linear schedule.
type HFLinearParams struct {
	WarmupSteps   int // num_warmup_steps: --warmup_steps
	TrainingSteps int // num_training_steps: --max_steps
}

func (HFLinearParams) Kind() string { return KindHFLinear }

// hfLinear is LambdaLR(optimizer, λ) with transformers'
// _get_linear_schedule_with_warmup_lr_lambda:
//
//	λ(s) = s / max(1, W)                    s < W
//	λ(s) = max(0, (T − s) / max(1, T − W))  otherwise
//
// LambdaLR's constructor steps once (last_epoch 0), writing base·λ(0) into
// the optimizer, and each step after an applied optimizer step advances s:
// optimizer step k runs with base·λ(k−1). In the Scheduler's terms (it =
// k − 2 for k > 1) that is initLR = base·λ(0) and lrAt(it) = base·λ(it+1).
type hfLinear struct {
	base     float64
	warm, tr int
}

func newHFLinear(p HFLinearParams, baseLR float64) (formula, error) {
	if p.TrainingSteps <= 0 {
		return nil, fmt.Errorf("num_training_steps must be positive, got %d (pass --max_steps N)", p.TrainingSteps)
	}
	if p.WarmupSteps < 0 {
		return nil, fmt.Errorf("num_warmup_steps must be >= 0, got %d", p.WarmupSteps)
	}
	return &hfLinear{base: baseLR, warm: p.WarmupSteps, tr: p.TrainingSteps}, nil
}

// lambda is the lr multiplier at LambdaLR's last_epoch s, in Python's float
// arithmetic.
func (f *hfLinear) lambda(s int) float64 {
	if s < f.warm {
		return float64(s) / float64(max(1, f.warm))
	}
	return max(0, float64(f.tr-s)/float64(max(1, f.tr-f.warm)))
}

func (f *hfLinear) lrAt(it int) float64            { return f.base * f.lambda(it+1) }
func (f *hfLinear) betasAt(int) ([2]float64, bool) { return [2]float64{}, false }
func (f *hfLinear) initLR() (float64, bool)        { return f.base * f.lambda(0), true }
func (f *hfLinear) warnings() []string             { return nil }

// hfLinearSched is the LambdaLR: the lr as sched computes it, and torch's
// LambdaLR.state_dict() for checkpoints — what DeepSpeed's engine saves
// as "lr_scheduler" when it owns the schedule (an optimizer block: the
// Trainer hands it the schedule as a callable) — instead of DeepSpeed's
// {"last_batch_iteration": n}:
//
//	{"base_lrs": [lr], "last_epoch": n+1, "verbose": False, "_step_count": n+2,
//	 "_get_lr_called_within_step": False, "_last_lr": [current lr], "lr_lambdas": [{}]}
//
// with n = last_batch_iteration (LambdaLR's constructor step makes
// last_epoch one ahead); lr_lambdas holds the functools.partial's empty
// __dict__.
type hfLinearSched struct {
	*sched
	base float64
}

func (s *hfLinearSched) StateDict() map[string]any {
	return map[string]any{"base_lrs": []float64{s.base}, "last_epoch": int64(s.last + 1), "verbose": false,
		"_step_count": int64(s.last + 2), "_get_lr_called_within_step": false, "_last_lr": []float64{s.lr},
		"lr_lambdas": []any{map[string]any{}}}
}

// LoadStateDict restores last_epoch (last_batch_iteration + 1).
func (s *hfLinearSched) LoadStateDict(sd map[string]any) error {
	raw, ok := sd["last_epoch"]
	if !ok {
		return fmt.Errorf("lr_scheduler state has no last_epoch (keys %v): not a LambdaLR state (the Trainer's linear schedule)", keys(sd))
	}
	var e int
	switch x := raw.(type) {
	case int:
		e = x
	case int64:
		e = int(x)
	case float64:
		if x != math.Trunc(x) {
			return fmt.Errorf("last_epoch %v is not an integer", x)
		}
		e = int(x)
	default:
		return fmt.Errorf("last_epoch has type %T", raw)
	}
	if e < 0 {
		return fmt.Errorf("last_epoch %d: LambdaLR's constructor leaves it at 0 or more", e)
	}
	s.last = e - 1
	s.lr = s.f.lrAt(s.last)
	return nil
}
