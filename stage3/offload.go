package stage3

import (
	"fmt"

	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/optim"
	"github.com/dszero/dszero/zero/partition"
)

// PartialOffload is zero_optimization.offload_optimizer.ratio below 1
// with device cpu: only some sub-groups keep their fp32 master, gradient
// partition and optimizer state in Config.OptimizerTier (the pinned host)
// and are stepped by zcore.Options.NewOptimizer's optimizer (DeepSpeed's
// DeepSpeedCPUAdam); the others keep all three on the device and are
// stepped by NewOptimizer here — DeepSpeed's backup torch.optim.AdamW,
// built once from the host optimizer's first param group and never
// touched by the scheduler, so these sub-groups keep the lr and betas
// they were built with.
type PartialOffload struct {
	// Ratio is the fraction of the sub-groups offloaded, in [0, 1].
	Ratio float64
	// Order is the DeepSpeed release's rule for which sub-groups those are
	// (partition.OffloadOrder.HostSubGroups).
	Order partition.OffloadOrder
	// NewOptimizer builds the optimizer of a sub-group of n elements kept
	// on the device, its state allocated in mem.Device.
	NewOptimizer func(n int) (optim.Optimizer, error)
}

// placement is where each sub-group's optimizer side lives: sub-groups
// [lo, hi) in OptimizerTier, stepped with the scheduler's
// hyperparameters; the rest on the device (partial offload only).
type placement struct {
	lo, hi    int // the sub-groups in OptimizerTier
	tierElems int // their elements
	devElems  int // the other sub-groups' elements, on the device
}

// place computes the placement of lay's sub-groups: every one in
// OptimizerTier unless c.Partial says otherwise.
func place(lay partition.Stage3Layout, c Config) (placement, error) {
	k := len(lay.SubGroups)
	p := placement{hi: k}
	if c.Partial != nil {
		if !(c.Partial.Ratio >= 0 && c.Partial.Ratio <= 1) || c.Partial.NewOptimizer == nil {
			return p, fmt.Errorf("stage 3: partial offload needs a ratio in [0, 1] and a device optimizer, got %+v", *c.Partial)
		}
		p.lo, p.hi = c.Partial.Order.HostSubGroups(k, c.Partial.Ratio)
	}
	for g := range k {
		if p.inOptimizerTier(g) {
			p.tierElems += lay.SubGroupNumel(g)
		} else {
			p.devElems += lay.SubGroupNumel(g)
		}
	}
	return p, nil
}

// inOptimizerTier reports whether sub-group g lives in OptimizerTier and
// is stepped by zcore.Options.NewOptimizer's optimizer, with the
// scheduler's hyperparameters (every sub-group without partial offload).
func (p placement) inOptimizerTier(g int) bool { return g >= p.lo && g < p.hi }

// allocSide allocates a rank-local buffer of the optimizer side (master
// or gradient partitions, one element per element of the flat buffer),
// accounted in category c: the elements of the sub-groups in
// OptimizerTier there, the others' on the device.
func (s *Strategy) allocSide(c mem.Category) ([]float32, error) {
	if err := s.o.Acct.Reserve(c, s.c.OptimizerTier, 4*int64(s.place.tierElems)); err != nil {
		return nil, err
	}
	if err := s.o.Acct.Reserve(c, mem.Device, 4*int64(s.place.devElems)); err != nil {
		s.o.Acct.Release(c, s.c.OptimizerTier, 4*int64(s.place.tierElems))
		return nil, err
	}
	return make([]float32, s.place.tierElems+s.place.devElems), nil
}

// freeSide releases a buffer allocSide returned.
func (s *Strategy) freeSide(c mem.Category) {
	s.o.Acct.Release(c, s.c.OptimizerTier, 4*int64(s.place.tierElems))
	s.o.Acct.Release(c, mem.Device, 4*int64(s.place.devElems))
}

// newSubGroupOptimizer builds sub-group g's optimizer in its tier.
func (s *Strategy) newSubGroupOptimizer(g int) (optim.Optimizer, error) {
	n := s.lay.SubGroupNumel(g)
	if s.place.inOptimizerTier(g) {
		return s.o.NewOptimizer(n)
	}
	opt, err := s.c.Partial.NewOptimizer(n)
	if err != nil {
		return nil, fmt.Errorf("stage 3: the device optimizer of sub-group %d (partial offload): %w", g, err)
	}
	return opt, nil
}
