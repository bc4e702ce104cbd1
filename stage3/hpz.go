package stage3

import (
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/partition"
)

// secondary is ZeRO++'s hierarchical partitioning (hpZ,
// zero_hpz_partition_size): when a unit is gathered for forward, each
// rank also keeps a secondary partition of its parameters — its share
// within its group of ranks (typically one machine) — so that backward
// gathers them again from inside the group instead of across the world.
// DeepSpeed uses them in backward; dszero uses them for every gather of
// the unit until the step (the forward of a later micro-step too: the
// same values, less traffic across groups). The secondary partitions are
// dropped at the step, when the parameters change. Gradients and
// optimizer state stay partitioned over the world.
type secondary struct {
	c     comm.Comm   // the rank's hpZ group
	bufs  [][]float32 // per parameter: the rank's secondary partition (valid only where its group's is)
	valid []bool      // per group: its parameters have secondary partitions
	bytes int64       // accounted (mem.Params16)
}

func newSecondary(c comm.Comm, params, groups int) *secondary {
	return &secondary{c: c, bufs: make([][]float32, params), valid: make([]bool, groups)}
}

// keep makes group g's secondary partitions from its gathered parameters.
func (h *secondary) keep(s *Strategy, g int) error {
	if h.valid[g] {
		return nil
	}
	gr, full := &s.groups[g], s.full.F32()
	size, rank := h.c.Size(), h.c.Rank()
	for i := gr.First; i <= gr.Last; i++ {
		if s.persist[i] {
			continue
		}
		sp := &s.l.Specs[i]
		ps := partition.ParamPartitionSize(sp.Numel, size)
		if err := s.o.Acct.Reserve(mem.Params16, mem.Device, 4*int64(ps)); err != nil {
			return fmt.Errorf("stage 3: hpZ secondary partition of %s: %w", sp.Name, err)
		}
		h.bytes += 4 * int64(ps)
		lo, hi, _ := partition.PerParam(sp.Numel, size, rank)
		if h.bufs[i] == nil {
			h.bufs[i] = make([]float32, ps) // its padding stays zero; kept from step to step
		}
		copy(h.bufs[i], full[sp.Offset+lo:sp.Offset+hi])
	}
	h.valid[g] = true
	return nil
}

// drop invalidates every secondary partition (the step changes the
// parameters). Their buffers are kept for the next step's forward, which
// refills them: no allocation per step.
func (h *secondary) drop(acct *mem.Accountant) {
	clear(h.valid)
	acct.Release(mem.Params16, mem.Device, h.bytes)
	h.bytes = 0
}
