package stage3

import (
	"fmt"

	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/zero/optim"
)

// swapState keeps the sub-groups' fp32 master partitions and optimizer
// state in swap files between steps: offload_optimizer nvme
// (ZeRO-Infinity). At a step each sub-group in turn is read in, stepped
// and written back (DeepSpeed's partitioned_optimizer_swapper around
// _optimizer_step), so a rank's memory holds one sub-group of optimizer
// state at a time; the gradient partitions stay in pinned host memory.
type swapState struct {
	sw      *nvme.Swapper
	names   []string     // the optimizer's state tensors
	written [][]bool     // [sub-group][state]: the tensor has a swap file
	counts  []int64      // optimizer steps taken per sub-group
	masters [2][]float32 // the sub-group being stepped and the next, read ahead (the largest sub-group's size each; mem.MasterParams)
	next    *pending     // the read-ahead
	hs      []*nvme.Handle
}

func swapKey(g int, name string) string { return fmt.Sprintf("subgroup%d.%s", g, name) }

// initSwap writes every sub-group's initial master (the working values)
// and fresh optimizer state to the swapper c.Swap makes.
func (s *Strategy) initSwap() error {
	o, lay := &s.o, s.lay
	largest := 0
	for g := range lay.SubGroups {
		largest = max(largest, lay.SubGroupNumel(g))
	}
	probe, err := o.NewOptimizer(lay.SubGroupNumel(0))
	if err != nil {
		return err
	}
	ss := &swapState{names: probe.StateNames(), counts: make([]int64, len(lay.SubGroups)), written: make([][]bool, len(lay.SubGroups))}
	probe.Free()
	total := int64(1+len(ss.names)) * 4 * int64(lay.RankNumel)
	if ss.sw, err = s.c.Swap(4*int64(largest), total); err != nil {
		return fmt.Errorf("stage 3: optimizer swap files: %w", err)
	}
	s.swap = ss
	for i := range ss.masters {
		if i == 1 && len(lay.SubGroups) == 1 {
			break // nothing to read ahead
		}
		if ss.masters[i], err = o.Acct.F32(mem.MasterParams, s.c.OptimizerTier, largest); err != nil {
			return fmt.Errorf("stage 3: the master partition of one sub-group (%d elements): %w", largest, err)
		}
	}
	for g := range lay.SubGroups {
		lo, n := lay.SubGroupOffset(g), lay.SubGroupNumel(g)
		opt, err := o.NewOptimizer(n)
		if err != nil {
			return err
		}
		ss.written[g] = make([]bool, len(ss.names))
		ss.hs = append(ss.hs[:0], ss.sw.SwapOut(swapKey(g, "master"), s.work[lo:lo+n]))
		err = ss.out(g, opt)
		opt.Free()
		if err != nil {
			return fmt.Errorf("stage 3: %w", err)
		}
	}
	return nil
}

// out writes sub-group g's state tensors (after ss.hs), waits for every
// write, and records which tensors have files.
func (ss *swapState) out(g int, opt optim.Optimizer) error {
	for i, name := range ss.names {
		if st := opt.State(name); st != nil {
			ss.hs = append(ss.hs, ss.sw.SwapOut(swapKey(g, name), st))
			ss.written[g][i] = true
		}
	}
	if err := nvme.WaitAll(ss.hs...); err != nil {
		return fmt.Errorf("writing the optimizer state of sub-group %d: %w", g, err)
	}
	return nil
}

// pending is a sub-group being read in: its master into one of the two
// master buffers, its state into a fresh optimizer.
type pending struct {
	g      int
	master []float32
	opt    optim.Optimizer
	hs     []*nvme.Handle
	lazy   []int // state tensors the optimizer creates at its first step (SGD's momentum): loaded through a copy
}

