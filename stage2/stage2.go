package stage2

import (
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/optim"
)

// Strategy is ZeRO stage 2 on one rank (see the package doc).
type Strategy struct {
	o     zcore.Options
	accum func([]float32) // rounding of the gradient partition after each add; nil: fp32
	shard *zcore.Shard
	grads *zcore.Pages // the model's gradient buffer, Layout.Numel; live only where units are
	pages *zcore.PageCache
	// peakLive is the most gradient elements ever live at once (fitCache).
	peakLive int
	// dirty: LeaveGradsDirty, the model overwrites each step's first
	// gradients, so the pages acquired for them need not be cleared.
	dirty bool
	fresh []int     // BeforeBackward's scratch: the units it makes live
	part  []float32 // the averaged gradient partition, PartitionSize (mem.Grads)

	units []model.Unit
	ug    *zcore.UnitGrads // which units' gradients are live, and complete

	bucket   span     // complete units not yet reduced
	inflight []flight // reductions issued and not yet waited for, oldest first
	spare    []flight // landed flights whose slices are reused (no garbage per step)
}

// span is a contiguous range [lo, hi) of the flat buffer made of whole
// units.
type span struct {
	lo, hi int
	units  []int
}

type flight struct {
	span
	hs []comm.Handle
}

// New allocates the rank's state and initializes the parameters.
func New(o zcore.Options) (_ *Strategy, err error) {
	if err := o.Check("stage 2"); err != nil {
		return nil, err
	}
	s := &Strategy{o: o, accum: zcore.Rounding(o.DTypes.Accum)}
	// The gradients are reduced in the model's dtype (DeepSpeed's 16-bit
	// .grad and its ipg buffer).
	s.o.Average = o.Average.In(o.DTypes.Model, o.DTypes.Comm)
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.shard, err = zcore.NewShard(&s.o); err != nil {
		return nil, fmt.Errorf("stage 2: %w", err)
	}
	if s.part, err = o.Acct.F32(mem.Grads, o.OptimizerTier, s.shard.Flat.PartitionSize); err != nil {
		return nil, fmt.Errorf("stage 2: gradient partition (%d elements): %w", s.shard.Flat.PartitionSize, err)
	}
	if s.grads, err = zcore.NewPages(o.Layout.Numel); err != nil {
		return nil, fmt.Errorf("stage 2: gradient buffer: %w", err)
	}
	s.pages = zcore.NewPageCache(0) // fitCache lets it grow with what has been live
	s.grads.Recycle(s.pages)
	s.units = o.Layout.Units
	s.ug = zcore.NewUnitGrads("stage 2", o.Acct, s.units)
	return s, nil
}

// ModelBuffers are the full working parameters and the model's gradient
// buffer (resident only where gradients are live).
func (s *Strategy) ModelBuffers() ([]float32, []float32) { return s.shard.Work(), s.grads.F32() }

// MasterParams is the rank's fp32 master partition (without padding) and
// its offset in the flat buffer.
func (s *Strategy) MasterParams() (int, []float32, error) {
	off, m := s.shard.Master()
	return off, m, nil
}

// GatherMaster writes the full fp32 master parameters into dst (a
// collective).
func (s *Strategy) GatherMaster(dst []float32) error { return s.shard.GatherMaster(dst) }

// Optimizer is the optimizer of the rank's partition.
func (s *Strategy) Optimizer() optim.Optimizer { return s.shard.Optimizer() }

// Forward needs nothing: the working parameters are full.
func (s *Strategy) BeforeForward(int) error { return nil }
func (s *Strategy) AfterForward(int) error  { return nil }

