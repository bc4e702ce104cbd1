package stage3

import (
	"fmt"
	"io"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/nvme"
)

// ViewState is ExportState over the strategy's own buffers (see
// zcore.ViewOptim), valid until the next step: each sub-group's master
// partition and optimizer state in place, whatever their tier. With
// offload_optimizer nvme they live in the swap files, and each group is
// a zcore.StreamedGroup reading them through the swapper's pool, one
// tensor at a time (one pool buffer held while a tensor is read), rather
// than a copy of the state in memory.
func (s *Strategy) ViewState() (zcore.StrategyState, error) {
	st := zcore.StrategyState{Stage: 3, World: s.world, Rank: s.rank, Numel: s.l.Numel}
	for g := range s.lay.SubGroups {
		lo, n := s.lay.SubGroupOffset(g), s.lay.SubGroupNumel(g)
		if s.swap == nil {
			st.Groups = append(st.Groups, zcore.GroupState{Master: s.master[lo : lo+n : lo+n], Optim: zcore.ViewOptim(s.opts[g])})
			continue
		}
		gs, err := s.viewSwapped(g, n)
		if err != nil {
			return st, err
		}
		st.Groups = append(st.Groups, gs)
	}
	return st, nil
}

// viewSwapped is sub-group g's state read from its swap files.
func (s *Strategy) viewSwapped(g, n int) (zcore.GroupState, error) {
	ss := s.swap
	// For the name and the param group, which do not depend on the size:
	// a one-element probe, not a sub-group's worth of state.
	probe, err := s.o.NewOptimizer(1)
	if err != nil {
		return zcore.GroupState{}, err
	}
	defer probe.Free()
	probe.SetStepCount(ss.counts[g])
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
