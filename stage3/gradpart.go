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
// gathered parameters and the activations peak. Here, when they live in
// one tier, they are a zcore.Pages in the page cache the gathered
// parameters and the gradients share: a unit's partitions are acquired
// when its first reduction of a step is issued and accounted from then
// (mem.Grads), and all of them are released after the optimizer step.
// The pages flow between the three buffers — the partitions of the last
// units reduced are backed by the pages of the first units whose
// gathered parameters backward has let go — and the cache never holds
// more than they had live at once (fitCache), so at the end of forward a
// rank holds no gradient partition at all: 4Ψ/N bytes less at its peak.
// With partial offload, which splits the partitions between two tiers,
// they are allocated for good, as before.

// allocGrad makes the n elements of gradient partitions.
func (s *Strategy) allocGrad(n int) error {
	tier, single := s.place.Single()
	covered := 0
	for _, l := range s.unitLen {
		covered += l
	}
	if !single || covered != n {
		var err error
		s.grad, err = s.place.Alloc(s.o.Acct, mem.Grads)
		return err
	}
	gp, err := zcore.NewPages(n)
	if err != nil {
		return err
	}
	gp.Recycle(s.pages)
	s.gradPages, s.gradTier, s.grad = gp, tier, gp.F32()
	return nil
}

// acquireGrad readies unit u's gradient partitions to be written by the
// step's first reduction: accounted, and backed by cached pages where the
// cache has any. Every element of them is written before it is read.
func (s *Strategy) acquireGrad(u int) error {
	if s.gradPages == nil || s.r.ug.Backwards() != 0 {
		return nil
	}
	lo, n := s.unitLo[u], s.unitLen[u]
	if err := s.o.Acct.Reserve(mem.Grads, s.gradTier, 4*int64(n)); err != nil {
		return fmt.Errorf("stage 3: gradient partitions of unit %q: %w", s.l.Units[u].Name, err)
	}
	s.gradLive += n
	s.fitCache()
	s.gradPages.Acquire(lo, lo+n, true)
	return nil
}

// releaseGrad hands the gradient partitions back once the optimizer step
// has read them (or skipped them on overflow).
func (s *Strategy) releaseGrad() {
	if s.gradPages == nil || s.gradLive == 0 {
		return
	}
	s.o.Acct.Release(mem.Grads, s.gradTier, 4*int64(s.gradLive))
	s.gradLive = 0
	s.fitCache() // room for the pages released next
	s.gradPages.Release(0, len(s.grad))
}

// freeGrad returns the gradient partitions for good (Close).
func (s *Strategy) freeGrad() {
	switch {
	case s.gradPages != nil:
		s.o.Acct.Release(mem.Grads, s.gradTier, 4*int64(s.gradLive))
		s.gradLive = 0
		s.gradPages.Close()
		s.gradPages = nil
	case s.grad != nil:
		s.place.Free(s.o.Acct, mem.Grads)
	}
	s.grad = nil
}
