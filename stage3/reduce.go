package stage3

import (
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/mem"
)

// reducer owns the gradients: a model unit's gradients are live in the
// full-length gradient buffer from its BeforeBackward until they are
// complete (after its own AfterBackward and those of the units that
// borrow it); then they are reduce-scattered into the owners' gradient
// partitions and released.
type reducer struct {
	s *Strategy

	borrowers [][]int // borrowers[v]: the units whose backward also writes v's gradients
	waiting   []int   // per unit: AfterBackward calls to come before its gradients are complete
	live      []bool  // the unit's gradients are accounted (mem.Comm)
	complete  int     // units complete in this backward pass

	inBackward bool
	backwards  int // backward passes since the last step

	inflight []rsFlight // reduce-scatters issued, oldest first
}

// rsFlight is one unit's reduce-scatter in flight: staging holds every
// rank's share of the unit's gradients, rank after rank; the rank's own
// run is reduced in place.
type rsFlight struct {
	u       int
	staging []float32
	h       comm.Handle
}

func (r *reducer) init(s *Strategy) {
	r.s = s
	units := s.l.Units
	r.borrowers = make([][]int, len(units))
	for u, un := range units {
		for _, b := range un.Borrows {
			r.borrowers[b] = append(r.borrowers[b], u)
		}
	}
	r.waiting = make([]int, len(units))
	r.live = make([]bool, len(units))
}

func (r *reducer) begin() {
	r.inBackward = true
	r.complete = 0
	for v := range r.waiting {
		r.waiting[v] = 1 + len(r.borrowers[v])
	}
}

// touch makes unit v's gradients live.
func (r *reducer) touch(v int) error {
	if r.live[v] {
		return nil
	}
	un := &r.s.l.Units[v]
	if err := r.s.o.Acct.Reserve(mem.Comm, mem.Device, 4*int64(un.Numel)); err != nil {
		return fmt.Errorf("stage 3: gradients of unit %q: %w", un.Name, err)
	}
	r.live[v] = true
	return nil
}

// done records one AfterBackward that writes v's gradients; when they are
// complete, their reduce-scatter is issued. It reports whether the whole
// backward pass is complete.
func (r *reducer) done(v int) (bool, error) {
	r.waiting[v]--
	switch {
	case r.waiting[v] > 0:
		return false, nil
	case r.waiting[v] < 0:
		return false, fmt.Errorf("stage 3: unit %q finished backward twice in one pass", r.s.l.Units[v].Name)
	}
	r.complete++
	if err := r.issue(v); err != nil {
		return false, err
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
			return false, err
		}
	}
	if r.complete < len(r.waiting) {
		return false, nil
	}
	if err := r.landAll(); err != nil {
		return false, err
	}
	r.inBackward = false
	r.backwards++
	return true, nil
}

// issue packs unit v's gradients rank by rank (each parameter's share of
// each rank, zero-padded to the partition size, as
// reduce_scatter_coalesced interleaves them), averages and starts the
// reduce-scatter.
func (r *reducer) issue(v int) error {
	s := r.s
	un := &s.l.Units[v]
	base, ln := s.unitLo[v], s.unitLen[v]
	buf, err := s.f.getStaging(s.world * ln)
	if err != nil {
		return fmt.Errorf("stage 3: reducing the gradients of unit %q: %w", un.Name, err)
	}
	g := s.grads.F32()
	for rk := range s.world {
		run := buf[rk*ln : (rk+1)*ln]
		for i := un.First; i <= un.Last; i++ {
			lo, hi, pad := s.lay.Owned(i, rk)
			off := s.lay.Offsets[i] - base
			sp := &s.l.Specs[i]
			copy(run[off:off+hi-lo], g[sp.Offset+lo:sp.Offset+hi])
			clear(run[off+hi-lo : off+hi-lo+pad])
		}
	}
	s.grads.Release(un.Offset, un.Offset+un.Numel)
	s.o.Acct.Release(mem.Comm, mem.Device, 4*int64(un.Numel))
	r.live[v] = false
	if f := s.c.PredivideFactor; f != 0 && f != 1 {
		divide(buf, float32(f))
	}
	s.o.Average.Before(s.o.Pool, buf)
	mine := buf[s.rank*ln : (s.rank+1)*ln]
	var h comm.Handle = comm.Done(nil)
	if s.world > 1 {
		h = s.o.Comm.ReduceScatter(s.o.Ctx, comm.F32(mine), comm.F32(buf), comm.Sum)
	}
	r.inflight = append(r.inflight, rsFlight{u: v, staging: buf, h: h})
	return nil
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

// landOldest waits for the oldest reduce-scatter in flight and adds the
// rank's reduced share to its gradient partitions (the first micro-step
// adds to zeros: DeepSpeed copies, then accumulates).
func (r *reducer) landOldest() error {
	s := r.s
	fl := r.inflight[0]
	copy(r.inflight, r.inflight[1:])
	r.inflight = r.inflight[:len(r.inflight)-1]
	defer s.f.putStaging(fl.staging)
	if err := fl.h.Wait(); err != nil {
		return fmt.Errorf("stage 3: reduce-scatter of the gradients of unit %q: %w", s.l.Units[fl.u].Name, err)
	}
	base, ln := s.unitLo[fl.u], s.unitLen[fl.u]
	mine := fl.staging[s.rank*ln : (s.rank+1)*ln]
	s.o.Average.After(s.o.Pool, mine)
	if f := s.c.PredivideFactor; f != 0 && f != 1 && f != float64(s.world) {
		s.o.Pool.Scale(mine, float32(f))
	}
	acc := s.grad[base : base+ln]
	for i, x := range mine {
		acc[i] += x
	}
	return nil
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
	for _, fl := range r.inflight {
		fl.h.Wait()
		r.s.f.putStaging(fl.staging)
	}
	r.inflight = nil
	for v, l := range r.live {
		if l {
			r.s.o.Acct.Release(mem.Comm, mem.Device, 4*int64(r.s.l.Units[v].Numel))
			r.live[v] = false
		}
	}
}
