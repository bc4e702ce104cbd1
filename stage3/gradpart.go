package stage3

import (
	"fmt"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
)

// The gradient partitions (grad) hold what the optimizer step reads: each
// unit's reduced gradients, copied (or reduced straight) into them in a
// step's first micro-step and added in the next. Between the optimizer
// step and that first write they hold nothing anyone reads, yet
// DeepSpeed keeps them allocated through the forward pass, when the
// gathered parameters and the activations peak. Here they are a
// zcore.Pages in the page cache the gathered parameters and the gradients
// share: a unit's partitions are acquired when its first reduction of a
// step is issued and accounted from then (mem.Grads, in the tier of each
// of their sub-groups), and all of them are released after the optimizer
// step. The pages flow between the three buffers — the partitions of the
// last units reduced are backed by the pages of the first units whose
// gathered parameters backward has let go — and the cache never holds
// more than they had live at once (fitCache), so at the end of forward a
// rank holds no gradient partition at all: 4Ψ/N bytes less at its peak.

// tierSplit is a number of gradient-partition elements: those of the
// sub-groups in the placement's tier, and those on the device (partial
// offload's other sub-groups).
type tierSplit struct{ tier, dev int }

func (t tierSplit) add(u tierSplit) tierSplit { return tierSplit{t.tier + u.tier, t.dev + u.dev} }

// allocGrad maps the n elements of gradient partitions, none of them
// resident, and splits each unit's range by the tiers of the sub-groups
// it overlaps.
func (s *Strategy) allocGrad(n int) error {
	covered := 0
	for _, l := range s.unitLen {
		covered += l
	}
	if covered != n {
		// Each step writes a unit's partitions before reading them; an
		// element outside every unit would read what a page held last.
		return fmt.Errorf("the units' partitions cover %d of the %d elements", covered, n)
	}
	gp, err := zcore.NewPages(n)
	if err != nil {
		return err
	}
	gp.Recycle(s.pages)
	s.gradPages, s.grad = gp, gp.F32()
	s.gradUnit = make([]tierSplit, len(s.unitLo))
	for u, lo := range s.unitLo {
		hi := lo + s.unitLen[u]
		for g := range s.lay.SubGroups {
			glo := s.lay.SubGroupOffset(g)
			both := min(hi, glo+s.lay.SubGroupNumel(g)) - max(lo, glo)
			switch {
			case both <= 0:
			case s.place.InTier(g):
				s.gradUnit[u].tier += both
			default:
				s.gradUnit[u].dev += both
			}
		}
	}
	return nil
}

// acquireGrad readies unit u's gradient partitions to be written by the
// step's first reduction: accounted, and backed by cached pages where the
// cache has any. Every element of them is written before it is read.
func (s *Strategy) acquireGrad(u int) error {
	if s.r.ug.Backwards() != 0 {
		return nil
	}
	sp := s.gradUnit[u]
	if err := s.reserveGrad(sp); err != nil {
		return fmt.Errorf("stage 3: gradient partitions of unit %q: %w", s.l.Units[u].Name, err)
	}
	s.gradLive = s.gradLive.add(sp)
	s.fitCache()
	lo := s.unitLo[u]
	s.gradPages.Acquire(lo, lo+s.unitLen[u], true)
	return nil
}

// reserveGrad accounts sp elements of gradient partitions, in both tiers
// or in neither.
func (s *Strategy) reserveGrad(sp tierSplit) error {
	if err := s.o.Acct.Reserve(mem.Grads, s.place.Tier, 4*int64(sp.tier)); err != nil {
		return err
	}
	if err := s.o.Acct.Reserve(mem.Grads, mem.Device, 4*int64(sp.dev)); err != nil {
		s.o.Acct.Release(mem.Grads, s.place.Tier, 4*int64(sp.tier))
		return err
	}
	return nil
}

// unaccountGrad releases the accounting of the partitions acquired since
// the last step.
func (s *Strategy) unaccountGrad() {
	s.o.Acct.Release(mem.Grads, s.place.Tier, 4*int64(s.gradLive.tier))
	s.o.Acct.Release(mem.Grads, mem.Device, 4*int64(s.gradLive.dev))
	s.gradLive = tierSplit{}
}

// releaseGrad hands the gradient partitions back once the optimizer step
// has read them (or skipped them on overflow).
func (s *Strategy) releaseGrad() {
	if s.gradLive == (tierSplit{}) {
		return
	}
	s.unaccountGrad()
	s.fitCache() // room for the pages released next
	s.gradPages.Release(0, len(s.grad))
}

// freeGrad unmaps the gradient partitions (Close).
func (s *Strategy) freeGrad() {
	if s.gradPages == nil {
		return
	}
	s.unaccountGrad()
	s.gradPages.Close()
	s.gradPages, s.grad = nil, nil
}
