package zcore

import (
	"fmt"

	"github.com/dszero/dszero/zero/optim"
)

// StrategyState is one rank's strategy state in canonical form: what a
// checkpoint holds of it, and all that resuming needs besides the engine's
// counters. The working parameters are not in it: every stage derives them
// from the fp32 master (rounded to the training precision), as DeepSpeed's
// load does with load_from_fp32_weights.
type StrategyState struct {
	Stage int // ZeRO stage, 0–3
	World int // data-parallel ranks the state is partitioned over
	Rank  int
	Numel int // the model's parameters (Layout.Numel)
	// Groups are the rank's fp32 groups in order: one at stages 0–2 (the
	// whole model at stage 0, the rank's partition of the flat buffer
	// without its padding at stages 1 and 2 — DeepSpeed's
	// single_partition_of_fp32_groups), one per sub-group at stage 3 (the
	// concatenated per-parameter partitions, padding included —
	// fp32_flat_groups).
	Groups []GroupState
}

// GroupState is one fp32 group: the master values and the optimizer state
// over them.
type GroupState struct {
	Master []float32
	Optim  OptimState
	// Streamed, set only in a view (ViewState) of a group whose values
	// live outside memory (NVMe swap files), reads them instead: Master
	// and Optim.State are then nil.
	Streamed *StreamedGroup
}

// OptimState is one optimizer's state: torch's state-dict entry for one
// flat parameter.
type OptimState struct {
	Name  string               // optim.Optimizer.Name
	Steps int64                // "step"
	State map[string][]float32 // by torch name (exp_avg, ...); a tensor not created yet is absent
	Names []string             // the optimizer's state names, in order
	Group map[string]any       // the param group (lr, betas, ...), without "params"
	// Resume is state outside torch's state dict that a bit-exact resume
	// needs (resumer); nil when there is none.
	Resume []float64
	// Tensors are the per-tensor entries of an optim.TensorStateful
	// optimizer (DeepSpeed's 1-bit optimizers), one per segment; nil for
	// the others.
	Tensors [][]optim.Entry
}

// resumer is an optimizer that keeps state outside the state dict which a
// bit-exact resume needs (DeepSpeed Adam's running β products).
type resumer interface {
	ResumeState() []float64
	SetResumeState(v []float64) error
}

// ExportOptim copies opt's state.
func ExportOptim(opt optim.Optimizer) OptimState {
	st := OptimState{Name: opt.Name(), Steps: opt.StepCount(), State: map[string][]float32{}, Names: opt.StateNames(), Group: opt.ParamGroup()}
	if r, ok := opt.(resumer); ok {
		st.Resume = r.ResumeState()
	}
	if t, ok := opt.(optim.TensorStateful); ok {
		st.Tensors = t.TensorState() // copies
	}
	for _, n := range st.Names {
		if v := opt.State(n); v != nil {
			st.State[n] = append([]float32(nil), v...)
		}
	}
	return st
}

