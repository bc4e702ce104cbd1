package stage3

import (
	"errors"
	"fmt"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/nvme"
)

// Loading a checkpoint into the swap files. With offload_optimizer nvme
// a sub-group's fp32 master partition and optimizer state live in swap
// files, not in buffers a loader could read into (ViewState shows them
// as readers). A checkpoint's loader then hands each tensor over as it
// reads it from the file: LoadTensor lends it a buffer of the swapper's
// pool, the loader reads the tensor into it, and the buffer is written to
// the tensor's swap file — the master's values also go to the sub-group's
// parameter partitions, and with offload_param nvme from there to their
// swap files. The pool is the rank's already (training steps through
// it), so a load allocates nothing of the model's size; the next
// tensor's read overlaps the previous one's write, as many in flight as
// the pool has buffers. ImportState then takes the step counts and the
// rest of the state, as it does for a state in memory.

// swapLoad is a load into the swap files in progress (BeginLoad).
type swapLoad struct {
	master []bool   // [sub-group]: its master was loaded
	states [][]bool // [sub-group][state]: loaded
	hs     []*nvme.Handle
	err    error // a failed LoadTensor or write: the load is void
}

// BeginLoad starts loading a checkpoint into the strategy's own storage
// and reports whether that goes through LoadTensor: true with
// offload_optimizer nvme, then every fp32 tensor of the checkpoint is
// loaded by LoadTensor, EndLoad waits for the writes, and ImportState
// completes the load with the state's step counts (its groups' Master
// and Optim.State are then not read, and may be empty); false otherwise,
// when ViewState's buffers are where a loader reads the tensors to and
// ImportState takes them as any state. The strategy must be freshly
// built, as ImportState requires.
func (s *Strategy) BeginLoad() (bool, error) {
	if s.swap == nil {
		return false, nil
	}
	if err := s.fresh(); err != nil {
		return false, err
	}
	k := len(s.lay.SubGroups)
	ld := &swapLoad{master: make([]bool, k), states: make([][]bool, k)}
	for g := range ld.states {
		ld.states[g] = make([]bool, len(s.swap.names))
	}
	s.load = ld
	return true, nil
}

// fresh reports whether the strategy may still take a checkpoint.
func (s *Strategy) fresh() error {
	if s.steps > 0 || s.r.ug.Backwards() > 0 || s.r.ug.InBackward() {
		return errors.New("stage 3: load a checkpoint into a freshly built engine, before any step (as DeepSpeed requires)")
	}
	return nil
}

// LoadTensor loads tensor name ("master", or an optimizer state by its
// torch name) of sub-group g from read, which must fill dst — a swap
// buffer of the sub-group's elements, the caller's until read returns —
// or fail. The buffer is then written to the tensor's swap file,
// asynchronously (EndLoad waits); a master is first copied to the
// sub-group's parameter partitions (rounded to the training dtype), which
// with offload_param nvme are written to their swap files and their
// memory handed back. Errors name the sub-group and the tensor.
func (s *Strategy) LoadTensor(g int, name string, read func(dst []float32) error) error {
	ld, ss := s.load, s.swap
	if ld == nil {
		panic("stage 3: LoadTensor without BeginLoad")
	}
	if ld.err != nil {
		return ld.err
	}
	if g < 0 || g >= len(s.lay.SubGroups) {
		return fmt.Errorf("stage 3: the checkpoint has fp32 group %d, this rank has %d (a different sub_group_size?)", g, len(s.lay.SubGroups))
	}
	i := -1 // the state's index in ss.names
	if name != "master" {
		for j, n := range ss.names {
			if n == name {
				i = j
			}
		}
		if i < 0 {
			return fmt.Errorf("stage 3: sub-group %d: the checkpoint has optimizer state %q, which this run's optimizer (state %v) does not keep: use the optimizer the checkpoint was trained with", g, name, ss.names)
		}
	}
	n := s.lay.SubGroupNumel(g)
	b, err := ss.sw.Acquire(4 * n)
	if err != nil {
		return s.voidLoad(fmt.Errorf("stage 3: a swap buffer for sub-group %d's %s: %w", g, name, err))
	}
	if err := read(b.F32()); err != nil {
		ss.sw.Release(b)
		return s.voidLoad(fmt.Errorf("sub-group %d's %s: %w", g, name, err))
	}
	if i < 0 {
		if err := s.loadWork(g, b.F32()); err != nil {
			ss.sw.Release(b)
			return s.voidLoad(err)
		}
		ld.master[g] = true
	} else {
		ld.states[g][i] = true
	}
	ld.hs = append(ld.hs, ss.sw.Write(swapKey(g, name), b))
	return nil
}

