package stage3

import (
	"fmt"
	"hash/fnv"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/partition"
)

// fetcher owns the gathered parameters: which groups are gathered, the
// all-gathers in flight, the trace of the order in which a pass needs
// the groups, and prefetch by that trace.
type fetcher struct {
	s *Strategy

	state  []gstate
	live   int // gathered elements of non-persistent parameters (mem.Gathered)
	flying int // elements of gathers in flight

	persistent []int // parameters that stay gathered

	// The trace: the groups in the order a pass needs them (forward and
	// backward, borrowed groups included). trace is complete once one
	// pass has recorded it and every rank agreed; rec is the pass being
	// recorded; pos is how far the current pass has followed trace.
	trace    []int
	complete bool
	rec      []int
	pos      int
	phase    phase
	passes   int // passes since the run began

	staging [][]float32 // spare staging buffers (mem.Comm while in use)
	spare   []*flight   // landed flights, reused
}

// flight is one group's all-gather in flight: one collective per
// non-persistent parameter. A parameter that splits evenly is gathered in
// place, straight into its range of the full buffer (the rank's share is
// chunk Rank() of it); one that needs padding goes through a staging
// buffer, unpacked on landing.
type flight struct {
	hs     []comm.Handle
	staged []staged
	world  int      // the ranks gathered from: the world, or the hpZ group
	q      *qflight // ZeRO++ qwZ: the one quantized all-gather of the group; nil otherwise
}

type staged struct {
	param   int
	staging []float32
	reduced bool // qgZ's result, the rank's share only (reducer)
}

func (f *fetcher) init(s *Strategy) {
	f.s = s
	f.state = make([]gstate, len(s.groups))
	for i, p := range s.persist {
		if p {
			f.persistent = append(f.persistent, i)
		}
	}
}

// groupRange is the group's range in the rank-local flat buffer.
func (f *fetcher) groupRange(g int) (lo, n int) {
	s := f.s
	gr := &s.groups[g]
	lo = s.lay.Offsets[gr.First]
	return lo, s.lay.Offsets[gr.Last] + s.lay.PartitionSizes[gr.Last] - lo
}

// gatherable is the group's elements that a gather makes live.
func (f *fetcher) gatherable(g int) int { return f.s.groups[g].Numel - f.s.groups[g].Persistent }

// getStaging returns a buffer of n elements, accounted as mem.Comm while
// in use. Spare buffers are kept for reuse (a pass needs the same sizes
// again), so that gathers and reductions make no garbage.
func (f *fetcher) getStaging(n int) ([]float32, error) {
	if err := f.s.o.Acct.Reserve(mem.Comm, mem.Device, 4*int64(n)); err != nil {
		return nil, err
	}
	best := -1
	for i, b := range f.staging {
		if cap(b) >= n && (best < 0 || cap(b) < cap(f.staging[best])) {
			best = i
		}
	}
	if best < 0 {
		return make([]float32, n), nil
	}
	b := f.staging[best]
	f.staging[best] = f.staging[len(f.staging)-1]
	f.staging = f.staging[:len(f.staging)-1]
	return b[:n], nil
}

func (f *fetcher) putStaging(b []float32) {
	f.s.o.Acct.Release(mem.Comm, mem.Device, 4*int64(len(b)))
	f.staging = append(f.staging, b)
}

