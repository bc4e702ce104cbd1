package stage3

import (
	"errors"
	"fmt"

	"github.com/dszero/dszero/internal/zcore"
)

// Loading a checkpoint into the strategy's own storage. Where the
// optimizer-state store keeps the fp32 masters and optimizer state in
// swap files (offload.SwappedOptim), not in buffers a loader could read
// into, a checkpoint's loader hands each tensor to LoadTensor as it
// reads it, and the store writes it to its swap file through a buffer of
// its pool (offload/optimload.go); the master's values also go to the
// sub-group's parameter partitions. ImportState then takes the step
// counts and the rest of the state. Elsewhere BeginLoad reports false:
// the loader reads into ViewState's buffers and ImportState takes them.

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
	ok, err := s.optim.BeginLoad(s.fresh)
	s.loading = ok
	return ok, err
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
	return s.optim.LoadTensor(g, name, read, func(master []float32) error { return s.params.Load(g, master) })
}

// EndLoad waits for the writes LoadTensor started and returns what
// failed: err, the loader's own verdict on what it read (a file whose
// sha256 is not the manifest's, another rank's failure, a LoadTensor's
// error it passed on), and any failed write. Any failure voids the load:
// the swap files are then undefined, ImportState refuses them, and the
// engine is to be closed, not stepped.
func (s *Strategy) EndLoad(err error) error { return s.optim.EndLoad(err) }

// importLoaded is ImportState after a load through LoadTensor: st's
// groups give the step counts (and the optimizer, which is checked); the
// values are in the swap files and the parameter partitions already.
func (s *Strategy) importLoaded(st zcore.StrategyState) error {
	s.loading = false
	err := s.optim.ImportLoaded(st.Groups, func(incomplete error) error {
		if err := s.fresh(); err != nil {
			return err
		}
		if incomplete != nil {
			return incomplete
		}
		head := st
		head.Groups = nil
		if err := head.Check(3, s.world, s.rank, s.l.Numel, nil); err != nil {
			return err
		}
		if len(st.Groups) != len(s.lay.SubGroups) {
			return fmt.Errorf("the state has %d fp32 groups, this rank has %d (a different sub_group_size?)", len(st.Groups), len(s.lay.SubGroups))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if s.hpz != nil {
		s.hpz.drop(s.o.Acct)
	}
	return s.f.gatherPersistent()
}