// prepare starts reading sub-group g in (n elements).
func (s *Strategy) prepare(g, n int) (*pending, error) {
	ss := s.swap
	p := &pending{g: g, master: ss.masters[g%2][:n]}
	p.hs = append(p.hs, ss.sw.SwapIn(swapKey(g, "master"), p.master))
	opt, err := s.o.NewOptimizer(n)
	if err != nil {
		nvme.WaitAll(p.hs...)
		return nil, err
	}
	p.opt = opt
	for i, name := range ss.names {
		switch st := opt.State(name); {
		case !ss.written[g][i]:
		case st != nil:
			p.hs = append(p.hs, ss.sw.SwapIn(swapKey(g, name), st))
		default:
			p.lazy = append(p.lazy, i)
		}
	}
	return p, nil
}

// finish waits for p's reads.
func (s *Strategy) finish(p *pending) error {
	ss := s.swap
	if err := nvme.WaitAll(p.hs...); err != nil {
		return fmt.Errorf("reading the optimizer state of sub-group %d: %w", p.g, err)
	}
	for _, i := range p.lazy {
		v := make([]float32, len(p.master))
		if err := ss.sw.SwapIn(swapKey(p.g, ss.names[i]), v).Wait(); err != nil {
			return fmt.Errorf("reading the optimizer state of sub-group %d: %w", p.g, err)
		}
		if err := p.opt.LoadState(ss.names[i], v); err != nil {
			return fmt.Errorf("stage 3: sub-group %d: %w", p.g, err)
		}
	}
	return nil
}

// drop abandons a read-ahead (after a failed step, or at Close).
func (p *pending) drop() {
	nvme.WaitAll(p.hs...)
	p.opt.Free()
}

// stepSwapped takes sub-group g's step with grad: its master and state,
// read ahead while sub-group g-1 stepped (double buffering, as DeepSpeed's
// pipeline_read), are waited for; the read of sub-group g+1 starts; the
// step runs and g is written back. The stepped master is returned (one of
// the two master buffers).
func (s *Strategy) stepSwapped(g int, grad []float32, setHyper func(optim.Optimizer)) ([]float32, error) {
	ss, n := s.swap, len(grad)
	p := ss.next
	ss.next = nil
	if p == nil {
		var err error
		if p, err = s.prepare(g, n); err != nil {
			return nil, err
		}
	}
	defer p.opt.Free()
	s.trace("  swap in sub-group %d's fp32 master and optimizer state", g)
	if err := s.finish(p); err != nil {
		return nil, err
	}
	if next := g + 1; next < len(s.lay.SubGroups) {
		var err error
		s.trace("  read ahead sub-group %d", next)
		if ss.next, err = s.prepare(next, s.lay.SubGroupNumel(next)); err != nil {
			return nil, err
		}
	}
	p.opt.SetStepCount(ss.counts[g])
	setHyper(p.opt)
	s.trace("  %s step of sub-group %d", p.opt.Name(), g)
	p.opt.Step(p.master, grad)
	ss.counts[g] = p.opt.StepCount()
	s.trace("  swap out sub-group %d", g)
	ss.hs = append(ss.hs[:0], ss.sw.SwapOut(swapKey(g, "master"), p.master))
	if err := ss.out(g, p.opt); err != nil {
		return nil, err
	}
	return p.master, nil
}

// swappedMaster reads every sub-group's master into dst (RankNumel).
func (s *Strategy) swappedMaster(dst []float32) error {
	ss := s.swap
	ss.hs = ss.hs[:0]
	for g := range s.lay.SubGroups {
		lo, n := s.lay.SubGroupOffset(g), s.lay.SubGroupNumel(g)
		ss.hs = append(ss.hs, ss.sw.SwapIn(swapKey(g, "master"), dst[lo:lo+n]))
	}
	if err := nvme.WaitAll(ss.hs...); err != nil {
		return fmt.Errorf("stage 3: reading the fp32 master partitions: %w", err)
	}
	return nil
}

func (ss *swapState) close(acct *mem.Accountant, tier mem.Tier) {
	if ss.next != nil {
		ss.next.drop()
		ss.next = nil
	}
	for i, m := range ss.masters {
		if m != nil {
			acct.FreeF32(mem.MasterParams, tier, m)
			ss.masters[i] = nil
		}
	}
	if ss.sw != nil {
		ss.sw.Close()
		ss.sw = nil
	}
}