// issue starts group g's all-gather, parameter by parameter.
func (f *fetcher) issue(g int) error {
	s := f.s
	st := &f.state[g]
	if st.state != released {
		return nil
	}
	n := f.gatherable(g)
	if err := s.o.Acct.Reserve(mem.Gathered, mem.Device, 4*int64(n)); err != nil {
		return fmt.Errorf("stage 3: gathering unit %q (%d elements): %w", s.groups[g].Name, s.groups[g].Numel, err)
	}
	fl := f.newFlight()
	f.acquire(g)
	full := s.full.F32()
	gr := &s.groups[g]
	// From the primary partitions over the world, or — in backward, with
	// ZeRO++ hpZ — from the secondary ones within the rank's group.
	c, world, rank := s.o.Comm, s.world, s.rank
	hpz := s.hpz != nil && s.hpz.valid[g]
	if hpz {
		c, world, rank = s.hpz.c, s.hpz.c.Size(), s.hpz.c.Rank()
	}
	fl.world = world
	if s.qw != nil {
		if err := f.gatherQuantized(fl, g, c, world, rank, hpz); err != nil {
			st.to(gathering)
			st.flight = fl // landed (and its buffers returned) by Close
			f.live += n
			f.flying += n
			s.fitCache()
			return fmt.Errorf("stage 3: gathering unit %q: %w", gr.Name, err)
		}
	}
	for i := gr.First; i <= gr.Last && s.qw == nil; i++ {
		if s.persist[i] {
			continue
		}
		sp := &s.l.Specs[i]
		ps := partition.ParamPartitionSize(sp.Numel, world)
		var out []float32
		if sp.Numel%world == 0 {
			out = full[sp.Offset : sp.Offset+sp.Numel]
		} else {
			buf, err := f.getStaging(world * ps)
			if err != nil {
				f.abandon(fl)
				f.runs(g, func(i, j int) { s.full.Release(f.span(i, j)) }) // acquired, not gathered: read zero again
				s.o.Acct.Release(mem.Gathered, mem.Device, 4*int64(n))
				return fmt.Errorf("stage 3: gathering unit %q: %w", gr.Name, err)
			}
			fl.staged = append(fl.staged, staged{param: i, staging: buf})
			out = buf
		}
		mine := out[rank*ps : (rank+1)*ps]
		if hpz {
			copy(mine, s.hpz.bufs[i])
		} else if err := s.params.Read(i, mine); err != nil {
			st.to(gathering)
			st.flight = fl // landed (and its buffers returned) by Close
			f.live += n
			f.flying += n
			s.fitCache()
			return err
		}
		fl.hs = append(fl.hs, c.AllGather(s.o.Ctx, comm.F32(out), comm.F32(mine)))
	}
	st.to(gathering)
	st.flight = fl
	f.live += n
	f.flying += n
	s.fitCache()
	s.waits.Gathers++
	return nil
}

func (f *fetcher) newFlight() *flight {
	if k := len(f.spare); k > 0 {
		fl := f.spare[k-1]
		f.spare = f.spare[:k-1]
		return fl
	}
	return &flight{}
}

// abandon waits for a flight's collectives and returns its buffers.
func (f *fetcher) abandon(fl *flight) error {
	err := comm.WaitAll(fl.hs...)
	for _, st := range fl.staged {
		f.putStaging(st.staging)
	}
	if fl.q != nil {
		f.s.qw.putWire(f.s.o.Acct, fl.q)
		fl.q = nil
	}
	clear(fl.hs)
	fl.hs, fl.staged = fl.hs[:0], fl.staged[:0]
	f.spare = append(f.spare, fl)
	return err
}

// land waits for group g's all-gather and unpacks its staged parameters.
func (f *fetcher) land(g int) error {
	s := f.s
	st := &f.state[g]
	fl := st.flight
	st.flight = nil
	f.flying -= f.gatherable(g)
	full := s.full.F32()
	t0 := time.Now()
	err := comm.WaitAll(fl.hs...)
	s.waits.Gather += time.Since(t0)
	if err == nil {
		if fl.q != nil {
			f.landQuantized(fl.q)
		}
		for _, sg := range fl.staged {
			sp := &s.l.Specs[sg.param]
			ps := partition.ParamPartitionSize(sp.Numel, fl.world)
			for r := range fl.world {
				lo, hi, _ := partition.PerParam(sp.Numel, fl.world, r)
				copy(full[sp.Offset+lo:sp.Offset+hi], sg.staging[r*ps:r*ps+hi-lo])
			}
		}
		st.to(gathered)
	} else {
		st.to(released)
		f.live -= f.gatherable(g)
		s.fitCache()
		s.o.Acct.Release(mem.Gathered, mem.Device, 4*int64(f.gatherable(g)))
		err = fmt.Errorf("stage 3: all-gather of unit %q: %w", s.groups[g].Name, err)
	}
	f.abandon(fl)
	return err
}