// ImportOptim restores st into opt, which must be the same optimizer over
// as many elements.
func ImportOptim(opt optim.Optimizer, st OptimState) error {
	if st.Name != "" && st.Name != opt.Name() {
		return fmt.Errorf("the checkpoint's optimizer is %s, this run's is %s: use the optimizer the checkpoint was trained with", st.Name, opt.Name())
	}
	for _, n := range opt.StateNames() {
		v, ok := st.State[n]
		if !ok {
			continue // not created yet (SGD's momentum before its first step)
		}
		if len(v) != opt.Len() {
			return fmt.Errorf("optimizer state %s has %d elements, the partition has %d", n, len(v), opt.Len())
		}
		if err := opt.LoadState(n, v); err != nil {
			return err
		}
	}
	for n := range st.State {
		if !contains(opt.StateNames(), n) {
			return fmt.Errorf("the checkpoint has optimizer state %q, which %s does not keep: use the optimizer the checkpoint was trained with", n, opt.Name())
		}
	}
	opt.SetStepCount(st.Steps)
	if t, ok := opt.(optim.TensorStateful); ok && st.Tensors != nil {
		if err := t.LoadTensorState(st.Tensors); err != nil {
			return err
		}
	} else if !ok {
		for i, e := range st.Tensors {
			if len(e) > 0 {
				return fmt.Errorf("the checkpoint's optimizer state of parameter %d holds %q, which %s does not keep: use the optimizer the checkpoint was trained with", i, e[0].Key, opt.Name())
			}
		}
	}
	if r, ok := opt.(resumer); ok && st.Resume != nil {
		return r.SetResumeState(st.Resume)
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Check reports whether st fits a strategy of stage on world ranks over a
// model of numel parameters, with group lengths want; the errors say what
// to do.
func (st StrategyState) Check(stage, world, rank, numel int, want []int) error {
	switch {
	case st.Stage != stage:
		return fmt.Errorf("the state is of ZeRO stage %d, this engine runs stage %d: set zero_optimization.stage to %d (dszero does not convert between stages yet)", st.Stage, stage, st.Stage)
	case st.World != world:
		return fmt.Errorf("the state is partitioned over %d ranks, this run has %d: resume with %d ranks (dszero does not repartition yet)", st.World, world, st.World)
	case st.Rank != rank:
		return fmt.Errorf("the state is rank %d's, this is rank %d", st.Rank, rank)
	case st.Numel != numel:
		return fmt.Errorf("the state is of a model of %d parameters, this model has %d: load it into the model it was trained with", st.Numel, numel)
	case len(st.Groups) != len(want):
		return fmt.Errorf("the state has %d fp32 groups, this rank has %d (a different sub_group_size?)", len(st.Groups), len(want))
	}
	for g, n := range want {
		if len(st.Groups[g].Master) != n {
			return fmt.Errorf("fp32 group %d has %d elements, this rank's has %d", g, len(st.Groups[g].Master), n)
		}
	}
	return nil
}

// ExportState is the shard's state (stages 1 and 2).
func (s *Shard) ExportState(stage int) StrategyState {
	_, m := s.Master()
	opt := ExportOptim(s.opt)
	for n, v := range opt.State {
		opt.State[n] = v[:len(m)] // the padding's state is zero: DeepSpeed strips it
	}
	return StrategyState{Stage: stage, World: s.o.Comm.Size(), Rank: s.o.Comm.Rank(), Numel: s.o.Layout.Numel,
		Groups: []GroupState{{Master: append([]float32(nil), m...), Optim: opt}}}
}

// ImportState restores the shard's master partition and optimizer state
// from st, and the working parameters from every rank's master (a
// collective: every rank calls it). st may be the shard's own view
// (ViewState) that a loader filled: its buffers are then copied onto
// themselves, and nothing is allocated.
func (s *Shard) ImportState(stage int, st StrategyState) error {
	rank := s.o.Comm.Rank()
	if err := st.Check(stage, s.o.Comm.Size(), rank, s.o.Layout.Numel, []int{s.Flat.SavedLen(rank)}); err != nil {
		return err
	}
	g := st.Groups[0]
	copy(s.master, g.Master)
	clear(s.master[len(g.Master):])
	// The optimizer state is the partition's, padding included: each
	// tensor goes into the optimizer's own buffer (a no-op for a view) and
	// its padding is zeroed; a state the optimizer has not created yet is
	// padded in a new buffer.
	padded := g.Optim
	padded.State = map[string][]float32{}
	for n, v := range g.Optim.State {
		if len(v) != len(g.Master) {
			return fmt.Errorf("optimizer state %s has %d elements, the master partition %d", n, len(v), len(g.Master))
		}
		buf := s.opt.State(n)
		if len(buf) != len(s.master) {
			buf = make([]float32, len(s.master))
		}
		copy(buf, v)
		clear(buf[len(v):])
		padded.State[n] = buf
	}
	if err := ImportOptim(s.opt, padded); err != nil {
		return err
	}
	for _, r := range s.Runs() {
		mine := s.work[r.Model : r.Model+r.N]
		copy(mine, s.master[r.Part:r.Part+r.N])
		if s.o.Round != nil {
			s.o.Round(mine)
		}
	}
	if err := s.gather(); err != nil {
		return fmt.Errorf("all-gather of the loaded parameters: %w", err)
	}
	return nil
}
