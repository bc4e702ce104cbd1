package lrsched

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Version selects the DeepSpeed release whose scheduler semantics to follow.
type Version int

const (
	// DeepSpeed0195 is DeepSpeed v0.19.5, the default.
	DeepSpeed0195 Version = iota
	// DeepSpeed0145 is DeepSpeed v0.14.5, the release the reference harness
	// ran: the warmup schedulers leave the optimizer's lr alone at
	// construction, WarmupLR's warmup_max_lr defaults to 0.001,
	// WarmupCosineLR does not clamp its progress, and OneCycle ignores its
	// stair counts.
	DeepSpeed0145
)

func (v Version) String() string {
	switch v {
	case DeepSpeed0195:
		return "0.19.5"
	case DeepSpeed0145:
		return "0.14.5"
	}
	return fmt.Sprintf("Version(%d)", int(v))
}

// Scheduler is a DeepSpeed LR scheduler bound to one parameter group.
//
// It mirrors what the scheduler writes into the optimizer's param group:
// LR (and Betas) are the values the optimizer holds now, i.e. the ones the
// next optimizer step uses. The engine never steps the scheduler at
// construction; it calls Step after every optimizer step that was applied
// (not after one skipped for an fp16 overflow) and copies LR into the
// optimizer.
type Scheduler interface {
	Kind() string
	// LR is the learning rate the optimizer holds now.
	LR() float64
	// Betas are the betas the optimizer holds now, when the scheduler sets
	// them (OneCycle with cycle_momentum). DeepSpeed only does so for
	// optimizers with betas; for others it disables cycle_momentum.
	Betas() (betas [2]float64, ok bool)
	// Step is scheduler.step(): last_batch_iteration += 1, then the lr (and
	// betas) for that iteration are set.
	Step()
	// StepTo is scheduler.step(last_batch_iteration=it).
	StepTo(it int)
	// LastBatchIteration starts at -1 and counts Step calls.
	LastBatchIteration() int
	// LRAt is get_lr() at last_batch_iteration = it, without side effects.
	LRAt(it int) float64
	// StateDict is {"last_batch_iteration": n}, the checkpointed state.
	StateDict() map[string]any
	// LoadStateDict restores last_batch_iteration; LR becomes LRAt of it
	// (the lr the optimizer's checkpointed param group holds).
	LoadStateDict(sd map[string]any) error
	// Warnings are what DeepSpeed logs for the parameters (an unknown
	// warmup_type, total_num_steps < warmup_num_steps).
	Warnings() []string
}

// New builds the scheduler kind with params p for an optimizer group whose
// lr is baseLR, following DeepSpeed 0.19.5.
func New(kind string, p Params, baseLR float64) (Scheduler, error) {
	return NewVersion(kind, p, baseLR, DeepSpeed0195)
}

