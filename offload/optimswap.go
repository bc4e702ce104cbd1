package offload

import (
	"fmt"
	"io"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/zero/optim"
)

// SwappedOptim keeps the sub-groups' fp32 master partitions and
// optimizer state in swap files between steps: offload_optimizer nvme
// (ZeRO-Infinity). At a step each sub-group in turn is read in, stepped
// and written back (DeepSpeed's partitioned_optimizer_swapper around
// _optimizer_step), so a rank's memory holds one sub-group of optimizer
// state at a time (two master buffers of the largest sub-group, in
// Place.Tier: the one stepping and the next, read ahead); the gradient
// partitions stay in memory.
type SwappedOptim struct {
	c       OptimConfig
	sw      *nvme.Swapper
	names   []string     // the optimizer's state tensors
	written [][]bool     // [sub-group][state]: the tensor has a swap file
	counts  []int64      // optimizer steps taken per sub-group
	masters [2][]float32 // the sub-group being stepped and the next, read ahead (the largest sub-group's size each; mem.MasterParams)
	next    *pending     // the read-ahead
	hs      []*nvme.Handle
	load    *optimLoad // a checkpoint's load into the swap files in progress (optimload.go)
}

func swapKey(g int, name string) string { return fmt.Sprintf("subgroup%d.%s", g, name) }

// NewSwappedOptim makes the swapper (newSwapper, given the largest
// sub-group's and all the swap files' bytes; the store closes it) and
// writes every sub-group's initial master, from init (the working
// partitions), and fresh optimizer state to it.
func NewSwappedOptim(c OptimConfig, init []float32, newSwapper func(largestBytes, totalBytes int64) (*nvme.Swapper, error)) (_ *SwappedOptim, err error) {
	lay := c.Layout
	largest := 0
	for g := range lay.SubGroups {
		largest = max(largest, lay.SubGroupNumel(g))
	}
	probe, err := c.NewOptimizer(lay.SubGroupNumel(0))
	if err != nil {
		return nil, err
	}
	ss := &SwappedOptim{c: c, names: probe.StateNames(), counts: make([]int64, len(lay.SubGroups)), written: make([][]bool, len(lay.SubGroups))}
	probe.Free()
	defer func() {
		if err != nil {
			ss.Close()
		}
	}()
	total := int64(1+len(ss.names)) * 4 * int64(lay.RankNumel)
	if ss.sw, err = newSwapper(4*int64(largest), total); err != nil {
		return nil, fmt.Errorf("stage 3: optimizer swap files: %w", err)
	}
	for i := range ss.masters {
		if i == 1 && len(lay.SubGroups) == 1 {
			break // nothing to read ahead
		}
		if ss.masters[i], err = c.Acct.F32(mem.MasterParams, c.Place.Tier, largest); err != nil {
			return nil, fmt.Errorf("stage 3: the master partition of one sub-group (%d elements): %w", largest, err)
		}
	}
	for g := range lay.SubGroups {
		lo, n := lay.SubGroupOffset(g), lay.SubGroupNumel(g)
		opt, err := c.NewOptimizer(n)
		if err != nil {
			return nil, err
		}
		ss.written[g] = make([]bool, len(ss.names))
		ss.hs = append(ss.hs[:0], ss.sw.SwapOut(swapKey(g, "master"), init[lo:lo+n]))
		err = ss.out(g, opt)
		opt.Free()
		if err != nil {
			return nil, fmt.Errorf("stage 3: %w", err)
		}
	}
	return ss, nil
}

