package stage3

import (
	"fmt"
	"slices"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/optim"
	"github.com/dszero/dszero/zero/partition"
	"github.com/google/go-cmp/cmp"
)

// placementRun is what a 2-rank run of threeUnits left: the gathered
// master after each step, and rank 0's peak bytes of the optimizer side
// per tier.
type placementRun struct {
	masters [][]float32
	bytes   map[string]int64 // "category/tier"
}

// runPlacement trains threeUnits on 2 ranks for 3 steps with one
// sub-group per parameter (sub_group_size 0) and SGD with momentum, the
// gradient of each element a function of its value and index (so every
// element moves its own way). The optimizer of the sub-groups in tier is
// the same SGD as partial offload's device optimizer: only the placement
// differs between runs.
func runPlacement(t *testing.T, tier mem.Tier, partial *PartialOffload) placementRun {
	t.Helper()
	l := threeUnits()
	var out placementRun
	sgd := optim.SGDConfig{LR: 0.1, Momentum: 0.9}
	err := inproc.New(2, inproc.Options{}).Run(func(c comm.Comm) error {
		acct := mem.NewAccountant(c.Rank())
		o := options(&l, acct, c)
		o.NewOptimizer = func(n int) (optim.Optimizer, error) {
			return optim.NewSGD(sgd, n, optim.Alloc{Acct: acct, Tier: tier}, nil)
		}
		cfg := Config{OptimizerTier: tier, ParamTier: mem.Device}
		if partial != nil {
			p := *partial
			p.NewOptimizer = func(n int) (optim.Optimizer, error) {
				return optim.NewSGD(sgd, n, optim.Alloc{Acct: acct, Tier: mem.Device}, nil)
			}
			cfg.Partial = &p
		}
		s, err := New(o, cfg)
		if err != nil {
			return err
		}
		defer s.Close()
		cur := make([]float32, l.Numel)
		l.InitRange(7, cur, 0)
		for step := range 3 {
			params, grads := s.ModelBuffers()
			for u := range l.Units {
				if err := model.CallHook(s, bf, &l, u); err != nil {
					return err
				}
				if err := model.CallHook(s, af, &l, u); err != nil {
					return err
				}
			}
			for u := len(l.Units) - 1; u >= 0; u-- {
				if err := model.CallHook(s, bb, &l, u); err != nil {
					return err
				}
				for _, uu := range append([]int{u}, l.Units[u].Borrows...) {
					un := l.Units[uu]
					for i := un.Offset; i < un.Offset+un.Numel; i++ {
						if params[i] != cur[i] {
							return fmt.Errorf("step %d: element %d gathered as %v, want %v", step, i, params[i], cur[i])
						}
						grads[i] += 0.5*params[i] + float32(i%5)/8
					}
				}
				if err := model.CallHook(s, ab, &l, u); err != nil {
					return err
				}
			}
			if _, err := s.Step(zcore.StepInput{LR: sgd.LR, LossScale: 1}); err != nil {
				return err
			}
			if err := s.GatherMaster(cur); err != nil {
				return err
			}
			if c.Rank() == 0 {
				out.masters = append(out.masters, slices.Clone(cur))
			}
		}
		if c.Rank() == 0 {
			snap := acct.Snapshot()
			out.bytes = map[string]int64{}
			for _, cat := range []mem.Category{mem.MasterParams, mem.Grads, mem.OptimState} {
				for _, tr := range []mem.Tier{mem.Device, mem.PinnedHost} {
					if b := snap.PeakBytes(tr, cat); b != 0 {
						out.bytes[cat.String()+"/"+tr.String()] = b
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPartialOffloadPlacement: partial optimizer offload only moves
// memory. With the same optimizer on both sides, every ratio and order
// trains bit-identically to no offload and to full offload (the gathered
// master after each of 3 steps), and rank 0 holds exactly the expected
// sub-groups' master, gradient and momentum bytes in each tier. threeUnits
// on 2 ranks has partitions a.w 8, a.b 2, b.w 8, c.w 4 elements, one
// sub-group each (k = 4, 22 elements); the expected host sub-groups are
// written out by hand from DeepSpeed's two rules, not from
// partition.OffloadOrder.
func TestPartialOffloadPlacement(t *testing.T) {
	none := runPlacement(t, mem.Device, nil)
	full := runPlacement(t, mem.PinnedHost, nil)
	if !cmp.Equal(none.masters, full.masters) {
		t.Fatalf("full offload differs from none:\n%s", cmp.Diff(none.masters, full.masters))
	}
	sizes := []int64{8, 2, 8, 4}
	for _, tc := range []struct {
		ratio float64
		order partition.OffloadOrder
		host  []int // the sub-groups on the host
	}{
		{0, partition.OffloadFirst, nil},
		{0, partition.OffloadLast, nil},
		{0.25, partition.OffloadFirst, []int{0}}, // int(0.25·4) = 1
		{0.25, partition.OffloadLast, []int{3}},  // 4 − int(0.75·4) = 1
		{0.5, partition.OffloadFirst, []int{0, 1}},
		{0.5, partition.OffloadLast, []int{2, 3}},
		{0.7, partition.OffloadFirst, []int{0, 1}},     // int(2.8) = 2
		{0.7, partition.OffloadLast, []int{1, 2, 3}},   // 4 − int(1.2000000000000002) = 3
		{1, partition.OffloadFirst, []int{0, 1, 2, 3}}, // DeepSpeed makes no backup optimizer at 1, nor does the engine; the rule still holds
		{1, partition.OffloadLast, []int{0, 1, 2, 3}},
	} {
		t.Run(fmt.Sprintf("ratio%g/%v", tc.ratio, tc.order), func(t *testing.T) {
			got := runPlacement(t, mem.PinnedHost, &PartialOffload{Ratio: tc.ratio, Order: tc.order})
			if !cmp.Equal(got.masters, none.masters) {
				t.Errorf("masters differ from no offload (-none +partial):\n%s", cmp.Diff(none.masters, got.masters))
			}
			var host, dev int64
			for g, n := range sizes {
				if slices.Contains(tc.host, g) {
					host += n
				} else {
					dev += n
				}
			}
			want := map[string]int64{}
			for _, cat := range []string{"master_params", "grads", "optim_state"} { // momentum: one fp32 tensor
				if host > 0 {
					want[cat+"/pinned_host"] = 4 * host
				}
				if dev > 0 {
					want[cat+"/device"] = 4 * dev
				}
			}
			if d := cmp.Diff(want, got.bytes); d != "" {
				t.Errorf("peak bytes per tier (-want +got):\n%s", d)
			}
		})
	}
}
