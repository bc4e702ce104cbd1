package stage3

import (
	"errors"

	"github.com/dszero/dszero/internal/zcore"
)

// ExportState is the rank's state: per sub-group, its fp32 master
// partitions (every parameter's partition in order, padding included:
// DeepSpeed's fp32_flat_groups) and the optimizer state over them. With
// offload_optimizer nvme both are read back from the swap files.
func (s *Strategy) ExportState() (zcore.StrategyState, error) {
	st := zcore.StrategyState{Stage: 3, World: s.world, Rank: s.rank, Numel: s.l.Numel}
	for g := range s.lay.SubGroups {
		gs, err := s.optim.Export(g)
		if err != nil {
			return st, err
		}
		st.Groups = append(st.Groups, gs)
	}
	return st, nil
}

// ImportState restores a state ExportState made on the same rank of a
// world of the same size, into a strategy that has taken no step yet: the
// masters and optimizer states (through the swap files with
// offload_optimizer nvme), and the parameter partitions from the masters.
// The persistent parameters are gathered again: every rank calls it.
// After BeginLoad it completes that load instead (load.go).
func (s *Strategy) ImportState(st zcore.StrategyState) error {
	if s.loading {
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
		if err := s.optim.Import(g, gs); err != nil {
			return err
		}
		if err := s.params.Update(g, gs.Master); err != nil {
			return err
		}
	}
	if s.hpz != nil {
		s.hpz.drop(s.o.Acct)
	}
	return s.f.gatherPersistent()
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
	return s.optim.Scan(visit)
}

// ViewState is ExportState over the strategy's own buffers (see
// zcore.ViewOptim), valid until the next step: each sub-group's master
// partition and optimizer state in place, whatever their tier. With
// offload_optimizer nvme they live in the swap files, and each group is
// a zcore.StreamedGroup reading them through the swapper's pool, one
// tensor at a time (one pool buffer held while a tensor is read), rather
// than a copy of the state in memory.
func (s *Strategy) ViewState() (zcore.StrategyState, error) {
	st := zcore.StrategyState{Stage: 3, World: s.world, Rank: s.rank, Numel: s.l.Numel}
	for g := range s.lay.SubGroups {
		gs, err := s.optim.View(g)
		if err != nil {
			return st, err
		}
		st.Groups = append(st.Groups, gs)
	}
	return st, nil
}