// out writes sub-group g's state tensors (after ss.hs), waits for every
// write, and records which tensors have files.
func (ss *SwappedOptim) out(g int, opt optim.Optimizer) error {
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
func (ss *SwappedOptim) prepare(g, n int) (*pending, error) {
	p := &pending{g: g, master: ss.masters[g%2][:n]}
	p.hs = append(p.hs, ss.sw.SwapIn(swapKey(g, "master"), p.master))
	opt, err := ss.c.NewOptimizer(n)
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
func (ss *SwappedOptim) finish(p *pending) error {
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

// Step takes sub-group g's step with grad: its master and state, read
// ahead while sub-group g-1 stepped (double buffering, as DeepSpeed's
// pipeline_read), are waited for; the read of sub-group g+1 starts; the
// optimizer, given the scheduler's hyperparameters by setHyper, steps,
// and g is written back. The stepped master is returned (one of the two
// master buffers, valid until the step of sub-group g+2).
func (ss *SwappedOptim) Step(g int, grad []float32, setHyper func(optim.Optimizer)) ([]float32, error) {
	n := len(grad)
	p := ss.next
	ss.next = nil
	if p == nil {
		var err error
		if p, err = ss.prepare(g, n); err != nil {
			return nil, err
		}
	}
	defer p.opt.Free()
	ss.c.trace("  swap in sub-group %d's fp32 master and optimizer state", g)
	if err := ss.finish(p); err != nil {
		return nil, err
	}
	if next := g + 1; next < len(ss.c.Layout.SubGroups) {
		var err error
		ss.c.trace("  read ahead sub-group %d", next)
		if ss.next, err = ss.prepare(next, ss.c.Layout.SubGroupNumel(next)); err != nil {
			return nil, err
		}
	}
	p.opt.SetStepCount(ss.counts[g])
	setHyper(p.opt)
	ss.c.trace("  %s step of sub-group %d", p.opt.Name(), g)
	p.opt.Step(p.master, grad)
	ss.counts[g] = p.opt.StepCount()
	ss.c.trace("  swap out sub-group %d", g)
	ss.hs = append(ss.hs[:0], ss.sw.SwapOut(swapKey(g, "master"), p.master))
	if err := ss.out(g, p.opt); err != nil {
		return nil, err
	}
	return p.master, nil
}

// readMaster reads every sub-group's master into dst (RankNumel).
func (ss *SwappedOptim) readMaster(dst []float32) error {
	ss.hs = ss.hs[:0]
	for g := range ss.c.Layout.SubGroups {
		lo, n := ss.c.Layout.SubGroupOffset(g), ss.c.Layout.SubGroupNumel(g)
		ss.hs = append(ss.hs, ss.sw.SwapIn(swapKey(g, "master"), dst[lo:lo+n]))
	}
	if err := nvme.WaitAll(ss.hs...); err != nil {
		return fmt.Errorf("stage 3: reading the fp32 master partitions: %w", err)
	}
	return nil
}

// MasterParams is every sub-group's master read back from the swap
// files into a new buffer.
func (ss *SwappedOptim) MasterParams() ([]float32, error) {
	m := make([]float32, ss.c.Layout.RankNumel) // read back from the swap files
	if err := ss.readMaster(m); err != nil {
		return nil, fmt.Errorf("stage 3: reading the fp32 master partitions back from their swap files: %w", err)
	}
	return m, nil
}

// WithMaster reads every sub-group's master back into a buffer
// accounted as mem.Temp in Place.Tier while f runs.
func (ss *SwappedOptim) WithMaster(f func(master []float32) error) error {
	acct, tier := ss.c.Acct, ss.c.Place.Tier
	tmp, err := acct.F32(mem.Temp, tier, ss.c.Layout.RankNumel)
	if err != nil {
		return fmt.Errorf("stage 3: reading the fp32 master partitions back: %w", err)
	}
	defer acct.FreeF32(mem.Temp, tier, tmp)
	if err := ss.readMaster(tmp); err != nil {
		return err
	}
	return f(tmp)
}

// probe is a fresh optimizer of n elements, for the name and the param
// group, its step count sub-group g's.
func (ss *SwappedOptim) probe(g, n int) (optim.Optimizer, error) {
	probe, err := ss.c.NewOptimizer(n)
	if err != nil {
		return nil, err
	}
	probe.SetStepCount(ss.counts[g])
	return probe, nil
}

// Export reads sub-group g's master and optimizer state from the swap
// files.
func (ss *SwappedOptim) Export(g int) (zcore.GroupState, error) {
	n := ss.c.Layout.SubGroupNumel(g)
	probe, err := ss.probe(g, n)
	if err != nil {
		return zcore.GroupState{}, err
	}
	defer probe.Free()
	gs := zcore.GroupState{Master: make([]float32, n), Optim: zcore.OptimState{Name: probe.Name(), Steps: ss.counts[g],
		State: map[string][]float32{}, Names: append([]string(nil), ss.names...), Group: probe.ParamGroup()}}
	hs := []*nvme.Handle{ss.sw.SwapIn(swapKey(g, "master"), gs.Master)}
	for i, name := range ss.names {
		if ss.written[g][i] {
			v := make([]float32, n)
			gs.Optim.State[name] = v
			hs = append(hs, ss.sw.SwapIn(swapKey(g, name), v))
		}
	}
	if err := nvme.WaitAll(hs...); err != nil {
		return gs, fmt.Errorf("stage 3: reading sub-group %d from the swap files: %w", g, err)
	}
	return gs, nil
}

// Import writes sub-group g's master and optimizer state to its swap
// files, checked against a fresh optimizer of the sub-group.
func (ss *SwappedOptim) Import(g int, gs zcore.GroupState) error {
	n := len(gs.Master)
	probe, err := ss.c.NewOptimizer(n)
	if err != nil {
		return err
	}
	err = zcore.ImportOptim(probe, gs.Optim)
	probe.Free()
	if err != nil {
		return fmt.Errorf("stage 3: sub-group %d: %w", g, err)
	}
	hs := []*nvme.Handle{ss.sw.SwapOut(swapKey(g, "master"), gs.Master)}
	for i, name := range ss.names {
		if v, ok := gs.Optim.State[name]; ok {
			hs = append(hs, ss.sw.SwapOut(swapKey(g, name), v))
			ss.written[g][i] = true
		}
	}
	if err := nvme.WaitAll(hs...); err != nil {
		return fmt.Errorf("stage 3: writing sub-group %d to the swap files: %w", g, err)
	}
	ss.counts[g] = gs.Optim.Steps
	return nil
}

// Scan calls visit with each sub-group's master and optimizer state
// read from its swap file into a pool buffer (values is visit's only
// until it returns; file names the swap file). The reads go ahead of
// the visits by up to buffer_count − 1 files (one buffer stays for
// SwapIn and SwapOut, as package nvme asks), in sub-group order. An
// error from visit, or a read that fails (an *nvme.IOError naming the
// key and the file), stops the scan and is returned.
func (ss *SwappedOptim) Scan(visit func(group int, name, file string, values []float32) error) error {
	type file struct {
		g    int
		name string
	}
	var files []file
	for g := range ss.c.Layout.SubGroups {
		files = append(files, file{g, "master"})
		for i, name := range ss.names {
			if ss.written[g][i] {
				files = append(files, file{g, name})
			}
		}
	}
	window := max(1, ss.sw.BufferCount()-1)
	var ahead []*nvme.Handle // the reads of files[next-len(ahead):next]
	defer func() {
		for _, h := range ahead {
			h.Wait()
			ss.sw.Release(h.Buffer())
		}
	}()
	next := 0
	for _, f := range files {
		for ; next < len(files) && len(ahead) < window; next++ {
			h, err := ss.sw.Prefetch(swapKey(files[next].g, files[next].name))
			if err != nil {
				return fmt.Errorf("stage 3: reading sub-group %d's %s to check it: %w", files[next].g, files[next].name, err)
			}
			ahead = append(ahead, h)
		}
		h := ahead[0]
		ahead = ahead[1:]
		err := h.Wait()
		if err == nil {
			if got, n := h.Buffer().Len(), ss.c.Layout.SubGroupNumel(f.g); got != 4*n {
				err = fmt.Errorf("its file holds %d bytes, the sub-group %d elements", got, n)
			}
		}
		if err == nil {
			err = visit(f.g, f.name, ss.sw.Path(swapKey(f.g, f.name)), h.Buffer().F32())
		} else {
			err = fmt.Errorf("stage 3: reading sub-group %d's %s from its swap file: %w", f.g, f.name, err)
		}
		ss.sw.Release(h.Buffer())
		if err != nil {
			return err
		}
	}
	return nil
}

// View is sub-group g's state as a zcore.StreamedGroup reading its swap
// files through the swapper's pool, one tensor at a time (one pool
// buffer held while a tensor is read), rather than a copy in memory.
func (ss *SwappedOptim) View(g int) (zcore.GroupState, error) {
	n := ss.c.Layout.SubGroupNumel(g)
	// For the name and the param group, which do not depend on the size:
	// a one-element probe, not a sub-group's worth of state.
	probe, err := ss.probe(g, 1)
	if err != nil {
		return zcore.GroupState{}, err
	}
	defer probe.Free()
	gs := zcore.GroupState{Optim: zcore.OptimState{Name: probe.Name(), Steps: ss.counts[g], Names: append([]string(nil), ss.names...), Group: probe.ParamGroup()}}
	var rs []*swapReader
	add := func(name string) {
		r := &swapReader{sw: ss.sw, name: name, key: swapKey(g, name), size: 4 * int64(n), what: fmt.Sprintf("sub-group %d's %s", g, name)}
		rs = append(rs, r)
	}
	add("master")
	for i, name := range ss.names {
		if ss.written[g][i] {
			add(name)
		}
	}
	sg := &zcore.StreamedGroup{N: n, Readers: map[string]io.ReaderAt{}, Close: func() {
		for _, r := range rs {
			r.release()
		}
	}}
	for _, r := range rs {
		sg.Readers[r.name] = r
	}
	gs.Streamed = sg
	return gs, nil
}

// swapReader reads one swap file in order: the first read of a pass
// reads the whole file into a pool buffer (checked by the swapper), the
// reads serve it, and the read that reaches its end gives the buffer
// back.
type swapReader struct {
	sw   *nvme.Swapper
	name string // "master" or the optimizer state's
	key  string
	size int64
	what string
	buf  *nvme.Buffer
}

func (r *swapReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > r.size {
		return 0, fmt.Errorf("stage 3: bytes [%d, %d) of %s, %d bytes", off, off+int64(len(p)), r.what, r.size)
	}
	if r.buf == nil {
		h, err := r.sw.Prefetch(r.key)
		if err != nil {
			return 0, fmt.Errorf("stage 3: reading %s from its swap file: %w", r.what, err)
		}
		if err := h.Wait(); err != nil {
			r.sw.Release(h.Buffer())
			return 0, fmt.Errorf("stage 3: reading %s from its swap file %s: %w", r.what, r.sw.Path(r.key), err)
		}
		r.buf = h.Buffer()
		if int64(r.buf.Len()) != r.size {
			r.release()
			return 0, fmt.Errorf("stage 3: the swap file %s of %s holds %d bytes, the sub-group %d", r.sw.Path(r.key), r.what, r.buf.Len(), r.size)
		}
	}
	copy(p, r.buf.Bytes()[off:])
	if off+int64(len(p)) == r.size {
		r.release()
	}
	return len(p), nil
}

func (r *swapReader) release() {
	if r.buf != nil {
		r.sw.Release(r.buf)
		r.buf = nil
	}
}

// Optimizer is nil: the sub-groups' optimizers exist only while they
// step.
func (ss *SwappedOptim) Optimizer() optim.Optimizer { return nil }

// Optimizers is nil (see Optimizer).
func (ss *SwappedOptim) Optimizers() []optim.Optimizer { return nil }

// Close abandons a read-ahead, frees the master buffers and closes the
// swapper.
func (ss *SwappedOptim) Close() {
	if ss.next != nil {
		ss.next.drop()
		ss.next = nil
	}
	for i, m := range ss.masters {
		if m != nil {
			ss.c.Acct.FreeF32(mem.MasterParams, ss.c.Place.Tier, m)
			ss.masters[i] = nil
		}
	}
	if ss.sw != nil {
		ss.sw.Close()
		ss.sw = nil
	}
}
