package stage3

import (
	"errors"
	"fmt"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/nvme"
)

// ExportState is the rank's state: per sub-group, its fp32 master
// partitions (every parameter's partition in order, padding included:
// DeepSpeed's fp32_flat_groups) and the optimizer state over them. With
// offload_optimizer nvme both are read back from the swap files.
func (s *Strategy) ExportState() (zcore.StrategyState, error) {
	st := zcore.StrategyState{Stage: 3, World: s.world, Rank: s.rank, Numel: s.l.Numel}
	for g := range s.lay.SubGroups {
		lo, n := s.lay.SubGroupOffset(g), s.lay.SubGroupNumel(g)
		if s.swap == nil {
			st.Groups = append(st.Groups, zcore.GroupState{Master: append([]float32(nil), s.master[lo:lo+n]...), Optim: zcore.ExportOptim(s.opts[g])})
			continue
		}
		gs, err := s.exportSwapped(g, n)
		if err != nil {
			return st, err
		}
		st.Groups = append(st.Groups, gs)
	}
	return st, nil
}

// exportSwapped reads sub-group g's master and optimizer state from the
// swap files.
func (s *Strategy) exportSwapped(g, n int) (zcore.GroupState, error) {
	ss := s.swap
	probe, err := s.o.NewOptimizer(n) // for the name and the param group
	if err != nil {
		return zcore.GroupState{}, err
	}
	defer probe.Free()
	probe.SetStepCount(ss.counts[g])
	gs := zcore.GroupState{Master: make([]float32, n), Optim: zcore.OptimState{Name: probe.Name(), Steps: ss.counts[g],
		State: map[string][]float32{}, Names: append([]string(nil), ss.names...), Group: probe.ParamGroup()}}
	hs := []*nvme.Handle{ss.sw.SwapIn(swapKey(g, "master"), gs.Master)}
	for i, name := range ss.names {
		if ss.written[g][i] {
			v := make([]float32, n)
			gs.Optim.State[name] = v
			hs = append(hs, ss.sw.SwapIn(swapKey(g, name), v))
		}
	}
	if err := nvme.WaitAll(hs...); err != nil {
		return gs, fmt.Errorf("stage 3: reading sub-group %d from the swap files: %w", g, err)
	}
	return gs, nil
}

// ImportState restores a state ExportState made on the same rank of a
// world of the same size, into a strategy that has taken no step yet: the
// masters and optimizer states (through the swap files with
// offload_optimizer nvme), and the parameter partitions from the masters.
// The persistent parameters are gathered again: every rank calls it.
func (s *Strategy) ImportState(st zcore.StrategyState) error {
	if s.steps > 0 || s.r.ug.Backwards > 0 || s.r.ug.InBackward {
		return errors.New("stage 3: load a checkpoint into a freshly built engine, before any step (as DeepSpeed requires)")
	}
	want := make([]int, len(s.lay.SubGroups))
	for g := range want {
		want[g] = s.lay.SubGroupNumel(g)
	}
	if err := st.Check(3, s.world, s.rank, s.l.Numel, want); err != nil {
		return err
	}
	for g, gs := range st.Groups {
		lo, n := s.lay.SubGroupOffset(g), want[g]
		if s.swap == nil {
			copy(s.master[lo:lo+n], gs.Master)
			if err := zcore.ImportOptim(s.opts[g], gs.Optim); err != nil {
				return fmt.Errorf("stage 3: sub-group %d: %w", g, err)
			}
		} else if err := s.importSwapped(g, gs); err != nil {
			return err
		}
		work := s.work[lo : lo+n]
		copy(work, gs.Master)
		if s.o.Round != nil {
			s.o.Round(work)
		}
		if s.pswap != nil && s.pswap.sw != nil {
			ids := s.lay.SubGroups[g]
			if err := s.swapOutParams(ids[0], ids[len(ids)-1]); err != nil {
				return err
			}
		}
	}
	if s.hpz != nil {
		s.hpz.drop(s.o.Acct)
	}
	return s.f.gatherPersistent()
}

// importSwapped writes sub-group g's master and optimizer state to its
// swap files, checked against a fresh optimizer of the sub-group.
func (s *Strategy) importSwapped(g int, gs zcore.GroupState) error {
	ss, n := s.swap, len(gs.Master)
	probe, err := s.o.NewOptimizer(n)
	if err != nil {
		return err
	}
	err = zcore.ImportOptim(probe, gs.Optim)
	probe.Free()
	if err != nil {
		return fmt.Errorf("stage 3: sub-group %d: %w", g, err)
	}
	hs := []*nvme.Handle{ss.sw.SwapOut(swapKey(g, "master"), gs.Master)}
	for i, name := range ss.names {
		if v, ok := gs.Optim.State[name]; ok {
			hs = append(hs, ss.sw.SwapOut(swapKey(g, name), v))
			ss.written[g][i] = true
		}
	}
	if err := nvme.WaitAll(hs...); err != nil {
		return fmt.Errorf("stage 3: writing sub-group %d to the swap files: %w", g, err)
	}
	ss.counts[g] = gs.Optim.Steps
	return nil
}