// unpack copies params first..last from staging — every rank's partitions
// of them, rank after rank, each rank's run ln long and starting at
// rank-local offset base — into their places in the full buffer dst.
func (s *Strategy) unpack(dst, staging []float32, ln, base, first, last int) {
	for r := range s.world {
		run := staging[r*ln : (r+1)*ln]
		for i := first; i <= last; i++ {
			lo, hi, _ := s.lay.Owned(i, r)
			if lo == hi {
				continue
			}
			off := s.lay.Offsets[i] - base
			sp := &s.l.Specs[i]
			copy(dst[sp.Offset+lo:sp.Offset+hi], run[off:off+hi-lo])
		}
	}
}

// gatherUnit all-gathers model unit u's partitions of src (a rank-local
// flat buffer) into the full buffer dst, at once.
func (f *fetcher) gatherUnit(dst, src []float32, u int) error {
	s := f.s
	un := &s.l.Units[u]
	lo, ln := s.unitLo[u], s.unitLen[u]
	buf, err := f.getStaging(s.world * ln)
	if err != nil {
		return err
	}
	defer f.putStaging(buf)
	mine := buf[s.rank*ln : (s.rank+1)*ln]
	copy(mine, src[lo:lo+ln])
	if err := s.o.Comm.AllGather(s.o.Ctx, comm.F32(buf), comm.F32(mine)).Wait(); err != nil {
		return err
	}
	s.unpack(dst, buf, ln, lo, un.First, un.Last)
	return nil
}

// gatherPersistent all-gathers every persistent parameter into s.full
// (after initialization and after each step), in one call.
func (f *fetcher) gatherPersistent() error {
	s := f.s
	if len(f.persistent) == 0 {
		return nil
	}
	n := 0
	for _, i := range f.persistent {
		n += s.lay.PartitionSizes[i]
	}
	buf, err := f.getStaging(s.world * n)
	if err != nil {
		return fmt.Errorf("stage 3: gathering the persistent parameters: %w", err)
	}
	defer f.putStaging(buf)
	mine := buf[s.rank*n : (s.rank+1)*n]
	k, work := 0, s.params.Work()
	for _, i := range f.persistent {
		k += copy(mine[k:], work[s.lay.Offsets[i]:s.lay.Offsets[i]+s.lay.PartitionSizes[i]])
	}
	if err := s.o.Comm.AllGather(s.o.Ctx, comm.F32(buf), comm.F32(mine)).Wait(); err != nil {
		return fmt.Errorf("stage 3: all-gather of the persistent parameters: %w", err)
	}
	full := s.full.F32()
	for r := range s.world {
		k := r * n
		for _, i := range f.persistent {
			lo, hi, _ := s.lay.Owned(i, r)
			sp := &s.l.Specs[i]
			copy(full[sp.Offset+lo:sp.Offset+hi], buf[k:k+hi-lo])
			k += s.lay.PartitionSizes[i]
		}
	}
	return nil
}

// release hands group g's non-persistent parameters back.
func (f *fetcher) release(g int) {
	s := f.s
	st := &f.state[g]
	if st.state != gathered {
		return
	}
	st.to(released)
	if f.gatherable(g) > 0 {
		s.trace("release %s", s.groups[g].Name)
	}
	n := f.gatherable(g)
	if n == 0 {
		return
	}
	f.live -= n
	s.fitCache() // room for the pages released next
	f.runs(g, func(i, j int) {
		// The parameters around the run that read zero too: the huge
		// pages the run shares with them go back as well, instead of
		// staying resident, cleared, at every group boundary.
		lo, hi := f.span(i, j)
		olo, ohi := f.zeroAround(g, i, j)
		s.full.ReleaseIn(lo, hi, olo, ohi)
	})
	s.o.Acct.Release(mem.Gathered, mem.Device, 4*int64(n))
}

