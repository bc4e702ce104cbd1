package stage3

import (
	"fmt"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/internal/zcore"
)

// reducer owns the gradients: a model unit's gradients are live in the
// full-length gradient buffer from its BeforeBackward until they are
// complete (after its own AfterBackward and those of the units that
// borrow it); then they are reduce-scattered into the owners' gradient
// partitions and released.
type reducer struct {
	s  *Strategy
	ug *zcore.UnitGrads // which units' gradients are live, and complete

	inflight []rsFlight // reduce-scatters issued, oldest first
	spare    []rsFlight // landed flights whose slices are reused
	fresh    []int      // before's scratch
}

// rsFlight is one unit's reduce-scatter in flight: one collective per
// parameter. A parameter that splits evenly is reduced in place in the
// gradient buffer (the rank's share is chunk Rank() of it); one that
// needs padding is packed, zero-padded, into a staging buffer.
type rsFlight struct {
	u      int
	hs     []comm.Handle
	staged []staged
	direct bool // the reductions wrote the gradient partitions themselves
}

func (r *reducer) init(s *Strategy) {
	r.s = s
	r.ug = zcore.NewUnitGrads("stage 3", s.o.Acct, s.l.Units)
}

// before is BeforeBackward(u): the gradients of u and of the units it
// borrows become live, each in pages acquired from the page cache when
// it was not live yet. In a step's first backward the model overwrites
// them when the engine said so (LeaveGradsDirty), and the pages need not
// be cleared.
func (r *reducer) before(u int) error {
	s := r.s
	r.fresh = r.fresh[:0]
	if !r.ug.Live(u) {
		r.fresh = append(r.fresh, u)
	}
	for _, v := range s.l.Units[u].Borrows {
		if !r.ug.Live(v) {
			r.fresh = append(r.fresh, v)
		}
	}
	if err := r.ug.Before(u); err != nil {
		return err
	}
	overwrite := s.dirty && r.ug.Backwards() == 0
	for _, v := range r.fresh {
		un := &s.l.Units[v]
		s.grads.Acquire(un.Offset, un.Offset+un.Numel, overwrite)
	}
	s.fitCache()
	return nil
}

// after is AfterBackward(u): the reduce-scatters of the gradients it
// completes are issued; after the pass's last unit every one is waited
// for. It reports whether the pass is over.
func (r *reducer) after(u int) (bool, error) {
	all, err := r.ug.After(u, r.complete)
	if err != nil || !all {
		return false, err
	}
	if err := r.landAll(); err != nil {
		return false, err
	}
	r.ug.EndPass()
	return true, nil
}

// complete issues the reduce-scatter of unit v, whose gradients are
// complete.
func (r *reducer) complete(v int) error {
	if err := r.issue(v); err != nil {
		return err
	}
	// Without overlap_comm each reduce-scatter is waited for at once; with
	// it the previous one is, when the next is issued (two buffers, as
	// DeepSpeed's double-buffered IPG bucket).
	keep := 0
	if r.s.o.Overlap {
		keep = 1
	}
	for len(r.inflight) > keep {
		if err := r.landOldest(); err != nil {
			return err
		}
	}
	return nil
}

// issue averages unit v's gradients and starts their reduce-scatter,
// parameter by parameter: each parameter's share of each rank, padded to
// the partition size, as reduce_scatter_coalesced lays them out. In a
// step's first micro-step, when the sum is the final value (fp32, no
// factor after it), it lands straight in the rank's gradient partitions:
// the copy landOldest would make is the same bits.
func (r *reducer) issue(v int) error {
	s := r.s
	un := &s.l.Units[v]
	g := s.grads.F32()
	fl := rsFlight{u: v}
	if k := len(r.spare); k > 0 {
		fl.hs, fl.staged = r.spare[k-1].hs, r.spare[k-1].staged
		r.spare = r.spare[:k-1]
	}
	fl.direct = s.world > 1 && r.ug.Backwards() == 0 && s.o.Average.Final() && r.postScale() == 0
	if err := s.acquireGrad(v); err != nil {
		return err
	}
	s.trace("reduce-scatter the gradients of %s (%d elements)", un.Name, un.Numel)
	r.inflight = append(r.inflight, fl)
	f := &r.inflight[len(r.inflight)-1]
	for i := un.First; i <= un.Last; i++ {
		sp, ps := &s.l.Specs[i], s.lay.PartitionSizes[i]
		in := g[sp.Offset : sp.Offset+sp.Numel]
		if s.qg != nil && s.qg.on(i) {
			if err := r.reduceQuantized(f, i, in, ps); err != nil {
				return err
			}
			continue
		}
		if sp.Numel%s.world != 0 {
			buf, err := s.f.getStaging(s.world * ps)
			if err != nil {
				return fmt.Errorf("stage 3: reducing the gradients of unit %q: %w", un.Name, err)
			}
			for rk := range s.world {
				lo, hi, _ := s.lay.Owned(i, rk)
				n := copy(buf[rk*ps:], in[lo:hi])
				clear(buf[rk*ps+n : (rk+1)*ps])
			}
			f.staged = append(f.staged, staged{param: i, staging: buf})
			in = buf
		}
		if pf := s.c.PredivideFactor; pf != 0 && pf != 1 {
			divide(in, float32(pf))
		}
		op := s.o.Average.Before(s.o.Pool, in, s.o.Comm.Size())
		if s.world > 1 {
			// In communication_data_type: 16-bit values packed in place.
			wire := s.o.Average.Wire(in)
			out := wire.Slice(s.rank*ps, (s.rank+1)*ps)
			if f.direct {
				out = comm.F32(s.grad[s.lay.Offsets[i] : s.lay.Offsets[i]+ps])
			}
			f.hs = append(f.hs, s.o.Comm.ReduceScatter(s.o.Ctx, out, wire, op))
		}
	}
	return nil
}