// NewVersion is New for a given DeepSpeed release. A nil p means the
// kind's defaults.
func NewVersion(kind string, p Params, baseLR float64, v Version) (Scheduler, error) {
	if p == nil {
		switch kind {
		case KindLRRangeTest:
			p = DefaultLRRangeTest()
		case KindOneCycle:
			p = DefaultOneCycle()
		case KindWarmupLR:
			p = DefaultWarmupLR()
		case KindWarmupDecayLR:
			p = DefaultWarmupDecayLR()
		case KindWarmupCosineLR:
			p = DefaultWarmupCosineLR()
		}
	}
	valid := strings.Join(Kinds(), ", ")
	if p == nil {
		return nil, fmt.Errorf("scheduler.type %q is not a DeepSpeed LR schedule (valid: %s); DeepSpeed would look it up in torch.optim.lr_scheduler, which dszero does not implement", kind, valid)
	}
	if p.Kind() != kind {
		return nil, fmt.Errorf("scheduler.type %q given %s parameters", kind, p.Kind())
	}
	var (
		f   formula
		err error
	)
	switch q := p.(type) {
	case LRRangeTestParams:
		f, err = newLRRangeTest(q, v)
	case *LRRangeTestParams:
		f, err = newLRRangeTest(*q, v)
	case OneCycleParams:
		f, err = newOneCycle(q, v)
	case *OneCycleParams:
		f, err = newOneCycle(*q, v)
	case WarmupLRParams:
		f, err = newWarmupLR(q, baseLR, v)
	case *WarmupLRParams:
		f, err = newWarmupLR(*q, baseLR, v)
	case WarmupDecayLRParams:
		f, err = newWarmupDecayLR(q, v)
	case *WarmupDecayLRParams:
		f, err = newWarmupDecayLR(*q, v)
	case WarmupCosineLRParams:
		f, err = newWarmupCosineLR(q, baseLR, v)
	case *WarmupCosineLRParams:
		f, err = newWarmupCosineLR(*q, baseLR, v)
	case HFLinearParams:
		f, err = newHFLinear(q, baseLR)
	case *HFLinearParams:
		f, err = newHFLinear(*q, baseLR)
	default:
		return nil, fmt.Errorf("scheduler.type %q: unsupported parameter type %T (valid kinds: %s)", kind, p, valid)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler %s: %w", kind, err)
	}
	s := &sched{kind: kind, f: f, last: -1, lr: baseLR}
	if lr, ok := f.initLR(); ok {
		s.lr = lr
	}
	s.betas, s.hasBetas = f.betasAt(-1)
	if _, ok := f.(*hfLinear); ok {
		return &hfLinearSched{sched: s, base: baseLR}, nil
	}
	return s, nil
}

// formula is one scheduler's get_lr / get_mom and its construction effects.
type formula interface {
	// lrAt is get_lr() at last_batch_iteration = it.
	lrAt(it int) float64
	// betasAt is the betas set at it (it = -1: at construction).
	betasAt(it int) ([2]float64, bool)
	// initLR is the lr written into the optimizer at construction, if any.
	initLR() (float64, bool)
	warnings() []string
}

type sched struct {
	kind     string
	f        formula
	last     int
	lr       float64
	betas    [2]float64
	hasBetas bool
}

func (s *sched) Kind() string              { return s.kind }
func (s *sched) LR() float64               { return s.lr }
func (s *sched) Betas() ([2]float64, bool) { return s.betas, s.hasBetas }
func (s *sched) LastBatchIteration() int   { return s.last }
func (s *sched) LRAt(it int) float64       { return s.f.lrAt(it) }
func (s *sched) Warnings() []string        { return s.f.warnings() }
func (s *sched) Step()                     { s.StepTo(s.last + 1) }
func (s *sched) StateDict() map[string]any { return map[string]any{"last_batch_iteration": s.last} }

func (s *sched) StepTo(it int) {
	s.last = it
	s.lr = s.f.lrAt(it)
	if b, ok := s.f.betasAt(it); ok {
		s.betas, s.hasBetas = b, true
	}
}

func (s *sched) LoadStateDict(sd map[string]any) error {
	raw, ok := sd["last_batch_iteration"]
	if !ok {
		return fmt.Errorf("lr_scheduler state has no last_batch_iteration (keys %v)", keys(sd))
	}
	var it int
	switch x := raw.(type) {
	case int:
		it = x
	case int64:
		it = int(x)
	case float64:
		if x != math.Trunc(x) {
			return fmt.Errorf("last_batch_iteration %v is not an integer", x)
		}
		it = int(x)
	default:
		return fmt.Errorf("last_batch_iteration has type %T", raw)
	}
	s.last = it
	if it >= 0 {
		s.lr = s.f.lrAt(it)
		if b, ok := s.f.betasAt(it); ok {
			s.betas, s.hasBetas = b, true
		}
	}
	return nil
}

func keys(m map[string]any) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	return k
}

// pyFloat formats v as Python's repr does for the error messages DeepSpeed
// raises ("got 0.0").
func pyFloat(v float64) string {
	if a := math.Abs(v); a != 0 && (a < 1e-4 || a >= 1e16) || math.IsInf(v, 0) || v != v {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
