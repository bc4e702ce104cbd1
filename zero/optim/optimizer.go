package optim

import (
	"fmt"

	"github.com/dszero/dszero/mem"
)

// Optimizer updates one partition of a flat fp32 parameter buffer in place.
//
// One Optimizer holds one parameter group's state for one rank: a ZeRO
// stage gives it the rank's contiguous slice of the group's flat buffer, the
// matching gradient slice, and allocates per-element state for exactly that
// many elements. Stage 0 gives it the whole group.
type Optimizer interface {
	// Name is the optimizer and flavour, e.g. "torch.optim.AdamW".
	Name() string
	// Len is the number of elements of the partition.
	Len() int
	// Step applies one update with the group's current learning rate.
	// len(params) and len(grads) must equal Len().
	Step(params, grads []float32)
	// LR is the group's learning rate; SetLR changes it (the scheduler's job).
	LR() float64
	SetLR(lr float64)
	// StepCount is the number of steps taken ("step" in the state dict);
	// SetStepCount restores it from a checkpoint.
	StepCount() int64
	SetStepCount(n int64)
	// StateNames lists the per-element state tensors under their torch
	// state-dict names (exp_avg, exp_avg_sq, momentum_buffer, sum).
	StateNames() []string
	// State returns the live buffer of a state tensor (nil if unknown or not
	// yet created, like SGD's momentum_buffer before the first step).
	State(name string) []float32
	// LoadState copies a checkpointed state tensor into the partition.
	LoadState(name string, v []float32) error
	// ParamGroup is the group's entry in the state dict's param_groups
	// (without "params"), with the keys and defaults torch/DeepSpeed write.
	ParamGroup() map[string]any
	// Free returns the state memory to the accountant.
	Free()
}

// BetaSetter is implemented by the Adam-family optimizers and Lamb, whose
// group has betas: DeepSpeed's OneCycle scheduler cycles betas[0].
type BetaSetter interface {
	Betas() [2]float64
	SetBetas(b [2]float64)
}

// Alloc says where an optimizer's state lives and who accounts for it.
type Alloc struct {
	Acct *mem.Accountant
	Tier mem.Tier
}

// Segment is one parameter's piece of a partition: elements
// [Start, Start+Len) of the partition belong to parameter Param.
type Segment struct {
	Param int
	Start int
	Len   int
}

// stateBufs holds an optimizer's per-element state tensors.
type stateBufs struct {
	alloc   Alloc
	names   []string
	bufs    [][]float32
	present []bool
}

func newStateBufs(a Alloc, n int, names ...string) (*stateBufs, error) {
	if a.Acct == nil {
		panic("optim: nil accountant")
	}
	s := &stateBufs{alloc: a, names: names, bufs: make([][]float32, len(names)), present: make([]bool, len(names))}
	for i, name := range names {
		b, err := a.Acct.F32(mem.OptimState, a.Tier, n)
		if err != nil {
			s.free()
			return nil, fmt.Errorf("optimizer state %s (%d elements): %w", name, n, err)
		}
		s.bufs[i] = b
		s.present[i] = true
	}
	return s, nil
}

func (s *stateBufs) index(name string) int {
	for i, n := range s.names {
		if n == name {
			return i
		}
	}
	return -1
}

func (s *stateBufs) get(name string) []float32 {
	if i := s.index(name); i >= 0 && s.present[i] {
		return s.bufs[i]
	}
	return nil
}

func (s *stateBufs) load(name string, v []float32) error {
	i := s.index(name)
	if i < 0 {
		return fmt.Errorf("optimizer has no state %q (has %v)", name, s.names)
	}
	if len(v) != len(s.bufs[i]) {
		return fmt.Errorf("state %q has %d elements, the partition has %d", name, len(v), len(s.bufs[i]))
	}
	copy(s.bufs[i], v)
	s.present[i] = true
	return nil
}

func (s *stateBufs) free() {
	for i, b := range s.bufs {
		if b != nil {
			s.alloc.Acct.FreeF32(mem.OptimState, s.alloc.Tier, b)
			s.bufs[i] = nil
		}
	}
}

func checkLens(n int, params, grads []float32) {
	if len(params) != n || len(grads) != n {
		panic(fmt.Sprintf("optim: step on %d params and %d grads, partition has %d", len(params), len(grads), n))
	}
}

// torchHyperErr validates hyper-parameters the way torch.optim constructors do.
func torchHyperErr(lr, eps float64, betas *[2]float64, wd float64) error {
	switch {
	case !(lr >= 0):
		return fmt.Errorf("Invalid learning rate: %v", lr)
	case !(eps >= 0):
		return fmt.Errorf("Invalid epsilon value: %v", eps)
	case betas != nil && !(betas[0] >= 0 && betas[0] < 1):
		return fmt.Errorf("Invalid beta parameter at index 0: %v", betas[0])
	case betas != nil && !(betas[1] >= 0 && betas[1] < 1):
		return fmt.Errorf("Invalid beta parameter at index 1: %v", betas[1])
	case !(wd >= 0):
		return fmt.Errorf("Invalid weight_decay value: %v", wd)
	}
	return nil
}
