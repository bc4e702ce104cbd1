package estimate

import (
	"fmt"
	"strings"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/partition"
)

// Stage3Knobs are what decides when stage 3's gathered parameters,
// staging buffers and live gradients are held: the ranks, the persistent
// parameters (per layout.Specs) and the knobs of zero_optimization, all
// in elements.
type Stage3Knobs struct {
	World   int
	Persist []bool
	// stage3_prefetch_bucket_size, stage3_max_live_parameters,
	// stage3_max_reuse_distance.
	Prefetch, MaxLive, MaxReuse int64
	Overlap                     bool // overlap_comm
	// KeepAfterForward is FSDP's reshard_after_forward false: a unit
	// stays gathered from its forward to its backward.
	KeepAfterForward bool
}

// Stage3Peaks is what ReplayStage3 found, in elements.
type Stage3Peaks struct {
	// Gathered is the most elements of non-persistent parameters gathered
	// at once (mem.Gathered besides the persistent ones), held by the
	// units GatheredUnits.
	Gathered      int64
	GatheredUnits []string
	// Comm is mem.Comm at its peak, by what holds it then.
	Comm Stage3Comm
}

// Stage3Comm is what stage 3 holds as mem.Comm at one moment, in
// elements.
type Stage3Comm struct {
	When string // the moment: "backward of unit blocks.0, pass 2 (by the trace)"
	// Grads: the live gradients of GradUnits, from their BeforeBackward
	// until their reduce-scatter has landed.
	Grads     int64
	GradUnits []string
	// GatherStaging: all-gathers not yet landed of the parameters whose
	// numel N does not divide (N × ceil(numel/N) each), of GatherUnits.
	GatherStaging int64
	GatherUnits   []string
	// ReduceStaging: reduce-scatters not yet landed of such parameters,
	// zero-padded the same way, of ReduceUnits.
	ReduceStaging int64
	ReduceUnits   []string
	// Persistent: the one all-gather of every persistent parameter's
	// partitions (N × Σ ceil(numel/N)), at the start and after each step;
	// nothing else is held then.
	Persistent int64
}

// Total is the elements held.
func (c Stage3Comm) Total() int64 { return c.Grads + c.GatherStaging + c.ReduceStaging + c.Persistent }

// ReplayStage3 replays stage 3 (package stage3, one gathered unit per
// model unit) over l's units for two passes — forward and backward of
// one micro-batch each: the first records the trace of the units' order,
// the second follows it (as every later pass does) — and the all-gather
// of the persistent parameters at the start and after each step, and
// returns the peaks of the gathered parameters and of mem.Comm. The
// engine, as the replay follows it:
//
//	need(g) (BeforeForward of g's unit and of a unit borrowing it, and
//	    BeforeBackward): unless gathered, g's all-gather is issued (if
//	    not in flight) and waited for; by a complete trace, the next
//	    units' gathers are then issued while their elements stay within
//	    min(Prefetch, MaxLive − gathered)
//	an all-gather holds gathered elements from its issue, and a staging
//	    buffer for each non-persistent parameter that N does not divide
//	    until it lands
//	done(g) (AfterForward, AfterBackward): g is released unless it is
//	    held by another hook, it is forward and KeepAfterForward, or the
//	    trace needs it again within MaxReuse elements of other units
//	BeforeBackward(u): the gradients of u and of the units it borrows
//	    become live (the whole unit, persistent parameters included)
//	AfterBackward(u): once a unit's gradients are complete (LiveGradients)
//	    its reduce-scatter is issued, with a staging buffer for each
//	    parameter N does not divide; the oldest is waited for — its
//	    gradients and staging released — while more than 0 (1 with
//	    Overlap) are in flight; after the last unit all are, and every
//	    gathered unit and prefetch in flight is released
//	the trace is adopted after the first pass if Prefetch or MaxReuse > 0
//
// It panics on knobs that do not fit l (programmer error).
func ReplayStage3(l *model.Layout, k Stage3Knobs) Stage3Peaks {
	if k.World < 1 || len(k.Persist) != len(l.Specs) {
		panic(fmt.Sprintf("estimate: ReplayStage3 with world %d and %d persistence flags for %d parameters", k.World, len(k.Persist), len(l.Specs)))
	}
	r := newReplay(l, k)
	var out Stage3Peaks
	var persistent int64
	for i, p := range k.Persist {
		if p {
			persistent += int64(k.World * partition.ParamPartitionSize(l.Specs[i].Numel, k.World))
		}
	}
	r.peak = Stage3Comm{When: "the all-gather of the persistent parameters, at the start and after each step", Persistent: persistent}
	for pass := 1; pass <= 2; pass++ {
		r.pass(pass)
	}
	out.Gathered, out.GatheredUnits, out.Comm = r.gathered, r.gatheredUnits, r.peak
	return out
}

