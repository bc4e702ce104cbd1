package offload

import (
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/partition"
)

// Placement is where each sub-group's optimizer side (fp32 master,
// gradient partition, optimizer state) lives: the sub-groups [Lo, Hi)
// in Tier, stepped with the scheduler's hyperparameters; the others on
// the device (partial offload only; without it Lo, Hi cover every
// sub-group).
type Placement struct {
	Tier      mem.Tier
	Lo, Hi    int // the sub-groups in Tier
	tierElems int // their elements
	devElems  int // the other sub-groups' elements, on the device
}

// Place is the placement of lay's sub-groups with [lo, hi) of them in
// tier and the rest on the device.
func Place(lay partition.Stage3Layout, tier mem.Tier, lo, hi int) Placement {
	p := Placement{Tier: tier, Lo: lo, Hi: hi}
	for g := range lay.SubGroups {
		if p.InTier(g) {
			p.tierElems += lay.SubGroupNumel(g)
		} else {
			p.devElems += lay.SubGroupNumel(g)
		}
	}
	return p
}

// InTier reports whether sub-group g lives in Tier and is stepped by the
// main optimizer, with the scheduler's hyperparameters (every sub-group
// without partial offload).
func (p Placement) InTier(g int) bool { return g >= p.Lo && g < p.Hi }

// Alloc allocates a rank-local buffer of the optimizer side (master or
// gradient partitions, one element per element of the layout), accounted
// in category c: the elements of the sub-groups in Tier there, the
// others' on the device.
func (p Placement) Alloc(acct *mem.Accountant, c mem.Category) ([]float32, error) {
	if err := acct.Reserve(c, p.Tier, 4*int64(p.tierElems)); err != nil {
		return nil, err
	}
	if err := acct.Reserve(c, mem.Device, 4*int64(p.devElems)); err != nil {
		acct.Release(c, p.Tier, 4*int64(p.tierElems))
		return nil, err
	}
	return make([]float32, p.tierElems+p.devElems), nil
}

// Free releases a buffer Alloc returned.
func (p Placement) Free(acct *mem.Accountant, c mem.Category) {
	acct.Release(c, p.Tier, 4*int64(p.tierElems))
	acct.Release(c, mem.Device, 4*int64(p.devElems))
}
