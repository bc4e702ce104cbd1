package offload

import (
	"errors"
	"fmt"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/nvme"
)

// Loading a checkpoint into the store. With offload_optimizer nvme a
// sub-group's fp32 master partition and optimizer state live in swap
// files, not in buffers a loader could read into (View shows them as
// readers). A checkpoint's loader then hands each tensor over as it
// reads it from the file: LoadTensor lends it a buffer of the swapper's
// pool, the loader reads the tensor into it, and the buffer is written
// to the tensor's swap file — the master's values also go to the
// caller (stage 3's parameter partitions). The pool is the rank's
// already (training steps through it), so a load allocates nothing of
// the model's size; the next tensor's read overlaps the previous one's
// write, as many in flight as the pool has buffers. ImportLoaded then
// takes the step counts. MemoryOptim takes no such load: the loader
// reads into View's buffers and Import takes them.

// optimLoad is a load into the swap files in progress (BeginLoad).
type optimLoad struct {
	master []bool   // [sub-group]: its master was loaded
	states [][]bool // [sub-group][state]: loaded
	hs     []*nvme.Handle
	err    error // a failed LoadTensor or write: the load is void
}

// BeginLoad starts a load into the swap files, if check (the caller's:
// whether it may take a checkpoint now) passes, and reports true: every
// fp32 tensor of the checkpoint then goes through LoadTensor, EndLoad
// waits for the writes, and ImportLoaded completes the load.
func (ss *SwappedOptim) BeginLoad(check func() error) (bool, error) {
	if err := check(); err != nil {
		return false, err
	}
	k := len(ss.c.Layout.SubGroups)
	ld := &optimLoad{master: make([]bool, k), states: make([][]bool, k)}
	for g := range ld.states {
		ld.states[g] = make([]bool, len(ss.names))
	}
	ss.load = ld
	return true, nil
}

// LoadTensor loads tensor name ("master", or an optimizer state by its
// torch name) of sub-group g from read, which must fill dst — a swap
// buffer of the sub-group's elements, the caller's until read returns —
// or fail. A master is then given to putMaster (stage 3 rounds it into
// its parameter partitions); the buffer is written to the tensor's swap
// file, asynchronously (EndLoad waits). Errors name the sub-group and
// the tensor, and void the load.
func (ss *SwappedOptim) LoadTensor(g int, name string, read func(dst []float32) error, putMaster func(master []float32) error) error {
	ld := ss.load
	if ld == nil {
		panic("stage 3: LoadTensor without BeginLoad")
	}
	if ld.err != nil {
		return ld.err
	}
	lay := ss.c.Layout
	if g < 0 || g >= len(lay.SubGroups) {
		return fmt.Errorf("stage 3: the checkpoint has fp32 group %d, this rank has %d (a different sub_group_size?)", g, len(lay.SubGroups))
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
	n := lay.SubGroupNumel(g)
	b, err := ss.sw.Acquire(4 * n)
	if err != nil {
		return ss.voidLoad(fmt.Errorf("stage 3: a swap buffer for sub-group %d's %s: %w", g, name, err))
	}
	if err := read(b.F32()); err != nil {
		ss.sw.Release(b)
		return ss.voidLoad(fmt.Errorf("sub-group %d's %s: %w", g, name, err))
	}
	if i < 0 {
		if err := putMaster(b.F32()); err != nil {
			ss.sw.Release(b)
			return ss.voidLoad(err)
		}
		ld.master[g] = true
	} else {
		ld.states[g][i] = true
	}
	ld.hs = append(ld.hs, ss.sw.Write(swapKey(g, name), b))
	return nil
}

// voidLoad records err as the load's failure and returns it.
func (ss *SwappedOptim) voidLoad(err error) error {
	ss.load.err = err
	return err
}

// EndLoad waits for the writes LoadTensor started and returns what
// failed: err, the loader's own verdict on what it read, and any failed
// write. Any failure voids the load: the swap files are then undefined,
// ImportLoaded refuses them, and the store is to be closed, not stepped.
func (ss *SwappedOptim) EndLoad(err error) error {
	ld := ss.load
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

// ImportLoaded completes a load through LoadTensor and ends it: check,
// given the load's failure if it did not complete (nil if it did), runs
// the caller's checks of the state and returns the first error; then
// groups (one per sub-group) give the step counts and the optimizer,
// which is checked. Their Master and Optim.State are not read: the
// values are in the swap files already.
func (ss *SwappedOptim) ImportLoaded(groups []zcore.GroupState, check func(incomplete error) error) error {
	ld := ss.load
	if ld == nil {
		panic("stage 3: ImportLoaded without BeginLoad")
	}
	ss.load = nil
	var incomplete error
	if ld.err != nil || len(ld.hs) > 0 {
		incomplete = fmt.Errorf("stage 3: the load into the swap files did not complete: %w", errors.Join(ld.err, nvme.WaitAll(ld.hs...)))
	}
	if err := check(incomplete); err != nil {
		return err
	}
	if incomplete != nil {
		return incomplete
	}
	// A one-element probe checks the optimizer's name and resume state,
	// as Import's does, without a sub-group's worth of state.
	probe, err := ss.c.NewOptimizer(1)
	if err != nil {
		return err
	}
	defer probe.Free()
	for g, gs := range groups {
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
	return nil
}

// BeginLoad reports false (check is not called): a loader reads a
// checkpoint into View's buffers, and Import takes them.
func (m *MemoryOptim) BeginLoad(check func() error) (bool, error) { return false, nil }

// LoadTensor is not for a store in memory (BeginLoad is false).
func (m *MemoryOptim) LoadTensor(g int, name string, read func(dst []float32) error, putMaster func(master []float32) error) error {
	panic("stage 3: LoadTensor without BeginLoad")
}

// EndLoad returns err: there is no load of the store's own to wait for.
func (m *MemoryOptim) EndLoad(err error) error { return err }

// ImportLoaded is not for a store in memory (BeginLoad is false).
func (m *MemoryOptim) ImportLoaded(groups []zcore.GroupState, check func(incomplete error) error) error {
	panic("stage 3: ImportLoaded without BeginLoad")
}
