package zero

import (
	"fmt"
	"math"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/lossscale"
	"github.com/dszero/dszero/zero/optim"
)

// Stage0 is ZeRO stage 0, DeepSpeed's plain data parallelism: every rank
// holds everything — fp32 master parameters (the working parameters too
// in fp32 training; in 16-bit training a rounded working copy besides),
// fp32 gradients and the optimizer state of the whole model.
//
// At the boundary the gradients are averaged around an all-reduce (SUM)
// in place, in calls of at most reduce_bucket_size elements, as
// DeepSpeed's engine does (allreduce_gradients → allreduce_bucket, which
// flattens into buckets of MEMORY_OPT_ALLREDUCE_SIZE = 5e8 elements, the
// default reduce_bucket_size; the buckets change no number). Every rank
// then holds the same averaged gradients and takes the same step.
//
// Dtypes (Options.DTypes): the gradients accumulate over the micro-steps
// in the accumulation dtype (fp32 for bf16, BF16_Optimizer's; fp16 for
// fp16, FP16_Optimizer's .grad), rounded after each backward; the
// all-reduce runs in communication_data_type (Averaging.In). With bf16 the
// step clips as BF16_Optimizer does: the norm of the rank's own
// (identical) gradients, Σ‖g‖² summed in order, no average over the
// ranks, and the gradients scaled only when the coefficient is below 1.
type Stage0 struct {
	o   zcore.Options
	opt optim.Optimizer

	dirty  bool            // LeaveGradsDirty: the model overwrites the gradients, do not clear them
	accum  func([]float32) // rounding to the accumulation dtype after each backward; nil: fp32
	bf16   bool            // BF16_Optimizer's norm and clipping
	master []float32       // fp32 master parameters (the working parameters too when Round is nil)
	work   []float32       // working parameters in the training precision
	grads  []float32       // fp32 gradient accumulation

	norms, scratch []float32
	one            []float32     // the norm's all-reduce buffer
	hs             []comm.Handle // the gradient all-reduce's handles, reused every step
}

var _ Strategy = (*Stage0)(nil)

// NewStage0 allocates the buffers: master (and, in 16-bit training, the
// working copy), gradients, and the optimizer state. In 16-bit training
// the master starts from the rounded working values, as DeepSpeed clones
// its fp32 copy from the 16-bit parameters.
func NewStage0(o StrategyOptions) (_ *Stage0, err error) {
	if err := o.Check("stage 0"); err != nil {
		return nil, err
	}
	n := o.Layout.Numel
	s := &Stage0{o: o, accum: zcore.Rounding(o.DTypes.Accum), bf16: o.DTypes.Model == device.BF16}
	s.o.Average = o.Average.In(o.DTypes.Accum, o.DTypes.Comm)
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
		o.Round(s.master)
		copy(s.work, s.master)
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
	s.one = make([]float32, 1)
	return s, nil
}

// InitializeOptimizerStates steps the optimizer once on zero gradients
// over the master, as DeepSpeed's fp16 wrappers do when they are built
// (FP16Wrapper); the working copy keeps its values.
func (s *Stage0) InitializeOptimizerStates() {
	clear(s.grads)
	s.opt.Step(s.master, s.grads)
}

// ModelBuffers implements Strategy.
func (s *Stage0) ModelBuffers() ([]float32, []float32) { return s.work, s.grads }

// MasterParams implements Strategy.
func (s *Stage0) MasterParams() (int, []float32, error) { return 0, s.master, nil }

// GatherMaster implements Strategy: every rank holds all of it.
func (s *Stage0) GatherMaster(dst []float32) error {
	copy(dst, s.master)
	return nil
}

// Optimizer is the optimizer over the whole model (for checkpoints).
func (s *Stage0) Optimizer() optim.Optimizer { return s.opt }

// LeaveGradsDirty implements GradOverwriter.
func (s *Stage0) LeaveGradsDirty() { s.dirty = true }

// Stage 0 keeps everything resident: nothing to do at unit boundaries but
// the rounding of the accumulated gradients (AfterBackward).
func (s *Stage0) BeforeForward(int) error  { return nil }
func (s *Stage0) AfterForward(int) error   { return nil }
func (s *Stage0) BeforeBackward(int) error { return nil }

// AfterBackward rounds unit u's accumulated gradients to the accumulation
// dtype (a 16-bit .grad += the micro-step's gradient).
func (s *Stage0) AfterBackward(u int) error {
	if s.accum != nil {
		un := s.o.Layout.Units[u]
		s.accum(s.grads[un.Offset : un.Offset+un.Numel])
	}
	return nil
}

