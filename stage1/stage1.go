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
	grads []float32 // Padded fp32 gradients: the model accumulates into [:Numel]
}

// New allocates the rank's state and initializes the parameters.
func New(o zcore.Options) (_ *Strategy, err error) {
	if err := o.Check("stage 1"); err != nil {
		return nil, err
	}
	s := &Strategy{o: o}
	if s.shard, err = zcore.NewShard(&s.o); err != nil {
		return nil, fmt.Errorf("stage 1: %w", err)
	}
	if s.grads, err = o.Acct.F32(mem.Grads, mem.Device, s.shard.Flat.Padded); err != nil {
		s.shard.Close()
		return nil, fmt.Errorf("stage 1: gradients (%d elements): %w", s.shard.Flat.Padded, err)
	}
	return s, nil
}

// ModelBuffers are the full working parameters and gradient buffer.
func (s *Strategy) ModelBuffers() ([]float32, []float32) {
	return s.shard.Work(), s.grads[:s.o.Layout.Numel]
}

// MasterParams is the rank's fp32 master partition (without padding) and
// its offset in the flat buffer.
func (s *Strategy) MasterParams() (int, []float32) { return s.shard.Master() }

// GatherMaster writes every rank's master partition, the full fp32
// parameters, into dst (a collective).
func (s *Strategy) GatherMaster(dst []float32) error { return s.shard.GatherMaster(dst) }

// Optimizer is the optimizer of the rank's partition.
func (s *Strategy) Optimizer() optim.Optimizer { return s.shard.Optimizer() }

// Stage 1 keeps the full parameters and gradients: nothing happens at unit
// boundaries.
func (s *Strategy) BeforeForward(int) error  { return nil }
func (s *Strategy) AfterForward(int) error   { return nil }
func (s *Strategy) BeforeBackward(int) error { return nil }
func (s *Strategy) AfterBackward(int) error  { return nil }

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
	o.Average.Before(o.Pool, s.grads)
	if err := o.Comm.ReduceScatter(o.Ctx, comm.F32(s.grads[lo:hi]), comm.F32(s.grads), comm.Sum).Wait(); err != nil {
		return zcore.StepResult{}, fmt.Errorf("stage 1: reduce-scatter of the gradients: %w", err)
	}
	part := s.grads[lo:hi]
	o.Average.After(o.Pool, part)
	res, err := s.shard.Step(in, part)
	if err != nil {
		return res, fmt.Errorf("stage 1: %w", err)
	}
	return res, nil
}

// Close returns every buffer to the accountant.
func (s *Strategy) Close() {
	if s.grads != nil {
		s.o.Acct.FreeF32(mem.Grads, mem.Device, s.grads)
		s.grads = nil
	}
	if s.shard != nil {
		s.shard.Close()
		s.shard = nil
	}
}
