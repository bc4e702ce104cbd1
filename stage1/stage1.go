package stage1

import (
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/optim"
)

// Strategy is ZeRO stage 1 on one rank (see the package doc).
type Strategy struct {
	dirty bool // LeaveGradsDirty: the model overwrites the gradients, do not clear them
	o     zcore.Options
	shard *zcore.Shard
	grads []float32       // Padded fp32 gradients: the model accumulates into [:Numel]
	accum func([]float32) // rounding to the accumulation dtype after each backward; nil: fp32
	part  []float32       // round_robin_gradients: the gradient partition, in the flat buffer's order
	hs    []comm.Handle   // round_robin_gradients: the all-reduce's handles, reused every step
}

// New allocates the rank's state and initializes the parameters.
func New(o zcore.Options) (_ *Strategy, err error) {
	if err := o.Check("stage 1"); err != nil {
		return nil, err
	}
	s := &Strategy{o: o, accum: zcore.Rounding(o.DTypes.Accum)}
	// The gradients are reduced in the model's dtype (DeepSpeed's 16-bit
	// .grad and its ipg buffer).
	s.o.Average = o.Average.In(o.DTypes.Model, o.DTypes.Comm)
	if s.shard, err = zcore.NewShard(&s.o); err != nil {
		return nil, fmt.Errorf("stage 1: %w", err)
	}
	if s.grads, err = o.Acct.F32(mem.Grads, mem.Device, s.shard.Flat.Padded); err != nil {
		s.shard.Close()
		return nil, fmt.Errorf("stage 1: gradients (%d elements): %w", s.shard.Flat.Padded, err)
	}
	if !s.shard.InPlace() {
		if s.part, err = o.Acct.F32(mem.Grads, o.OptimizerTier, s.shard.Flat.PartitionSize); err != nil {
			s.Close()
			return nil, fmt.Errorf("stage 1: gradient partition (%d elements): %w", s.shard.Flat.PartitionSize, err)
		}
	}
	return s, nil
}

// ModelBuffers are the full working parameters and gradient buffer.
func (s *Strategy) ModelBuffers() ([]float32, []float32) {
	return s.shard.Work(), s.grads[:s.o.Layout.Numel]
}

// MasterParams is the rank's fp32 master partition (without padding) and
// its offset in the flat buffer.
func (s *Strategy) MasterParams() (int, []float32, error) {
	off, m := s.shard.Master()
	return off, m, nil
}

// GatherMaster writes every rank's master partition, the full fp32
// parameters, into dst (a collective).
func (s *Strategy) GatherMaster(dst []float32) error { return s.shard.GatherMaster(dst) }

// Optimizer is the optimizer of the rank's partition.
func (s *Strategy) Optimizer() optim.Optimizer { return s.shard.Optimizer() }

// Stage 1 keeps the full parameters and gradients: nothing happens at unit
// boundaries but the rounding of the accumulated gradients.
func (s *Strategy) BeforeForward(int) error  { return nil }
func (s *Strategy) AfterForward(int) error   { return nil }
func (s *Strategy) BeforeBackward(int) error { return nil }

// AfterBackward rounds unit u's accumulated gradients to the accumulation
// dtype: DeepSpeed's 16-bit .grad += the micro-step's gradient.
func (s *Strategy) AfterBackward(u int) error {
	if s.accum != nil {
		un := s.o.Layout.Units[u]
		s.accum(s.grads[un.Offset : un.Offset+un.Numel])
	}
	return nil
}

// LeaveGradsDirty tells the strategy that the model overwrites the
// gradient buffer on the first backward of each step (model
// OverwriteGrads), so Step need not clear it. The padding past the model's
// parameters is written only by the reduce-scatter, with zeros.
func (s *Strategy) LeaveGradsDirty() { s.dirty = true }

// Step reduces the gradients into the partitions and takes the partition's
// optimizer step (a collective).
func (s *Strategy) Step(in zcore.StepInput) (zcore.StepResult, error) {
	o := &s.o
	if !s.dirty {
		defer clear(s.grads)
	}
	lo, hi := s.shard.Lo, s.shard.Hi
	clear(s.grads[o.Layout.Numel:]) // the padding (a 16-bit wire may have left words there)
	op := o.Average.Before(o.Pool, s.grads, o.Comm.Size())
	wire := o.Average.Wire(s.grads)
	part := s.grads[lo:hi]
	if s.shard.InPlace() {
		if err := o.Comm.ReduceScatter(o.Ctx, wire.Slice(lo, hi), wire, op).Wait(); err != nil {
			return zcore.StepResult{}, fmt.Errorf("stage 1: reduce-scatter of the gradients: %w", err)
		}
		o.Average.Unwire(s.grads, lo, hi)
	} else {
		// round_robin_gradients: the partition is runs of the buffer. All-
		// reduce it in buckets, as DeepSpeed's stage 1 does
		// (allreduce_and_scatter), and gather the runs.
		var err error
		if s.hs, err = zcore.AllReduceWire(o.Ctx, o.Comm, wire, op, o.BucketSize, s.hs); err != nil {
			return zcore.StepResult{}, fmt.Errorf("stage 1: all-reduce of the gradients: %w", err)
		}
		o.Average.Unwire(s.grads, 0, len(s.grads))
		part = s.part
		for _, r := range s.shard.Runs() {
			copy(part[r.Part:r.Part+r.N], s.grads[r.Model:r.Model+r.N])
		}
	}
	o.Average.After(o.Pool, part)
	res, err := s.shard.Step(in, part)
	if err != nil {
		return res, fmt.Errorf("stage 1: %w", err)
	}
	return res, nil
}

// Close returns every buffer to the accountant.
func (s *Strategy) Close() {
	if s.part != nil {
		s.o.Acct.FreeF32(mem.Grads, s.o.OptimizerTier, s.part)
		s.part = nil
	}
	if s.grads != nil {
		s.o.Acct.FreeF32(mem.Grads, mem.Device, s.grads)
		s.grads = nil
	}
	if s.shard != nil {
		s.shard.Close()
		s.shard = nil
	}
}