// runs calls fn for each maximal run of group g's non-persistent
// parameters, first to last (indices into the layout's Specs).
func (f *fetcher) runs(g int, fn func(first, last int)) {
	s := f.s
	gr := &s.groups[g]
	first := -1
	for i := gr.First; i <= gr.Last+1; i++ {
		if i <= gr.Last && !s.persist[i] {
			if first < 0 {
				first = i
			}
			continue
		}
		if first >= 0 {
			fn(first, i-1)
			first = -1
		}
	}
}

// span is the range of parameters i..j in the full buffer.
func (f *fetcher) span(i, j int) (lo, hi int) {
	sp := f.s.l.Specs
	return sp[i].Offset, sp[j].Offset + sp[j].Numel
}

// zeroAround is the range of the full buffer around parameters i..j of
// group g that reads zero: it reaches over the neighbouring parameters,
// up to a huge page's worth on each side, that are neither persistent
// nor in a group gathered or being gathered.
func (f *fetcher) zeroAround(g, i, j int) (lo, hi int) {
	s := f.s
	const reach = zcore.HugePageElems
	sp := s.l.Specs
	lo, hi = f.span(i, j)
	busy := func(h int) bool { return f.state[h].state != released }
	for k, h := i-1, g; k >= 0 && sp[i].Offset-lo < reach; k-- {
		for k < s.groups[h].First {
			h--
		}
		if s.persist[k] || busy(h) {
			break
		}
		lo = sp[k].Offset
	}
	end := hi
	for k, h := j+1, g; k < len(sp) && hi-end < reach; k++ {
		for k > s.groups[h].Last {
			h++
		}
		if s.persist[k] || busy(h) {
			break
		}
		hi = sp[k].Offset + sp[k].Numel
	}
	return lo, hi
}

// acquire readies group g's non-persistent parameters for its gather,
// which writes every element of them (zcore.Pages.Acquire).
func (f *fetcher) acquire(g int) {
	f.runs(g, func(i, j int) {
		lo, hi := f.span(i, j)
		f.s.full.Acquire(lo, hi, true)
	})
}

// begin starts a pass (the first hook of a forward): with a trace, the
// partitions of its first groups are read ahead from their swap files.
func (f *fetcher) begin() {
	f.pos = 0
	f.rec = f.rec[:0]
	f.readAhead(0)
}

// need makes group g gathered for a hook: it follows (or records) the
// trace, waits for or issues g's gather, and prefetches what the trace
// says comes next.
func (f *fetcher) need(g int) error {
	s := f.s
	f.rec = append(f.rec, g)
	if f.complete {
		if f.pos < len(f.trace) && f.trace[f.pos] == g {
			f.pos++
		} else {
			want := "the end of the pass"
			if f.pos < len(f.trace) {
				want = fmt.Sprintf("unit %q", s.groups[f.trace[f.pos]].Name)
			}
			f.invalidate(fmt.Sprintf("stage 3: step %d: unit %q was needed where the trace recorded in an earlier pass has %s; prefetch is off until a new trace is recorded (fetching on demand)",
				s.steps+1, s.groups[g].Name, want))
		}
	}
	st := &f.state[g]
	if st.state == released {
		s.trace("all-gather %s (%d elements)", s.groups[g].Name, f.gatherable(g))
		if err := f.issue(g); err != nil {
			return err
		}
	}
	if st.state == gathering {
		s.trace("wait for the all-gather of %s", s.groups[g].Name)
		if err := f.land(g); err != nil {
			return err
		}
	}
	st.holds++
	if f.phase == forward && s.hpz != nil {
		if err := s.hpz.keep(s, g); err != nil {
			return err
		}
	}
	if f.complete {
		if err := f.prefetch(); err != nil {
			return err
		}
		f.readAhead(f.pos)
	}
	return nil
}