// Step implements Strategy: the averaged all-reduce, overflow check,
// clipping, the optimizer step and the copy back into the working
// precision.
func (s *Stage0) Step(in StepInput) (StepResult, error) {
	o := &s.o
	if !s.dirty {
		defer clear(s.grads)
	}
	xopt, _ := s.opt.(optim.Exchanging)
	if xopt == nil || !xopt.LocalGradients() { // 1-bit Adam after its freeze exchanges the momentum instead
		op := o.Average.Before(o.Pool, s.grads, o.Comm.Size())
		var err error
		if s.hs, err = zcore.AllReduceWire(o.Ctx, o.Comm, o.Average.Wire(s.grads), op, o.BucketSize, s.hs); err != nil {
			return StepResult{}, fmt.Errorf("stage 0: all-reduce of the gradients: %w", err)
		}
		o.Average.Unwire(s.grads, 0, len(s.grads))
		o.Average.After(o.Pool, s.grads)
	}
	if in.CheckOverflow {
		overflow := lossscale.HasInfOrNaN(s.grads)
		if xopt != nil && xopt.LocalGradients() && o.Comm.Size() > 1 {
			// The ranks' own gradients: CheckOverflow all-reduces the flag
			// (MAX) when enable_backward_allreduce is False.
			if s.one[0] = 0; overflow {
				s.one[0] = 1
			}
			if err := o.Comm.AllReduce(o.Ctx, comm.F32(s.one), comm.Sum).Wait(); err != nil {
				return StepResult{}, fmt.Errorf("stage 0: all-reduce of the overflow flag: %w", err)
			}
			overflow = s.one[0] > 0
		}
		if overflow {
			return StepResult{GradNorm: -1, Overflow: true}, nil // the same on every rank
		}
	}
	for i, sp := range o.Layout.Specs {
		s.norms[i] = optim.Norm2F32(s.grads[sp.Offset : sp.Offset+sp.Numel])
	}
	var total, factor float32 // the norm of the scaled gradients; their scale factor
	switch {
	case s.bf16 && in.LossScale == 1:
		// BF16_Optimizer.step: get_global_norm_of_tensors adds the
		// squared norms one by one in float32, no average over the
		// ranks; clip_tensors_by_global_norm scales only below 1.
		var sq float32
		for _, n := range s.norms {
			sq += n * n
		}
		total = float32(math.Sqrt(float64(sq)))
		factor = 1
		if o.Clip > 0 {
			factor = optim.TorchClipCoef(total, o.Clip)
		}
	case in.LossScale == 1:
		total = optim.DSStage0Norm(s.norms, s.scratch)
		// DeepSpeed's fp32 path (runtime/utils.py clip_grad_norm_): the
		// ranks average their norms (all the same after the all-reduce).
		// DeepSpeed multiplies the gradients by the coefficient even when
		// it is 1; x·1 is x, so here that pass is skipped.
		if o.Comm.Size() > 1 {
			s.one[0] = optim.DSStage0Share(total, o.Comm.Size())
			if err := o.Comm.AllReduce(o.Ctx, comm.F32(s.one), comm.Sum).Wait(); err != nil {
				return StepResult{}, fmt.Errorf("stage 0: all-reduce of the gradient norm: %w", err)
			}
			total = s.one[0]
		}
		factor = 1
		if o.Clip > 0 {
			factor = optim.DSStage0Coef(total, o.Clip)
		}
	default:
		// The mixed-precision path unscales and clips in one multiply.
		total = optim.DSStage0Norm(s.norms, s.scratch)
		factor = optim.ZeroUnscaleFactor(total, in.LossScale, o.Clip)
	}
	if factor != 1 {
		o.Pool.Scale(s.grads, factor)
	}
	if !in.CheckOverflow && (math.IsNaN(float64(total)) || math.IsInf(float64(total), 0)) {
		return StepResult{}, zcore.Diverged(float64(total))
	}
	in.SetHyperparams(s.opt)
	if xopt != nil {
		if err := xopt.StepExchange(s.master, s.grads); err != nil {
			return StepResult{}, fmt.Errorf("stage 0: %w", err)
		}
	} else {
		s.opt.Step(s.master, s.grads)
	}
	if o.Round != nil {
		copy(s.work, s.master)
		o.Round(s.work)
	}
	return StepResult{GradNorm: float64(total) / in.LossScale}, nil
}

// Close implements Strategy.
func (s *Stage0) Close() {
	if s.opt != nil {
		s.opt.Free()
		s.opt = nil
	}
	if s.grads != nil {
		s.o.Acct.FreeF32(mem.Grads, mem.Device, s.grads)
		s.grads = nil
	}
	if s.work != nil && s.o.Round != nil {
		s.o.Acct.FreeF32(mem.Params16, mem.Device, s.work)
	}
	s.work = nil
	if s.master != nil {
		s.o.Acct.FreeF32(mem.MasterParams, mem.Device, s.master)
		s.master = nil
	}
}
