package hfstate

import (
	"fmt"

	"github.com/dszero/dszero/ptfile"
)

// LambdaLR is the state of torch.optim.lr_scheduler.LambdaLR — what the
// Trainer's schedulers (get_scheduler: linear, cosine, constant with
// warmup...) are — as lr_scheduler.state_dict() returns it and the
// Trainer torch.saves to scheduler.pt:
//
//	{"base_lrs": [lr per group], "last_epoch": N, "verbose": False,
//	 "_step_count": N+1, "_get_lr_called_within_step": False,
//	 "_last_lr": [current lr per group], "lr_lambdas": [{} per group]}
//
// The schedule itself is code (a functools.partial), not state: the
// state is where it stands. The constructor steps once, so after N
// optimizer steps last_epoch is N and _step_count N+1. lr_lambdas holds
// each partial's (empty) __dict__, which load_state_dict merges back.
type LambdaLR struct {
	BaseLRs   []float64
	LastEpoch int64
	LastLR    []float64
}

// StateDict is the scheduler's state dict as torch builds it.
func (s LambdaLR) StateDict() *ptfile.Dict {
	floats := func(x []float64) ptfile.List {
		l := make(ptfile.List, len(x))
		for i, f := range x {
			l[i] = f
		}
		return l
	}
	lambdas := make(ptfile.List, len(s.BaseLRs))
	for i := range lambdas {
		lambdas[i] = ptfile.NewDict()
	}
	return ptfile.DictOf(
		"base_lrs", floats(s.BaseLRs), "last_epoch", s.LastEpoch, "verbose", false,
		"_step_count", s.LastEpoch+1, "_get_lr_called_within_step", false,
		"_last_lr", floats(s.LastLR), "lr_lambdas", lambdas)
}

// WriteScheduler writes dir/scheduler.pt.
func WriteScheduler(dir string, s LambdaLR) error {
	if len(s.LastLR) != len(s.BaseLRs) {
		return fmt.Errorf("hfstate: scheduler: %d base lrs and %d current ones", len(s.BaseLRs), len(s.LastLR))
	}
	return ptfile.Write(join(dir, SchedulerName), s.StateDict())
}

// ReadScheduler reads a LambdaLR state dict (scheduler.pt, or Accelerate's
// scheduler.bin): base_lrs, last_epoch and _last_lr; other keys are
// torch's bookkeeping.
func ReadScheduler(path string) (LambdaLR, error) {
	v, err := ptfile.Read(path, ptfile.Options{})
	if err != nil {
		return LambdaLR{}, fmt.Errorf("hfstate: %w", err)
	}
	var s LambdaLR
	bad := func(what string) (LambdaLR, error) {
		return LambdaLR{}, fmt.Errorf("hfstate: %s: not an LR scheduler's state dict: %s", path, what)
	}
	if s.LastEpoch, err = ptfile.Get[int64](v, "last_epoch"); err != nil {
		return bad(err.Error())
	}
	for _, k := range []string{"base_lrs", "_last_lr"} {
		l, err := ptfile.Get[ptfile.List](v, k)
		if err != nil {
			return bad(err.Error())
		}
		out := make([]float64, len(l))
		for i, e := range l {
			switch x := e.(type) {
			case float64:
				out[i] = x
			case int64:
				out[i] = float64(x)
			default:
				return bad(fmt.Sprintf("%s[%d] is a %s", k, i, ptfile.TypeName(e)))
			}
		}
		if k == "base_lrs" {
			s.BaseLRs = out
		} else {
			s.LastLR = out
		}
	}
	return s, nil
}
