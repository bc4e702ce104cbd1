package zcore

import (
	"fmt"
	"slices"

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
	fl, _ := FlatOrder(l, world, false)
	return fl
}

// FlatOrder is DeepSpeed's stage 1/2 layout of a model's parameters over
// world ranks and the order it flattens them in: order[k] is the index in
// l.Specs of the flat buffer's k-th parameter — named_parameters order, or
// with round_robin_gradients partition.RoundRobinOrder (stage_1_and_2.py
// _round_robin_reorder: parameter i in bucket i % world, the buckets
// concatenated), so that gradients finishing one after another in
// backward belong to different ranks.
func FlatOrder(l *model.Layout, world int, roundRobin bool) (partition.FlatLayout, []int) {
	ps := make([]partition.Param, len(l.Specs))
	order := make([]int, len(l.Specs))
	for i, sp := range l.Specs {
		ps[i] = partition.Param{Name: sp.Name, Numel: sp.Numel}
		order[i] = i
	}
	if roundRobin {
		order = partition.RoundRobinOrder(len(ps), world)
		ps = partition.Permute(ps, order)
	}
	return partition.Flat(ps, world), order
}

// Run is a piece of a rank's partition in the model's flat buffer:
// elements [Model, Model+N) of the model's buffer (the padding past
// Layout.Numel included) are elements [Part, Part+N) of the partition.
// Without round_robin_gradients the flat buffer is the model's buffer and
// a partition is one run.
type Run struct{ Model, Part, N int }

// Shard is one rank's state under ZeRO stages 1 and 2, everything but the
// gradients: the full working parameters, the fp32 master partition and
// the optimizer on it. The stages differ only in how the gradient
// partition that Step takes is produced.
//
// The working parameters (and the stages' gradients) are in the model's
// layout, Padded long: what the model binds. The partitions are cut from
// DeepSpeed's flat buffer, which with round_robin_gradients holds the
// parameters in another order (FlatOrder); a rank's partition is then
// several runs of the model's buffer (Runs), the master partition and the
// gradient partition hold them in the flat buffer's order, and the
// updated partitions are broadcast run by run instead of all-gathered.
type Shard struct {
	o      *Options
	Flat   partition.FlatLayout
	Lo, Hi int // the rank's partition of the flat buffer

	order   []int   // Flat.Params[k] is Layout.Specs[order[k]]
	runs    [][]Run // every rank's partition in the model's buffer, by model offset
	inPlace bool    // every partition is the same range of both buffers (one run each)

	work   []float32 // Flat.Padded working parameters (mem.Params16)
	master []float32 // Flat.PartitionSize fp32 master partition (mem.MasterParams)
	opt    optim.Optimizer
	frags  []partition.Fragment // the parameters' pieces in the partition

	norms, scratch []float64
	one            []float32 // buffer of the scalar all-reduces
	group          [1]float32
	hs             []comm.Handle // the run broadcasts' handles, reused every step
}