// reduceQuantized is issue's ZeRO++ qgZ path for parameter i (gradient
// in, partition size ps): gradient_predivide_factor's division in the model's dtype,
// then all_to_all_quant_reduce, at once, into a staging buffer of the
// rank's share that landOldest takes as it is (no averaging after it:
// see gradQuant).
func (r *reducer) reduceQuantized(f *rsFlight, i int, in []float32, ps int) error {
	s := r.s
	if pf := s.c.PredivideFactor; pf != 0 && pf != 1 {
		divide(in, float32(pf))
		if s.nearest != nil {
			for j, x := range in {
				in[j] = s.nearest(x)
			}
		}
	}
	buf, err := s.f.getStaging(ps)
	if err != nil {
		return fmt.Errorf("stage 3: reducing the gradient of %s: %w", s.l.Specs[i].Name, err)
	}
	f.staged = append(f.staged, staged{param: i, staging: buf, reduced: true})
	return s.qg.reduce(i, in, buf)
}

// landAll waits for every reduce-scatter in flight.
func (r *reducer) landAll() error {
	var first error
	for len(r.inflight) > 0 {
		if err := r.landOldest(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// landOldest waits for the oldest reduce-scatter in flight, copies the
// rank's reduced shares into its gradient partitions in a step's first
// micro-step and adds them in the next (as DeepSpeed: copy, then
// accumulate), and releases the unit's gradients.
func (r *reducer) landOldest() error {
	s := r.s
	fl := r.inflight[0]
	copy(r.inflight, r.inflight[1:])
	r.inflight = r.inflight[:len(r.inflight)-1]
	defer r.recycle(fl)
	un := &s.l.Units[fl.u]
	t0 := time.Now()
	err := comm.WaitAll(fl.hs...)
	s.waits.Reduce += time.Since(t0)
	if err != nil {
		return fmt.Errorf("stage 3: reduce-scatter of the gradients of unit %q: %w", un.Name, err)
	}
	g := s.grads.F32()
	k := 0
	for i := un.First; i <= un.Last; i++ {
		sp, ps := &s.l.Specs[i], s.lay.PartitionSizes[i]
		acc := s.grad[s.lay.Offsets[i] : s.lay.Offsets[i]+ps]
		if fl.direct { // reduced into acc
			if s.accum != nil {
				s.accum(acc)
			}
			continue
		}
		src := g[sp.Offset : sp.Offset+sp.Numel]
		reduced := false // by qgZ: the rank's share, final but for postscale
		if k < len(fl.staged) && fl.staged[k].param == i {
			src, reduced = fl.staged[k].staging, fl.staged[k].reduced
			k++
		}
		var mine []float32
		if reduced {
			mine = src
		} else {
			if s.world > 1 {
				s.o.Average.Unwire(src, s.rank*ps, (s.rank+1)*ps)
			}
			mine = src[s.rank*ps : (s.rank+1)*ps]
			s.o.Average.After(s.o.Pool, mine)
		}
		if m := r.postScale(); m != 0 {
			s.o.Pool.Scale(mine, m)
		}
		if r.ug.Backwards() == 0 {
			copy(acc, mine) // the step's first micro-step
		} else {
			for j, x := range mine {
				acc[j] += x
			}
		}
		if s.accum != nil {
			s.accum(acc) // the partition accumulates in grad_accum_dtype (the model's by default)
		}
	}
	return nil
}

// postScale is the factor gradient_predivide_factor multiplies the
// reduced gradients by (DeepSpeed's postscale: the factor itself, unless
// it is 1 or the world size); 0: none.
func (r *reducer) postScale() float32 {
	if pf := r.s.c.PredivideFactor; pf != 0 && pf != 1 && pf != float64(r.s.world) {
		return float32(pf)
	}
	return 0
}

// recycle releases a landed unit's gradients and keeps the flight's slices.
func (r *reducer) recycle(fl rsFlight) {
	s := r.s
	un := &s.l.Units[fl.u]
	// The units around it whose gradients are not live read zero (stage 3
	// hands every range back zeroed): the huge pages it shares with them
	// go back too, instead of staying resident at every unit boundary.
	olo, ohi := un.Offset, un.Offset+un.Numel
	for v := fl.u - 1; v >= 0 && !r.ug.Live(v); v-- {
		olo = s.l.Units[v].Offset
	}
	for v := fl.u + 1; v < len(s.l.Units) && !r.ug.Live(v); v++ {
		ohi = s.l.Units[v].Offset + s.l.Units[v].Numel
	}
	r.ug.Release(fl.u)
	s.fitCache() // room for the pages released next
	s.grads.ReleaseIn(un.Offset, un.Offset+un.Numel, olo, ohi)
	for _, st := range fl.staged {
		s.f.putStaging(st.staging)
	}
	clear(fl.hs)
	r.spare = append(r.spare, rsFlight{hs: fl.hs[:0], staged: fl.staged[:0]})
}

// divide is x[i] /= d (torch's div of a tensor by a scalar, float32).
func divide(x []float32, d float32) {
	for i := range x {
		x[i] /= d
	}
}

// close waits for what is in flight and releases live gradients.
func (r *reducer) close() {
	if r.s == nil {
		return
	}
	for len(r.inflight) > 0 {
		fl := r.inflight[0]
		r.inflight = r.inflight[1:]
		comm.WaitAll(fl.hs...)
		r.recycle(fl)
	}
	r.ug.ReleaseAll()
}