// prefetch issues the gathers of the groups the trace needs next, up to
// stage3_prefetch_bucket_size elements, as long as the gathered elements
// stay within stage3_max_live_parameters (partitioned_param_coordinator
// fetch_sub_module).
func (f *fetcher) prefetch() error {
	c := &f.s.c
	budget := min(c.PrefetchBucketSize, c.MaxLiveParameters-f.live)
	if budget <= 0 || f.flying >= budget {
		return nil
	}
	n := f.flying
	for j := f.pos; j < len(f.trace) && n < budget; j++ {
		h := f.trace[j]
		if f.state[h].state != released {
			continue
		}
		f.s.trace("prefetch: all-gather %s (%d elements)", f.s.groups[h].Name, f.gatherable(h))
		if err := f.issue(h); err != nil {
			return err
		}
		f.s.waits.Prefetched++
		n += f.gatherable(h)
	}
	return nil
}

// done is the end of a hook that held group g: it is released unless the
// pass keeps it (KeepAfterForward in forward) or the trace says it is
// needed again within stage3_max_reuse_distance elements.
func (f *fetcher) done(g int) {
	st := &f.state[g]
	st.holds--
	if st.holds > 0 {
		return
	}
	if f.phase == forward && f.s.c.KeepAfterForward {
		return
	}
	if f.complete && f.reusedSoon(g) {
		return
	}
	f.release(g)
}

// reusedSoon: group g appears again in the rest of the trace before more
// than MaxReuseDistance elements of other groups are needed.
func (f *fetcher) reusedSoon(g int) bool {
	dist := 0
	for j := f.pos; j < len(f.trace); j++ {
		h := f.trace[j]
		if h == g {
			return true
		}
		dist += f.gatherable(h)
		if dist > f.s.c.MaxReuseDistance {
			return false
		}
	}
	return false
}

// end finishes a pass (after the last hook of a backward): every
// non-persistent group is released, prefetches that were not used are
// dropped, and a recorded trace is checked across the ranks.
func (f *fetcher) end() error {
	var first error
	for g := range f.state {
		if f.state[g].state == gathering {
			if err := f.land(g); err != nil && first == nil {
				first = err
			}
		}
		f.state[g].holds = 0
		f.release(g)
	}
	f.s.params.DropAhead()
	f.to(idle)
	f.passes++
	if first != nil {
		return first
	}
	if !f.complete && f.s.c.PrefetchBucketSize > 0 || !f.complete && f.s.c.MaxReuseDistance > 0 {
		return f.adopt()
	}
	return nil
}

// adopt makes the pass just recorded the trace, once every rank has
// recorded the same one (a collective: every rank ends its pass here).
func (f *fetcher) adopt() error {
	s := f.s
	h := fnv.New64a()
	for _, g := range f.rec {
		h.Write([]byte{byte(g), byte(g >> 8), byte(g >> 16), 0xff})
	}
	sum := h.Sum64()
	mine := []uint16{uint16(sum), uint16(sum >> 16), uint16(sum >> 32), uint16(sum >> 48), uint16(len(f.rec))}
	all := make([]uint16, s.world*len(mine))
	if err := s.o.Comm.AllGather(s.o.Ctx, comm.BF16(all), comm.BF16(mine)).Wait(); err != nil {
		return fmt.Errorf("stage 3: comparing the ranks' unit traces: %w", err)
	}
	for r := range s.world {
		for w := range mine {
			if all[r*len(mine)+w] != mine[w] {
				return fmt.Errorf("stage 3: rank %d ran its units in a different order from rank %d in step %d: every rank must run the same modules in the same order", r, s.rank, s.steps+1)
			}
		}
	}
	f.trace = append(f.trace[:0], f.rec...)
	f.complete = true
	return nil
}

func (f *fetcher) invalidate(msg string) {
	f.complete = false
	f.s.params.DropAhead()
	if w := f.s.c.Warn; w != nil {
		w(msg)
	}
}

// close waits for gathers in flight and releases every gathered group.
func (f *fetcher) close() {
	if f.s == nil {
		return
	}
	for g := range f.state {
		if f.state[g].state == gathering {
			f.land(g)
		}
		f.release(g)
	}
	f.staging = nil
}