// replay is ReplayStage3's state: the fetcher's (gathered, flight,
// holds, trace) and the reducer's (live gradients, reduce-scatters in
// flight), per model unit.
type replay struct {
	l *model.Layout
	k Stage3Knobs

	gatherable []int64 // per unit: its non-persistent elements
	gStaging   []int64 // per unit: its all-gather's staging
	rStaging   []int64 // per unit: its reduce-scatter's staging
	borrowers  [][]int

	isGathered, inFlight []bool
	holds                []int
	live, flying         int64
	trace, rec           []int
	complete             bool
	pos                  int
	inFwd                bool

	gradLive                     []bool
	waiting                      []int
	grads                        int64
	rs                           []int // reduce-scatters in flight, oldest first
	gatherStaging, reduceStaging int64

	when          string
	peak          Stage3Comm
	gathered      int64
	gatheredUnits []string
}

func newReplay(l *model.Layout, k Stage3Knobs) *replay {
	n := len(l.Units)
	r := &replay{l: l, k: k, gatherable: make([]int64, n), gStaging: make([]int64, n), rStaging: make([]int64, n),
		borrowers: make([][]int, n), isGathered: make([]bool, n), inFlight: make([]bool, n), holds: make([]int, n),
		gradLive: make([]bool, n), waiting: make([]int, n)}
	for u, un := range l.Units {
		for i := un.First; i <= un.Last; i++ {
			numel := l.Specs[i].Numel
			padded := int64(k.World * partition.ParamPartitionSize(numel, k.World))
			uneven := numel%k.World != 0
			if !k.Persist[i] {
				r.gatherable[u] += int64(numel)
				if uneven {
					r.gStaging[u] += padded
				}
			}
			if uneven {
				r.rStaging[u] += padded
			}
		}
		for _, b := range un.Borrows {
			if b != u {
				r.borrowers[b] = append(r.borrowers[b], u)
			}
		}
	}
	return r
}

// pass replays one forward and backward (hooks.go's order).
func (r *replay) pass(pass int) {
	traced := ""
	if r.complete {
		traced = " (by the trace)"
	}
	r.pos, r.rec = 0, r.rec[:0]
	for v := range r.waiting {
		r.waiting[v] = 1 + len(r.borrowers[v])
	}
	units := r.l.Units
	for u := range units {
		r.when = fmt.Sprintf("forward of unit %s, pass %d%s", units[u].Name, pass, traced)
		r.inFwd = true
		r.need(u)
		r.borrowed(u, r.need)
		r.done(u)
		r.borrowed(u, r.done)
	}
	for u := len(units) - 1; u >= 0; u-- {
		r.when = fmt.Sprintf("backward of unit %s, pass %d%s", units[u].Name, pass, traced)
		r.inFwd = false
		r.touch(u)
		for _, b := range units[u].Borrows {
			r.touch(b)
		}
		r.need(u)
		r.borrowed(u, r.need)
		r.done(u)
		r.borrowed(u, r.done)
		r.completed(u)
		for _, b := range units[u].Borrows {
			r.completed(b)
		}
	}
	for len(r.rs) > 0 {
		r.landReduce()
	}
	for g := range units {
		if r.inFlight[g] {
			r.land(g)
		}
		r.holds[g] = 0
		r.release(g)
	}
	if !r.complete && (r.k.Prefetch > 0 || r.k.MaxReuse > 0) {
		r.trace = append(r.trace[:0], r.rec...)
		r.complete = true
	}
}

func (r *replay) borrowed(u int, fn func(int)) {
	for _, b := range r.l.Units[u].Borrows {
		if b != u {
			fn(b)
		}
	}
}