// NewShard allocates the working parameters and the master partition,
// initializes them (the master from the working values, rounded to the
// training precision as DeepSpeed's fp32 partition is cloned from the
// 16-bit one), and builds the optimizer for the partition. o must have
// passed Check.
func NewShard(o *Options) (_ *Shard, err error) {
	c := o.Comm
	s := &Shard{o: o}
	s.Flat, s.order = FlatOrder(o.Layout, c.Size(), o.RoundRobin)
	s.Lo, s.Hi = s.Flat.Partition(c.Rank())
	s.inPlace = true
	for r := range c.Size() {
		runs := s.partitionRuns(r)
		lo, _ := s.Flat.Partition(r)
		s.inPlace = s.inPlace && (len(runs) == 0 || len(runs) == 1 && runs[0].Model == lo)
		s.runs = append(s.runs, runs)
	}
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
	if s.master, err = o.Acct.F32(mem.MasterParams, o.OptimizerTier, s.Flat.PartitionSize); err != nil {
		return nil, fmt.Errorf("fp32 master partition (%d elements): %w", s.Flat.PartitionSize, err)
	}
	for _, r := range s.Runs() {
		copy(s.master[r.Part:r.Part+r.N], s.work[r.Model:r.Model+r.N])
	}
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

// partitionRuns is rank's partition as runs of the model's buffer, by
// model offset, adjacent runs merged.
func (s *Shard) partitionRuns(rank int) []Run {
	lo, hi := s.Flat.Partition(rank)
	var runs []Run
	for _, f := range s.Flat.SliceMappings(rank) {
		sp := s.o.Layout.Specs[s.order[f.Param]]
		runs = append(runs, Run{Model: sp.Offset + f.ParamOffset, Part: f.PartitionOffset, N: f.Len})
	}
	if plo := max(lo, s.Flat.Total); plo < hi {
		// The padding ends both buffers.
		runs = append(runs, Run{Model: plo, Part: plo - lo, N: hi - plo})
	}
	slices.SortFunc(runs, func(a, b Run) int { return a.Model - b.Model })
	merged := runs[:0]
	for _, r := range runs {
		if n := len(merged); n > 0 && merged[n-1].Model+merged[n-1].N == r.Model && merged[n-1].Part+merged[n-1].N == r.Part {
			merged[n-1].N += r.N
			continue
		}
		merged = append(merged, r)
	}
	return merged
}

// Runs is the rank's partition as runs of the model's buffer, by model
// offset: one run [Lo, Hi) without round_robin_gradients.
func (s *Shard) Runs() []Run { return s.runs[s.o.Comm.Rank()] }

// InPlace reports whether every rank's partition is the same range of the
// model's buffer as of the flat buffer, so that a collective over the
// whole buffer leaves each rank's partition where it belongs.
func (s *Shard) InPlace() bool { return s.inPlace }

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
		return StepResult{}, fmt.Errorf("the gradient norm is not finite: %w", ErrDiverged)
	}
	s.group[0] = groupNorm
	total := optim.ZeroGlobalNorm(s.group[:]) // the norm over the one parameter group
	if f := optim.ZeroUnscaleFactor(total, in.LossScale, o.Clip); f != 1 {
		o.Pool.Scale(grad, f)
	}
	in.SetHyperparams(s.opt)
	s.opt.Step(s.master, grad)
	for _, r := range s.Runs() {
		mine := s.work[r.Model : r.Model+r.N]
		copy(mine, s.master[r.Part:r.Part+r.N])
		if o.Round != nil {
			o.Round(mine)
		}
	}
	if err := s.gather(); err != nil {
		return StepResult{}, fmt.Errorf("all-gather of the updated parameters: %w", err)
	}
	return StepResult{GradNorm: float64(total) / in.LossScale}, nil
}

// gather gives every rank every rank's updated partition: one in-place
// all-gather when the partitions are ranges of the model's buffer, else
// a broadcast of every run from its owner (the same bytes).
func (s *Shard) gather() error {
	o := s.o
	if s.inPlace {
		return o.Comm.AllGather(o.Ctx, comm.F32(s.work), comm.F32(s.work[s.Lo:s.Hi])).Wait()
	}
	s.hs = s.hs[:0]
	for rank, runs := range s.runs {
		for _, r := range runs {
			s.hs = append(s.hs, o.Comm.Broadcast(o.Ctx, comm.F32(s.work[r.Model:r.Model+r.N]), rank))
		}
	}
	err := comm.WaitAll(s.hs...)
	clear(s.hs)
	return err
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
	// full is in the flat buffer's order; dst in the model's.
	for k, i := range s.order {
		sp := o.Layout.Specs[i]
		copy(dst[sp.Offset:sp.Offset+sp.Numel], full[s.Flat.Offsets[k]:])
	}
	return nil
}

// Close returns the buffers and the optimizer state to the accountant.
func (s *Shard) Close() {
	if s.opt != nil {
		s.opt.Free()
		s.opt = nil
	}
	if s.master != nil {
		s.o.Acct.FreeF32(mem.MasterParams, s.o.OptimizerTier, s.master)
		s.master = nil
	}
	if s.work != nil {
		s.o.Acct.FreeF32(mem.Params16, mem.Device, s.work)
		s.work = nil
	}
}
