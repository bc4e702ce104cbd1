package zcore

import (
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/lossscale"
	"github.com/dszero/dszero/zero/optim"
	"github.com/dszero/dszero/zero/partition"
)

// FlatLayout is DeepSpeed's stage 1/2 layout of a model's parameters over
// world ranks: one parameter group, named_parameters order.
func FlatLayout(l *model.Layout, world int) partition.FlatLayout {
	ps := make([]partition.Param, len(l.Specs))
	for i, sp := range l.Specs {
		ps[i] = partition.Param{Name: sp.Name, Numel: sp.Numel}
	}
	return partition.Flat(ps, world)
}

// Shard is one rank's state under ZeRO stages 1 and 2, everything but the
// gradients: the full working parameters, the fp32 master partition and
// the optimizer on it. The stages differ only in how the gradient
// partition that Step takes is produced.
type Shard struct {
	o      *Options
	Flat   partition.FlatLayout
	Lo, Hi int // the rank's partition of the flat buffer

	work   []float32 // Flat.Padded working parameters (mem.Params16)
	master []float32 // Flat.PartitionSize fp32 master partition (mem.MasterParams)
	opt    optim.Optimizer
	frags  []partition.Fragment // the parameters' pieces in the partition

	norms, scratch []float64
	one            []float32 // buffer of the scalar all-reduces
	group          [1]float32
}

// NewShard allocates the working parameters and the master partition,
// initializes them (the master from the working values, rounded to the
// training precision as DeepSpeed's fp32 partition is cloned from the
// 16-bit one), and builds the optimizer for the partition. o must have
// passed Check.
func NewShard(o *Options) (_ *Shard, err error) {
	c := o.Comm
	s := &Shard{o: o, Flat: FlatLayout(o.Layout, c.Size())}
	s.Lo, s.Hi = s.Flat.Partition(c.Rank())
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.work, err = o.Acct.F32(mem.Params16, mem.Device, s.Flat.Padded); err != nil {
		return nil, fmt.Errorf("working parameters (%d elements): %w", s.Flat.Padded, err)
	}
	n := o.Layout.Numel
	if o.InitFunc != nil {
		o.InitFunc(s.work[:n])
	} else {
		copy(s.work, o.Init)
	}
	if o.Round != nil {
		o.Round(s.work[:n])
	}
	if s.master, err = o.Acct.F32(mem.MasterParams, mem.Device, s.Flat.PartitionSize); err != nil {
		return nil, fmt.Errorf("fp32 master partition (%d elements): %w", s.Flat.PartitionSize, err)
	}
	copy(s.master, s.work[s.Lo:s.Hi])
	opt, err := o.NewOptimizer(s.Flat.PartitionSize)
	if err != nil {
		return nil, err // (not assigned: a typed nil would not be a nil interface)
	}
	s.opt = opt
	s.frags = s.Flat.SliceMappings(c.Rank())
	s.norms = make([]float64, len(s.frags))
	s.scratch = make([]float64, len(s.frags))
	s.one = make([]float32, 1)
	return s, nil
}

// Work is the full working parameters (Layout.Numel elements), what the
// model binds.
func (s *Shard) Work() []float32 { return s.work[:s.o.Layout.Numel] }

// Master is the master partition without its padding, and its offset in
// the flat buffer.
func (s *Shard) Master() (int, []float32) { return s.Lo, s.master[:s.Flat.SavedLen(s.o.Comm.Rank())] }

// Optimizer is the optimizer of the partition.
func (s *Shard) Optimizer() optim.Optimizer { return s.opt }

// Step takes the optimizer step with grad, the averaged gradient partition
// (Flat.PartitionSize elements), which it scales in place; then it
// all-gathers the updated partitions into every rank's working
// parameters. Every rank calls it (it is a collective).
func (s *Shard) Step(in StepInput, grad []float32) (StepResult, error) {
	o := s.o
	if len(grad) != len(s.master) {
		panic(fmt.Sprintf("zcore: Step with %d gradients for a partition of %d", len(grad), len(s.master)))
	}
	if in.CheckOverflow {
		// has_overflow(partition_gradients): each rank checks its
		// partition, the ranks agree (all_reduce MAX; a SUM of flags here).
		s.one[0] = 0
		if lossscale.HasInfOrNaN(grad) {
			s.one[0] = 1
		}
		if err := s.allReduceOne("the overflow flag"); err != nil {
			return StepResult{}, err
		}
		if s.one[0] != 0 {
			return StepResult{GradNorm: -1, Overflow: true}, nil
		}
	}
	for i, f := range s.frags {
		s.norms[i] = optim.Norm2F64(grad[f.PartitionOffset : f.PartitionOffset+f.Len])
	}
	s.one[0] = optim.Zero12LocalSumSq(s.norms, s.scratch)
	if err := s.allReduceOne("the gradient norm"); err != nil {
		return StepResult{}, err
	}
	groupNorm := optim.ZeroNorm(s.one[0]) // -1 when not finite
	if groupNorm < 0 && !in.CheckOverflow {
		return StepResult{}, fmt.Errorf("the gradient norm is not finite: training diverged (lower the learning rate, or use bf16/fp32)")
	}
	s.group[0] = groupNorm
	total := optim.ZeroGlobalNorm(s.group[:]) // the norm over the one parameter group
	if f := optim.ZeroUnscaleFactor(total, in.LossScale, o.Clip); f != 1 {
		o.Pool.Scale(grad, f)
	}
	in.SetHyperparams(s.opt)
	s.opt.Step(s.master, grad)
	mine := s.work[s.Lo:s.Hi]
	copy(mine, s.master)
	if o.Round != nil {
		o.Round(mine)
	}
	if err := o.Comm.AllGather(o.Ctx, comm.F32(s.work), comm.F32(mine)).Wait(); err != nil {
		return StepResult{}, fmt.Errorf("all-gather of the updated parameters: %w", err)
	}
	return StepResult{GradNorm: float64(total) / in.LossScale}, nil
}

func (s *Shard) allReduceOne(what string) error {
	if err := s.o.Comm.AllReduce(s.o.Ctx, comm.F32(s.one), comm.Sum).Wait(); err != nil {
		return fmt.Errorf("all-reduce of %s: %w", what, err)
	}
	return nil
}

// GatherMaster writes the full fp32 master parameters (Layout.Numel) into
// dst. Every rank calls it (it is a collective).
func (s *Shard) GatherMaster(dst []float32) error {
	o := s.o
	if o.Comm.Size() == 1 {
		copy(dst, s.master[:o.Layout.Numel])
		return nil
	}
	full, err := o.Acct.F32(mem.Temp, mem.Device, s.Flat.Padded)
	if err != nil {
		return fmt.Errorf("gathering the fp32 master parameters: %w", err)
	}
	defer o.Acct.FreeF32(mem.Temp, mem.Device, full)
	if err := o.Comm.AllGather(o.Ctx, comm.F32(full), comm.F32(s.master)).Wait(); err != nil {
		return fmt.Errorf("gathering the fp32 master parameters: %w", err)
	}
	copy(dst, full[:o.Layout.Numel])
	return nil
}

// Close returns the buffers and the optimizer state to the accountant.
func (s *Shard) Close() {
	if s.opt != nil {
		s.opt.Free()
		s.opt = nil
	}
	if s.master != nil {
		s.o.Acct.FreeF32(mem.MasterParams, mem.Device, s.master)
		s.master = nil
	}
	if s.work != nil {
		s.o.Acct.FreeF32(mem.Params16, mem.Device, s.work)
		s.work = nil
	}
}
