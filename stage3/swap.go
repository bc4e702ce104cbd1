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
	names   []string  // the optimizer's state tensors
	written [][]bool  // [sub-group][state]: the tensor has a swap file
	counts  []int64   // optimizer steps taken per sub-group
	master  []float32 // the sub-group being stepped (the largest sub-group's size; mem.MasterParams)
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
	if ss.master, err = o.Acct.F32(mem.MasterParams, s.c.OptimizerTier, largest); err != nil {
		return fmt.Errorf("stage 3: the master partition of one sub-group (%d elements): %w", largest, err)
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
			return err
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
		return fmt.Errorf("stage 3: writing the optimizer state of sub-group %d: %w", g, err)
	}
	return nil
}

// stepSwapped reads sub-group g in, takes its optimizer step with grad and
// writes it back; the stepped master is left in ss.master[:len(grad)].
func (s *Strategy) stepSwapped(g int, grad []float32, setHyper func(optim.Optimizer)) ([]float32, error) {
	ss, n := s.swap, len(grad)
	master := ss.master[:n]
	ss.hs = append(ss.hs[:0], ss.sw.SwapIn(swapKey(g, "master"), master))
	opt, err := s.o.NewOptimizer(n)
	if err != nil {
		return nil, err
	}
	defer opt.Free()
	var lazy []int
	for i, name := range ss.names {
		switch st := opt.State(name); {
		case !ss.written[g][i]:
		case st != nil:
			ss.hs = append(ss.hs, ss.sw.SwapIn(swapKey(g, name), st))
		default:
			lazy = append(lazy, i)
		}
	}
	if err := nvme.WaitAll(ss.hs...); err != nil {
		return nil, fmt.Errorf("stage 3: reading the optimizer state of sub-group %d: %w", g, err)
	}
	for _, i := range lazy { // created by the first step (SGD's momentum): loaded through a copy
		v := make([]float32, n)
		if err := ss.sw.SwapIn(swapKey(g, ss.names[i]), v).Wait(); err != nil {
			return nil, fmt.Errorf("stage 3: reading the optimizer state of sub-group %d: %w", g, err)
		}
		if err := opt.LoadState(ss.names[i], v); err != nil {
			return nil, fmt.Errorf("stage 3: sub-group %d: %w", g, err)
		}
	}
	opt.SetStepCount(ss.counts[g])
	setHyper(opt)
	opt.Step(master, grad)
	ss.counts[g] = opt.StepCount()
	ss.hs = append(ss.hs[:0], ss.sw.SwapOut(swapKey(g, "master"), master))
	if err := ss.out(g, opt); err != nil {
		return nil, err
	}
	return master, nil
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
	if ss.master != nil {
		acct.FreeF32(mem.MasterParams, tier, ss.master)
		ss.master = nil
	}
	if ss.sw != nil {
		ss.sw.Close()
		ss.sw = nil
	}
}
