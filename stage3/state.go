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
// After BeginLoad it completes that load instead (load.go).
func (s *Strategy) ImportState(st zcore.StrategyState) error {
	if s.load != nil {
		return s.importLoaded(st) // the values are in place already (load.go)
	}
	if s.steps > 0 || s.r.ug.Backwards() > 0 || s.r.ug.InBackward() {
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

// ScanState calls visit with each of the rank's fp32 state tensors, sub-
// group by sub-group: the master partition ("master") and the optimizer
// state created so far (by torch name). values is the tensor itself —
// in memory in place, whatever its tier (device, pinned host, the device
// sub-groups of partial offload) — or, with offload_optimizer nvme, a
// swap buffer its file was read into, and file names that file; values
// is visit's only until it returns. Nothing is copied: the swap files
// are read once, through the swapper's pool, at most buffer_count − 1
// buffers (or the one there is) in flight. A checkpoint's saver scans
// with it before it exports (train refuses to save NaN or Inf).
//
// An error from visit, or a read that fails (an *nvme.IOError naming the
// key and the file: a checksum mismatch, a file deleted under the run),
// stops the scan and is returned.
func (s *Strategy) ScanState(visit func(group int, name, file string, values []float32) error) error {
	if s.swap != nil {
		return s.scanSwapped(visit)
	}
	for g := range s.lay.SubGroups {
		lo, n := s.lay.SubGroupOffset(g), s.lay.SubGroupNumel(g)
		if err := visit(g, "master", "", s.master[lo:lo+n]); err != nil {
			return err
		}
		opt := s.opts[g]
		for _, name := range opt.StateNames() {
			if v := opt.State(name); v != nil {
				if err := visit(g, name, "", v); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// scanSwapped is ScanState from the swap files: the reads go ahead of
// the visits by up to buffer_count − 1 files (one buffer stays for
// SwapIn and SwapOut, as the package doc asks), in sub-group order.
func (s *Strategy) scanSwapped(visit func(group int, name, file string, values []float32) error) error {
	ss := s.swap
	type file struct {
		g    int
		name string
	}
	var files []file
	for g := range s.lay.SubGroups {
		files = append(files, file{g, "master"})
		for i, name := range ss.names {
			if ss.written[g][i] {
				files = append(files, file{g, name})
			}
		}
	}
	window := max(1, ss.sw.BufferCount()-1)
	var ahead []*nvme.Handle // the reads of files[next-len(ahead):next]
	defer func() {
		for _, h := range ahead {
			h.Wait()
			ss.sw.Release(h.Buffer())
		}
	}()
	next := 0
	for _, f := range files {
		for ; next < len(files) && len(ahead) < window; next++ {
			h, err := ss.sw.Prefetch(swapKey(files[next].g, files[next].name))
			if err != nil {
				return fmt.Errorf("stage 3: reading sub-group %d's %s to check it: %w", files[next].g, files[next].name, err)
			}
			ahead = append(ahead, h)
		}
		h := ahead[0]
		ahead = ahead[1:]
		err := h.Wait()
		if err == nil {
			if got, n := h.Buffer().Len(), s.lay.SubGroupNumel(f.g); got != 4*n {
				err = fmt.Errorf("its file holds %d bytes, the sub-group %d elements", got, n)
			}
		}
		if err == nil {
			err = visit(f.g, f.name, ss.sw.Path(swapKey(f.g, f.name)), h.Buffer().F32())
		} else {
			err = fmt.Errorf("stage 3: reading sub-group %d's %s from its swap file: %w", f.g, f.name, err)
		}
		ss.sw.Release(h.Buffer())
		if err != nil {
			return err
		}
	}
	return nil
}