// BeforeBackward makes unit u's gradients live, and those of the units it
// borrows, each in pages acquired from the page cache when it was not
// live yet. In a step's first backward the model overwrites them when the
// engine said so (LeaveGradsDirty), and the pages need not be cleared.
func (s *Strategy) BeforeBackward(u int) error {
	s.fresh = s.fresh[:0]
	if !s.ug.Live(u) {
		s.fresh = append(s.fresh, u)
	}
	for _, v := range s.units[u].Borrows {
		if !s.ug.Live(v) {
			s.fresh = append(s.fresh, v)
		}
	}
	if err := s.ug.Before(u); err != nil {
		return err
	}
	overwrite := s.dirty && s.ug.Backwards() == 0
	for _, v := range s.fresh {
		un := &s.units[v]
		s.grads.Acquire(un.Offset, un.Offset+un.Numel, overwrite)
	}
	s.fitCache()
	return nil
}

// AfterBackward records that unit u's backward is done; the units whose
// gradients are now complete join the bucket. After the last unit the
// remaining gradients are reduced and every reduction waited for.
func (s *Strategy) AfterBackward(u int) error {
	all, err := s.ug.After(u, s.join)
	if err != nil || !all {
		return err
	}
	if err := s.flush(); err != nil {
		return err
	}
	for len(s.inflight) > 0 {
		if err := s.land(); err != nil {
			return err
		}
	}
	s.ug.EndPass()
	return nil
}

// join adds unit v, whose gradients are complete, to the bucket.
func (s *Strategy) join(v int) error {
	un := s.units[v]
	lo, hi := un.Offset, un.Offset+un.Numel
	b := &s.bucket
	if len(b.units) > 0 && (hi != b.lo && lo != b.hi || b.hi-b.lo+un.Numel > s.o.BucketSize) {
		if err := s.flush(); err != nil {
			return err
		}
	}
	if len(b.units) == 0 {
		b.lo, b.hi = lo, hi
	} else {
		b.lo, b.hi = min(b.lo, lo), max(b.hi, hi)
	}
	b.units = append(b.units, v)
	if b.hi-b.lo >= s.o.BucketSize {
		return s.flush() // full: nothing more can join it
	}
	return nil
}

// flush averages the bucket and issues its all-reduce; without
// overlap_comm it waits for it at once, with it only for the previous one.
func (s *Strategy) flush() error {
	if len(s.bucket.units) == 0 {
		return nil
	}
	o := &s.o
	g := s.grads.F32()[s.bucket.lo:s.bucket.hi]
	op := o.Average.Before(o.Pool, g, o.Comm.Size())
	wire := o.Average.Wire(g)
	f := flight{span: s.bucket}
	if n := len(s.spare); n > 0 {
		f.hs, s.bucket.units = s.spare[n-1].hs, s.spare[n-1].units
		s.spare = s.spare[:n-1]
	} else {
		s.bucket.units = nil
	}
	if o.Comm.Size() > 1 {
		zcore.Chunks(len(g), o.BucketSize, func(lo, hi int) {
			f.hs = append(f.hs, o.Comm.AllReduce(o.Ctx, wire.Slice(lo, hi), op))
		})
	}
	s.inflight = append(s.inflight, f)
	s.bucket.lo, s.bucket.hi = 0, 0
	keep := 0
	if o.Overlap {
		keep = 1
	}
	for len(s.inflight) > keep {
		if err := s.land(); err != nil {
			return err
		}
	}
	return nil
}

