package zero

import (
	"fmt"
	"math"

	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/lossscale"
	"github.com/dszero/dszero/zero/optim"
)

// Stage0 is ZeRO stage 0 on one rank: the rank holds everything. It is
// DeepSpeed's plain data parallelism (the all-reduce of a world larger than
// one arrives with the collectives).
type Stage0 struct {
	acct   *mem.Accountant
	layout *model.Layout
	opt    optim.Optimizer
	pool   *optim.Pool
	clip   float64
	round  func([]float32) // nil for fp32

	world     int
	prescale  bool
	predivide float64

	master []float32 // fp32 master parameters (the working parameters too when round is nil)
	work   []float32 // working parameters in the training precision
	grads  []float32 // fp32 gradient accumulation

	norms, scratch []float32
}

var _ Strategy = (*Stage0)(nil)

// Stage0Options configure a Stage0.
type Stage0Options struct {
	Acct   *mem.Accountant
	Layout *model.Layout
	// Init are the initial fp32 parameters (copied); or InitFunc writes
	// them straight into the master buffer (no second copy of the model).
	Init     []float32
	InitFunc func(master []float32)
	// Round emulates a 16-bit working precision (half.RoundBF16, ...); nil
	// for fp32.
	Round func([]float32)
	// Clip is gradient_clipping (0: none).
	Clip float64
	// World is the data-parallel world size the gradients are averaged
	// over (1 until collectives arrive); Prescale and Predivide are
	// prescale_gradients and gradient_predivide_factor.
	World     int
	Prescale  bool
	Predivide float64
	// NewOptimizer builds the optimizer for n elements (the whole model).
	NewOptimizer func(n int) (optim.Optimizer, error)
	Pool         *optim.Pool
}

// NewStage0 allocates the buffers: master (and, in 16-bit training, the
// working copy), gradients, and the optimizer state.
func NewStage0(o Stage0Options) (_ *Stage0, err error) {
	n := o.Layout.Numel
	if o.InitFunc == nil && len(o.Init) != n {
		return nil, fmt.Errorf("stage 0: %d initial parameters for a model of %d", len(o.Init), n)
	}
	if o.World < 1 {
		o.World = 1
	}
	if o.Predivide == 0 {
		o.Predivide = 1
	}
	s := &Stage0{acct: o.Acct, layout: o.Layout, pool: o.Pool, clip: o.Clip, round: o.Round,
		world: o.World, prescale: o.Prescale, predivide: o.Predivide}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.master, err = o.Acct.F32(mem.MasterParams, mem.Device, n); err != nil {
		return nil, fmt.Errorf("stage 0: fp32 master parameters: %w", err)
	}
	if o.InitFunc != nil {
		o.InitFunc(s.master)
	} else {
		copy(s.master, o.Init)
	}
	s.work = s.master
	if o.Round != nil {
		// The CPU backend keeps 16-bit values widened to float32, and
		// accounts what it stores.
		if s.work, err = o.Acct.F32(mem.Params16, mem.Device, n); err != nil {
			return nil, fmt.Errorf("stage 0: working parameters: %w", err)
		}
		copy(s.work, s.master)
		o.Round(s.work)
	}
	if s.grads, err = o.Acct.F32(mem.Grads, mem.Device, n); err != nil {
		return nil, fmt.Errorf("stage 0: gradients: %w", err)
	}
	opt, err := o.NewOptimizer(n)
	if err != nil {
		return nil, err
	}
	s.opt = opt
	s.norms = make([]float32, len(o.Layout.Specs))
	s.scratch = make([]float32, len(o.Layout.Specs))
	return s, nil
}

// ModelBuffers implements Strategy.
func (s *Stage0) ModelBuffers() ([]float32, []float32) { return s.work, s.grads }

// MasterParams implements Strategy.
func (s *Stage0) MasterParams() (int, []float32) { return 0, s.master }

// Optimizer is the optimizer over the whole model (for checkpoints).
func (s *Stage0) Optimizer() optim.Optimizer { return s.opt }

// Stage 0 keeps everything resident: nothing to do at unit boundaries.
func (s *Stage0) BeforeForward(int) error  { return nil }
func (s *Stage0) AfterForward(int) error   { return nil }
func (s *Stage0) BeforeBackward(int) error { return nil }
func (s *Stage0) AfterBackward(int) error  { return nil }

// Step implements Strategy: overflow check, clipping, the optimizer step
// and the copy back into the working precision.
func (s *Stage0) Step(in StepInput) (StepResult, error) {
	defer clear(s.grads)
	s.average()
	if in.CheckOverflow && lossscale.HasInfOrNaN(s.grads) {
		return StepResult{GradNorm: -1, Overflow: true}, nil
	}
	for i, sp := range s.layout.Specs {
		s.norms[i] = optim.Norm2F32(s.grads[sp.Offset : sp.Offset+sp.Numel])
	}
	total := optim.DSStage0Norm(s.norms, s.scratch) // norm of the scaled gradients
	var factor float32
	if in.LossScale == 1 {
		// DeepSpeed's fp32 path: clip_grad_norm_ multiplies by the
		// coefficient, even when it is 1.
		factor = 1
		if s.clip > 0 {
			factor = optim.DSStage0Coef(total, s.clip)
		}
	} else {
		// The mixed-precision path unscales and clips in one multiply.
		factor = optim.ZeroUnscaleFactor(total, in.LossScale, s.clip)
	}
	if factor != 1 || s.clip > 0 && in.LossScale == 1 {
		s.pool.Scale(s.grads, factor)
	}
	if !in.CheckOverflow && (math.IsNaN(float64(total)) || math.IsInf(float64(total), 0)) {
		return StepResult{}, fmt.Errorf("the gradient norm is %v: training diverged (lower the learning rate, or use bf16/fp32)", total)
	}
	s.opt.SetLR(in.LR)
	if in.Betas != nil {
		if bs, ok := s.opt.(optim.BetaSetter); ok {
			bs.SetBetas(*in.Betas)
		}
	}
	s.opt.Step(s.master, s.grads)
	if s.round != nil {
		copy(s.work, s.master)
		s.round(s.work)
	}
	return StepResult{GradNorm: float64(total) / in.LossScale}, nil
}

// average applies DeepSpeed's gradient averaging around the all-reduce
// (engine.allreduce_bucket): with prescale_gradients, g *= 1/world before
// it; otherwise g *= 1/predivide before and g *= predivide/world after,
// each only when the factor is not 1.
func (s *Stage0) average() {
	w := float64(s.world)
	if s.prescale {
		if s.world != 1 {
			s.pool.Scale(s.grads, float32(1/w))
		}
		return // the all-reduce (SUM) of a world of one is the identity
	}
	if s.predivide != 1 {
		s.pool.Scale(s.grads, float32(1/s.predivide))
	}
	if s.predivide != w {
		s.pool.Scale(s.grads, float32(s.predivide/w))
	}
}

// Close implements Strategy.
func (s *Stage0) Close() {
	if s.opt != nil {
		s.opt.Free()
		s.opt = nil
	}
	if s.grads != nil {
		s.acct.FreeF32(mem.Grads, mem.Device, s.grads)
		s.grads = nil
	}
	if s.work != nil && s.round != nil {
		s.acct.FreeF32(mem.Params16, mem.Device, s.work)
	}
	s.work = nil
	if s.master != nil {
		s.acct.FreeF32(mem.MasterParams, mem.Device, s.master)
		s.master = nil
	}
}