// loadPiece is the most elements of parameter partitions loadWork makes
// resident at once with offload_param nvme (32 MiB of them, or one
// partition when it is larger).
const loadPiece = 8 << 20

// loadWork puts sub-group g's loaded master into its parameter
// partitions, rounded to the training dtype. With offload_param nvme
// that goes a few partitions at a time (loadPiece elements): they are
// written to their swap files and their memory handed back before the
// next are filled, so that the partitions resident at once do not grow
// with the sub-group.
func (s *Strategy) loadWork(g int, master []float32) error {
	ids, lo := s.lay.SubGroups[g], s.lay.SubGroupOffset(g)
	first := 0 // ids[first:k+1] are the partitions of the next piece
	for k, id := range ids {
		start, end := s.lay.Offsets[ids[first]], s.lay.Offsets[id]+s.lay.PartitionSizes[id]
		swapped := s.pswap != nil && s.pswap.sw != nil
		if k < len(ids)-1 && (!swapped || end-start < loadPiece) {
			continue
		}
		work := s.work[start:end]
		copy(work, master[start-lo:end-lo])
		if s.o.Round != nil {
			s.o.Round(work)
		}
		if swapped {
			if err := s.swapOutParams(ids[first], id); err != nil {
				return err
			}
		}
		first = k + 1
	}
	return nil
}

// voidLoad records err as the load's failure and returns it.
func (s *Strategy) voidLoad(err error) error {
	s.load.err = err
	return err
}

// EndLoad waits for the writes LoadTensor started and returns what
// failed: err, the loader's own verdict on what it read (a file whose
// sha256 is not the manifest's, another rank's failure, a LoadTensor's
// error it passed on), and any failed write. Any failure voids the load:
// the swap files are then undefined, ImportState refuses them, and the
// engine is to be closed, not stepped.
func (s *Strategy) EndLoad(err error) error {
	ld := s.load
	if ld == nil {
		return err
	}
	werr := nvme.WaitAll(ld.hs...)
	ld.hs = nil
	if werr != nil {
		werr = fmt.Errorf("stage 3: writing the checkpoint's state to the swap files: %w", werr)
	}
	if err != nil || werr != nil {
		if ld.err == nil {
			ld.err = errors.Join(err, werr)
		}
		return errors.Join(err, werr)
	}
	return ld.err // a LoadTensor's failure the loader did not pass on
}

// importLoaded is ImportState after a load through LoadTensor: st's
// groups give the step counts (and the optimizer, which is checked); the
// values are in the swap files and the parameter partitions already.
func (s *Strategy) importLoaded(st zcore.StrategyState) error {
	ld, ss := s.load, s.swap
	s.load = nil
	if err := s.fresh(); err != nil {
		return err
	}
	if ld.err != nil || len(ld.hs) > 0 {
		return fmt.Errorf("stage 3: the load into the swap files did not complete: %w", errors.Join(ld.err, nvme.WaitAll(ld.hs...)))
	}
	head := st
	head.Groups = nil
	if err := head.Check(3, s.world, s.rank, s.l.Numel, nil); err != nil {
		return err
	}
	if len(st.Groups) != len(s.lay.SubGroups) {
		return fmt.Errorf("the state has %d fp32 groups, this rank has %d (a different sub_group_size?)", len(st.Groups), len(s.lay.SubGroups))
	}
	// A one-element probe checks the optimizer's name and resume state,
	// as importSwapped's does, without a sub-group's worth of state.
	probe, err := s.o.NewOptimizer(1)
	if err != nil {
		return err
	}
	defer probe.Free()
	for g, gs := range st.Groups {
		if !ld.master[g] {
			return fmt.Errorf("stage 3: the checkpoint gave no fp32 master partition of sub-group %d", g)
		}
		o := gs.Optim
		o.State = nil // in the swap files
		if err := zcore.ImportOptim(probe, o); err != nil {
			return fmt.Errorf("stage 3: sub-group %d: %w", g, err)
		}
		for i, loaded := range ld.states[g] {
			if loaded {
				ss.written[g][i] = true
			}
		}
		ss.counts[g] = gs.Optim.Steps
	}
	if s.hpz != nil {
		s.hpz.drop(s.o.Acct)
	}
	return s.f.gatherPersistent()
}