// need is fetcher.need: gather g now, then prefetch by the trace.
func (r *replay) need(g int) {
	r.rec = append(r.rec, g)
	if r.complete {
		r.pos++ // the pass follows the trace it recorded
	}
	if !r.isGathered[g] {
		r.issue(g)
		r.land(g)
	}
	r.holds[g]++
	if !r.complete {
		return
	}
	budget := min(r.k.Prefetch, r.k.MaxLive-r.live)
	if budget <= 0 || r.flying >= budget {
		return
	}
	n := r.flying
	for j := r.pos; j < len(r.trace) && n < budget; j++ {
		h := r.trace[j]
		if r.isGathered[h] || r.inFlight[h] {
			continue
		}
		r.issue(h)
		n += r.gatherable[h]
	}
}

func (r *replay) issue(g int) {
	if r.isGathered[g] || r.inFlight[g] {
		return
	}
	r.inFlight[g] = true
	r.live += r.gatherable[g]
	r.flying += r.gatherable[g]
	r.gatherStaging += r.gStaging[g]
	if r.live > r.gathered {
		r.gathered = r.live
		r.gatheredUnits = r.gatheredUnits[:0]
		for h := range r.l.Units {
			if (r.isGathered[h] || r.inFlight[h]) && r.gatherable[h] > 0 {
				r.gatheredUnits = append(r.gatheredUnits, r.l.Units[h].Name)
			}
		}
	}
	r.check()
}

func (r *replay) land(g int) {
	r.inFlight[g] = false
	r.flying -= r.gatherable[g]
	r.gatherStaging -= r.gStaging[g]
	r.isGathered[g] = true
}

// done is fetcher.done: release g unless it is held or kept.
func (r *replay) done(g int) {
	if r.holds[g]--; r.holds[g] > 0 {
		return
	}
	if r.inFwd && r.k.KeepAfterForward {
		return
	}
	if r.complete && r.reusedSoon(g) {
		return
	}
	r.release(g)
}

func (r *replay) reusedSoon(g int) bool {
	var dist int64
	for j := r.pos; j < len(r.trace); j++ {
		h := r.trace[j]
		if h == g {
			return true
		}
		if dist += r.gatherable[h]; dist > r.k.MaxReuse {
			return false
		}
	}
	return false
}

func (r *replay) release(g int) {
	if r.isGathered[g] {
		r.isGathered[g] = false
		r.live -= r.gatherable[g]
	}
}

// touch makes unit v's gradients live (UnitGrads.touch).
func (r *replay) touch(v int) {
	if !r.gradLive[v] {
		r.gradLive[v] = true
		r.grads += int64(r.l.Units[v].Numel)
		r.check()
	}
}

// completed counts one AfterBackward for v; once v's gradients are
// complete their reduce-scatter is issued (reducer.complete).
func (r *replay) completed(v int) {
	if r.waiting[v]--; r.waiting[v] > 0 {
		return
	}
	r.rs = append(r.rs, v)
	r.reduceStaging += r.rStaging[v]
	r.check()
	keep := 0
	if r.k.Overlap {
		keep = 1
	}
	for len(r.rs) > keep {
		r.landReduce()
	}
}

func (r *replay) landReduce() {
	v := r.rs[0]
	r.rs = r.rs[1:]
	r.reduceStaging -= r.rStaging[v]
	if r.gradLive[v] {
		r.gradLive[v] = false
		r.grads -= int64(r.l.Units[v].Numel)
	}
}

// check records the moment if mem.Comm is at a new peak.
func (r *replay) check() {
	if r.grads+r.gatherStaging+r.reduceStaging <= r.peak.Total() {
		return
	}
	c := Stage3Comm{When: r.when, Grads: r.grads, GatherStaging: r.gatherStaging, ReduceStaging: r.reduceStaging}
	for u, un := range r.l.Units {
		if r.gradLive[u] {
			c.GradUnits = append(c.GradUnits, un.Name)
		}
		if r.inFlight[u] && r.gStaging[u] > 0 {
			c.GatherUnits = append(c.GatherUnits, un.Name)
		}
	}
	for _, v := range r.rs {
		if r.rStaging[v] > 0 {
			c.ReduceUnits = append(c.ReduceUnits, r.l.Units[v].Name)
		}
	}
	r.peak = c
}

// unitList names units for a line: all of up to four, else the first two
// and the last with the count.
func unitList(names []string) string {
	if len(names) <= 4 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s, %s, … %s (%d units)", names[0], names[1], names[len(names)-1], len(names))
}
