package stage3

import (
	"fmt"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
)

// bigUnits is threeUnits at a size where every unit spans several 2 MiB
// huge pages, so that released pages go through the page cache (b's
// weight is still odd to split on 2 ranks).
func bigUnits() model.Layout {
	return threeUnitsOf([]int{1000, 1200}, []int{3, 400001}, []int{1100, 1000})
}

// TestRecycledPages: with units large enough for the page cache, pages
// that held one unit's parameters or gradients back the next unit's,
// with their old contents. Every gather still reads the right values,
// and every reduced gradient is exact — in the step's first backward,
// where the model overwrites its gradients (LeaveGradsDirty) and the
// pages are not cleared, and in the next, which adds to cleared pages.
func TestRecycledPages(t *testing.T) {
	l := bigUnits()
	want := make([]float32, l.Numel)
	l.InitRange(7, want, 0)
	const steps, micro = 3, 2
	err := inproc.New(2, inproc.Options{}).Run(func(c comm.Comm) error {
		s, err := New(options(&l, mem.NewAccountant(c.Rank()), c), Config{PrefetchBucketSize: 2000000, MaxLiveParameters: 1 << 30})
		if err != nil {
			return err
		}
		defer s.Close()
		s.LeaveGradsDirty()
		for step := range steps {
			for m := range micro {
				if err := overwritingPass(s, want, m == 0); err != nil {
					return fmt.Errorf("step %d, micro-step %d: %w", step+1, m+1, err)
				}
				if s.pages.Held() == 0 {
					return fmt.Errorf("step %d, micro-step %d: the page cache holds nothing after backward", step+1, m+1)
				}
			}
			if err := checkGradPartitions(s, c.Rank(), micro); err != nil {
				return fmt.Errorf("step %d: %w", step+1, err)
			}
			if _, err := s.Step(zcore.StepInput{LR: 0, LossScale: 1}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// overwritingPass is the normal pass of a model that writes 1 to each
// gradient element the first time its backward reaches it when
// overwrite, and adds 1 otherwise (unit a gets 2: c borrows it).
//
// While a unit's gradients are written it also checks that the page cache
// keeps no more than the buffers' peak of live elements less what is live.
func overwritingPass(s *Strategy, want []float32, overwrite bool) error {
	written := make([]bool, len(s.l.Units))
	var over error
	err := passWriting(s, normal, want, func(u int, g []float32) {
		room := int64((s.peakLive-s.f.live-s.r.ug.LiveNumel())/zcore.HugePageElems) * 4 * zcore.HugePageElems
		if held := s.pages.Held(); held > room && over == nil {
			over = fmt.Errorf("unit %d's backward: the page cache holds %d bytes, beyond its room of %d", u, held, room)
		}
		for i := range g {
			if overwrite && !written[u] {
				g[i] = 1
			} else {
				g[i]++
			}
		}
		written[u] = true
	})
	if err != nil {
		return err
	}
	return over
}

// checkGradPartitions: after micro passes, each averaged gradient element
// the rank owns is micro (2·micro in unit a), and the padding is zero.
func checkGradPartitions(s *Strategy, rank, micro int) error {
	for u, un := range s.l.Units {
		per := float32(micro)
		if u == 0 {
			per *= 2
		}
		for i := un.First; i <= un.Last; i++ {
			lo, hi, _ := s.lay.Owned(i, rank)
			part := s.grad[s.lay.Offsets[i] : s.lay.Offsets[i]+s.lay.PartitionSizes[i]]
			for j, v := range part {
				want := per
				if j >= hi-lo {
					want = 0
				}
				if v != want {
					return fmt.Errorf("gradient partition of %s, element %d: %v, want %v", s.l.Specs[i].Name, j, v, want)
				}
			}
		}
	}
	return nil
}