// land waits for the oldest reduction in flight, adds the part inside the
// rank's partition to the gradient partition, and releases its gradients.
func (s *Strategy) land() error {
	f := s.inflight[0]
	copy(s.inflight, s.inflight[1:])
	s.inflight = s.inflight[:len(s.inflight)-1]
	if err := comm.WaitAll(f.hs...); err != nil {
		return fmt.Errorf("stage 2: all-reduce of the gradients of %s: %w", s.names(f.units), err)
	}
	g := s.grads.F32()
	// The runs of the rank's partition in the bucket, last first: widening
	// a run overwrites packed words of higher elements only.
	runs := s.shard.Runs()
	for k := len(runs) - 1; k >= 0; k-- {
		r := runs[k]
		lo, hi := max(f.lo, r.Model), min(f.hi, r.Model+r.N)
		if lo >= hi {
			continue
		}
		s.o.Average.Unwire(g[f.lo:f.hi], lo-f.lo, hi-f.lo)
		mine := g[lo:hi]
		s.o.Average.After(s.o.Pool, mine)
		acc := s.part[r.Part+lo-r.Model : r.Part+hi-r.Model]
		for i, v := range mine {
			acc[i] += v
		}
		if s.accum != nil {
			s.accum(acc) // DeepSpeed's 16-bit averaged_gradients add_
		}
	}
	// The units around the bucket whose gradients are not live read zero
	// (every range is handed back zeroed): the huge pages the bucket shares
	// with them go back too, instead of staying resident at its ends.
	olo, ohi := f.lo, f.hi
	first, last := f.units[0], f.units[0]
	for _, v := range f.units {
		first, last = min(first, v), max(last, v)
	}
	for v := first - 1; v >= 0 && !s.ug.Live(v); v-- {
		olo = min(olo, s.units[v].Offset)
	}
	for v := last + 1; v < len(s.units) && !s.ug.Live(v); v++ {
		ohi = max(ohi, s.units[v].Offset+s.units[v].Numel)
	}
	for _, v := range f.units {
		s.ug.Release(v)
	}
	s.fitCache() // room for the pages released next
	s.grads.ReleaseIn(f.lo, f.hi, olo, ohi)
	clear(f.hs)
	s.spare = append(s.spare, flight{hs: f.hs[:0], span: span{units: f.units[:0]}})
	return nil
}

func (s *Strategy) names(units []int) string {
	if len(units) == 1 {
		return fmt.Sprintf("unit %q", s.units[units[0]].Name)
	}
	return fmt.Sprintf("units %q…%q", s.units[units[0]].Name, s.units[units[len(units)-1]].Name)
}

// fitCache lets the page cache hold what the gradient buffer has had live
// at most at once, less what it has live now (zcore.PageCache.SetRoom):
// in steady state a backward then writes its gradients into the pages the
// last buckets released, instead of faulting in fresh pages the kernel
// must zero, and the cache never keeps the resident memory above the peak
// a backward reaches anyway.
func (s *Strategy) fitCache() {
	if s.pages == nil {
		return // closed
	}
	live := s.ug.LiveNumel()
	s.peakLive = max(s.peakLive, live)
	s.pages.SetRoom((s.peakLive - live) / zcore.HugePageElems)
}

// LeaveGradsDirty lets the model write (not add) each step's first
// gradients: stage 2 hands every bucket's gradient range back, zeroed, as
// soon as it is reduced, so the buffer holds nothing to add to and there
// is nothing to clear (zero.GradOverwriter). The pages a unit's gradients
// are then acquired into for the step's first backward are not cleared
// either.
func (s *Strategy) LeaveGradsDirty() { s.dirty = true }

// Step takes the partition's optimizer step with the gradients reduced
// during the backward passes since the last step (a collective).
func (s *Strategy) Step(in zcore.StepInput) (zcore.StepResult, error) {
	if err := s.ug.TakeStep(); err != nil {
		return zcore.StepResult{}, err
	}
	defer clear(s.part)
	res, err := s.shard.Step(in, s.part)
	if err != nil {
		return res, fmt.Errorf("stage 2: %w", err)
	}
	return res, nil
}

// Close returns every buffer to the accountant. Reductions still in flight
// (after a failed backward) are waited for first.
func (s *Strategy) Close() {
	for _, f := range s.inflight {
		comm.WaitAll(f.hs...)
	}
	s.inflight = nil
	if s.ug != nil {
		s.ug.ReleaseAll()
	}
	if s.grads != nil {
		s.grads.Close()
		s.grads = nil
	}
	if s.pages != nil {
		s.pages.Close()
		s.pages = nil
	}
	if s.part != nil {
		s.o.Acct.FreeF32(mem.Grads, s.o.OptimizerTier, s.part)
		s.part = nil
	}
	if s.shard != nil {
		s.shard.Close()
		s.shard = nil
	}
}
