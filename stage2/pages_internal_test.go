package stage2

import (
	"fmt"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/optim"
)

// bigUnits is three units a, b, c (c borrows a, as a tied head does) at a
// size where every unit spans several 2 MiB huge pages, so that released
// gradient pages go through the page cache; b's weight is odd to split
// on 2 ranks.
func bigUnits() model.Layout {
	var lb model.LayoutBuilder
	normal := model.Init{Kind: model.InitNormal, Scale: 1}
	lb.Unit("a")
	lb.Param("a.w", normal, 1000, 1200)
	lb.Param("a.b", normal, 3)
	lb.Unit("b")
	lb.Param("b.w", normal, 3, 400001)
	lb.Unit("c", 0)
	lb.Param("c.w", normal, 1100, 1000)
	return lb.Build()
}

// TestRecycledGradPages: with units large enough for the page cache, the
// pages that held one bucket's gradients back the next unit's, with
// their old contents. Every averaged gradient is still exact — with
// LeaveGradsDirty in the step's first backward, where the model
// overwrites its gradients and the pages are not cleared, and in the next,
// which adds to cleared pages; and without it, where every backward adds.
// The cache never holds more than the peak of live gradients less what is
// live, and after backward it holds pages.
func TestRecycledGradPages(t *testing.T) {
	for _, tc := range []struct {
		name           string
		dirty, overlap bool
	}{
		{"dirty", true, false},
		{"dirty-overlap", true, true},
		{"clean-overlap", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := bigUnits()
			const steps, micro = 3, 2
			err := inproc.New(2, inproc.Options{}).Run(func(c comm.Comm) error {
				acct := mem.NewAccountant(c.Rank())
				s, err := New(zcore.Options{Comm: c, Acct: acct, Layout: &l, BucketSize: 1500000, Overlap: tc.overlap,
					InitRange: func(dst []float32, lo int) error { l.InitRange(7, dst, lo); return nil },
					NewOptimizer: func(n int) (optim.Optimizer, error) {
						return optim.NewSGD(optim.SGDConfig{LR: 0.1}, n, optim.Alloc{Acct: acct, Tier: mem.Device}, nil)
					}})
				if err != nil {
					return err
				}
				defer s.Close()
				if tc.dirty {
					s.LeaveGradsDirty()
				}
				for step := range steps {
					for m := range micro {
						if err := writingPass(s, tc.dirty && m == 0); err != nil {
							return fmt.Errorf("step %d, micro-step %d: %w", step+1, m+1, err)
						}
						if s.pages.Held() == 0 {
							return fmt.Errorf("step %d, micro-step %d: the page cache holds nothing after backward", step+1, m+1)
						}
					}
					if err := checkGradPartition(s, micro); err != nil {
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
		})
	}
}

// writingPass is the backward of a model over bigUnits that writes 1 to
// each gradient element the first time its backward reaches it when
// overwrite, and adds 1 otherwise (unit a gets 2: c borrows it). While a
// unit's gradients are written it checks that the page cache keeps no
// more than the peak of live elements less what is live.
func writingPass(s *Strategy, overwrite bool) error {
	_, grads := s.ModelBuffers()
	written := make([]bool, len(s.units))
	for u := len(s.units) - 1; u >= 0; u-- {
		if err := s.BeforeBackward(u); err != nil {
			return err
		}
		room := int64((s.peakLive-s.ug.LiveNumel())/zcore.HugePageElems) * 4 * zcore.HugePageElems
		if held := s.pages.Held(); held > room {
			return fmt.Errorf("unit %d's backward: the page cache holds %d bytes, beyond its room of %d", u, held, room)
		}
		for _, v := range append([]int{u}, s.units[u].Borrows...) {
			un := s.units[v]
			g := grads[un.Offset : un.Offset+un.Numel]
			for i := range g {
				if overwrite && !written[v] {
					g[i] = 1
				} else {
					g[i]++
				}
			}
			written[v] = true
		}
		if err := s.AfterBackward(u); err != nil {
			return err
		}
	}
	return nil
}

// checkGradPartition: after micro passes, each averaged gradient element
// the rank owns is micro (2·micro in unit a), and the padding is zero.
func checkGradPartition(s *Strategy, micro int) error {
	want := make([]float32, len(s.part))
	for _, r := range s.shard.Runs() {
		for i := range r.N {
			e := r.Model + i
			if e >= s.o.Layout.Numel {
				break // the flat buffer's padding
			}
			want[r.Part+i] = float32(micro)
			if a := s.units[0]; e >= a.Offset && e < a.Offset+a.Numel {
				want[r.Part+i] *= 2
			}
		}
	}
	for i, v := range s.part {
		if v != want[i] {
			return fmt.Errorf("gradient partition element %d: %v, want %v", i, v, want[i])
		}
	}
	return nil
}
