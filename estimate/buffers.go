package estimate

import (
	"fmt"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/partition"
)

// LiveGradients replays one backward pass of the bucketed gradient
// reduction of package stage2 over the model's units and returns the most
// gradient elements live at once (what stage 2 accounts as mem.Comm).
// The units run backward from the last to the first, and:
//
//	BeforeBackward(u): u's gradients, and those of the units u borrows,
//	    become live
//	AfterBackward(u): u, and each unit u borrows, is complete once its own
//	    and all its borrowers' backwards are done; complete units join the
//	    bucket while it stays one contiguous range of at most bucket
//	    elements (else the bucket is reduced first); a full bucket is
//	    reduced at once
//	a reduced bucket's gradients are released when its all-reduce is
//	    waited for: at once, or, with overlap, when the next bucket is issued
//	after the first unit, the last bucket is reduced and all are waited for
//
// With bucket 1 every unit is reduced on its own as soon as it is
// complete, which is how stage 3 reduce-scatters.
func LiveGradients(units []model.Unit, bucket int64, overlap bool) int64 {
	n := len(units)
	borrowers := make([][]int, n)
	for u, un := range units {
		for _, b := range un.Borrows {
			borrowers[b] = append(borrowers[b], u)
		}
	}
	waiting := make([]int, n)
	for v := range waiting {
		waiting[v] = 1 + len(borrowers[v])
	}
	live := make([]bool, n)
	var cur, peak int64
	touch := func(v int) {
		if !live[v] {
			live[v] = true
			cur += int64(units[v].Numel)
			peak = max(peak, cur)
		}
	}
	type span struct {
		lo, hi int64
		units  []int
	}
	var b span
	var inflight []span
	keep := 0
	if overlap {
		keep = 1
	}
	land := func() {
		for _, v := range inflight[0].units {
			live[v] = false
			cur -= int64(units[v].Numel)
		}
		inflight = inflight[1:]
	}
	flush := func() {
		if len(b.units) == 0 {
			return
		}
		inflight = append(inflight, b)
		b = span{}
		for len(inflight) > keep {
			land()
		}
	}
	done := func(v int) {
		if waiting[v]--; waiting[v] > 0 {
			return
		}
		lo, hi := int64(units[v].Offset), int64(units[v].Offset+units[v].Numel)
		if len(b.units) > 0 && (hi != b.lo && lo != b.hi || b.hi-b.lo+hi-lo > bucket) {
			flush()
		}
		if len(b.units) == 0 {
			b.lo, b.hi = lo, hi
		} else {
			b.lo, b.hi = min(b.lo, lo), max(b.hi, hi)
		}
		b.units = append(b.units, v)
		if b.hi-b.lo >= bucket {
			flush()
		}
	}
	for u := n - 1; u >= 0; u-- {
		touch(u)
		for _, v := range units[u].Borrows {
			touch(v)
		}
		done(u)
		for _, v := range units[u].Borrows {
			done(v)
		}
	}
	flush()
	for len(inflight) > 0 {
		land()
	}
	return peak
}

// bufferInputs is what the buffers of a stage depend on.
type bufferInputs struct {
	layout  *model.Layout // nil with --params only
	params  []partition.Param
	total   int64
	world   int
	zero    dsconfig.Zero
	persist []bool
	bytes   int64
	// keepAfterForward is stage 3 with FSDP's reshard_after_forward false.
	keepAfterForward bool
}

// buffers are one rank's buffers besides the model states at stage.
func (in bufferInputs) buffers(stage int) []Line {
	z := in.zero
	el := func(what string, c mem.Category, t mem.Tier, n int64) Line {
		return Line{What: what, Category: c, Tier: t, Elements: n, Bytes: n * in.bytes}
	}
	var out []Line
	switch stage {
	case 0:
		out = append(out, el(fmt.Sprintf("gradient all-reduce: in place, in calls of reduce_bucket_size (%s)", num(z.ReduceBucketSize)), mem.Comm, mem.Device, 0))
	case 1:
		out = append(out, el("gradient reduce-scatter: in place in the full gradients", mem.Comm, mem.Device, 0))
		out = append(out, el(fmt.Sprintf("parameter all-gather: in place (allgather_bucket_size %s needs no buffer)", num(z.AllgatherBucketSize)), mem.Comm, mem.Device, 0))
	case 2:
		if in.layout != nil {
			out = append(out, el(fmt.Sprintf("live gradients: units in backward and unreduced buckets (reduce_bucket_size %s, overlap_comm %v)", num(z.ReduceBucketSize), z.OverlapComm),
				mem.Comm, mem.Device, LiveGradients(in.layout.Units, z.ReduceBucketSize, z.OverlapComm)))
		} else {
			n := min(in.total, z.ReduceBucketSize)
			if z.OverlapComm {
				n = min(in.total, 2*z.ReduceBucketSize)
			}
			out = append(out, el(fmt.Sprintf("live gradients ≤ %d bucket(s) of reduce_bucket_size %s (units unknown with --params)", 1+b2i(z.OverlapComm), num(z.ReduceBucketSize)), mem.Comm, mem.Device, n))
		}
		out = append(out, el(fmt.Sprintf("parameter all-gather: in place (allgather_bucket_size %s needs no buffer)", num(z.AllgatherBucketSize)), mem.Comm, mem.Device, 0))
	case 3:
		out = append(out, in.stage3()...)
	}
	if in.layout != nil {
		var largest int64
		var name string
		for _, s := range in.layout.Specs {
			if int64(s.Numel) > largest {
				largest, name = int64(s.Numel), s.Name
			}
		}
		out = append(out, el("gradient scratch: the largest tensor, "+name, mem.Temp, mem.Device, largest))
	}
	return out
}

// stage3 is stage 3's gathered parameters and comm buffers at their
// peaks, as ReplayStage3 finds them (with a layout).
func (in bufferInputs) stage3() []Line {
	z := in.zero
	el := func(what string, c mem.Category, t mem.Tier, n int64) Line {
		return Line{What: what, Category: c, Tier: t, Elements: n, Bytes: n * in.bytes}
	}
	var out []Line
	var persistent int64
	count := 0
	for i, p := range in.params {
		if in.persist[i] {
			persistent += int64(p.Numel)
			count++
		}
	}
	out = append(out, el(fmt.Sprintf("persistent parameters: %d tensors ≤ stage3_param_persistence_threshold (%s), always gathered", count, num(z.ParamPersistenceThreshold)),
		mem.Gathered, mem.Device, persistent))
	prefetch := min(z.PrefetchBucketSize, z.MaxLiveParameters)
	if in.layout == nil {
		out = append(out, el(fmt.Sprintf("gathered parameters: a layer (unknown with --params) + prefetch ≤ %s", num(prefetch)), mem.Gathered, mem.Device, min(prefetch, in.total)))
		return out
	}
	k := Stage3Knobs{World: in.world, Persist: in.persist, Prefetch: z.PrefetchBucketSize, MaxLive: z.MaxLiveParameters,
		MaxReuse: z.MaxReuseDistance, Overlap: z.OverlapComm, KeepAfterForward: in.keepAfterForward}
	p := ReplayStage3(in.layout, k)
	what := "gathered parameters: none beyond the persistent ones"
	if p.Gathered > 0 {
		kept := fmt.Sprintf("kept for reuse within stage3_max_reuse_distance %s", num(z.MaxReuseDistance))
		if k.KeepAfterForward {
			kept = "kept from forward to backward (reshard_after_forward false), or " + kept
		}
		what = fmt.Sprintf("gathered parameters at their peak: %s — the unit in use, prefetched ≤ min(stage3_prefetch_bucket_size %s, stage3_max_live_parameters %s), %s",
			unitList(p.GatheredUnits), num(z.PrefetchBucketSize), num(z.MaxLiveParameters), kept)
	}
	out = append(out, el(what, mem.Gathered, mem.Device, p.Gathered))
	// mem.Comm at its peak, by what holds it then: replayed, so the lines
	// add up to the engine's peak.
	c := p.Comm
	at := "at the comm peak (" + c.When + ")"
	if c.Persistent > 0 {
		out = append(out, el(fmt.Sprintf("all-gather staging of the persistent parameters at the start and after each step, the comm peak: N × Σ ceil(numel/N) over %d tensors", count),
			mem.Comm, mem.Device, c.Persistent))
	}
	if c.Persistent == 0 || c.Grads > 0 {
		out = append(out, el(fmt.Sprintf("live gradients %s: %s (in backward, or in reduce-scatter; overlap_comm %v)", at, orNone(unitList(c.GradUnits)), z.OverlapComm),
			mem.Comm, mem.Device, c.Grads))
	}
	if c.GatherStaging > 0 {
		out = append(out, el(fmt.Sprintf("all-gather staging %s: parameters of %s that %d ranks do not divide, padded to N × ceil(numel/N)", at, unitList(c.GatherUnits), in.world),
			mem.Comm, mem.Device, c.GatherStaging))
	}
	if c.ReduceStaging > 0 {
		out = append(out, el(fmt.Sprintf("reduce-scatter staging %s: gradients of %s that %d ranks do not divide, padded to N × ceil(numel/N)", at, unitList(c.ReduceUnits), in.world),
			mem.Comm, mem.Device, c.ReduceStaging))
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// swapBuffers are the pinned host buffers NVMe offload stages data
// through at stage 3: offload_optimizer's buffer_count buffers of the
// largest sub-group, offload_param's buffer_count × buffer_size.
func (in bufferInputs) swapBuffers(stage int) []Line {
	if stage != 3 {
		return nil
	}
	z := in.zero
	var out []Line
	if z.OffloadOptimizer.Device == dsconfig.OffloadNVMe {
		l3 := partition.Stage3(in.params, in.world, int(z.SubGroupSize))
		var largest int64
		for g := range l3.SubGroups {
			largest = max(largest, int64(l3.SubGroupNumel(g)))
		}
		n := z.OffloadOptimizer.BufferCount * largest
		out = append(out, Line{What: fmt.Sprintf("optimizer swap buffers: buffer_count %d × the largest sub-group (sub_group_size %s)", z.OffloadOptimizer.BufferCount, num(z.SubGroupSize)),
			Category: mem.OptimState, Tier: mem.PinnedHost, Elements: n, Bytes: n * in.bytes})
	}
	if z.OffloadParam.Device == dsconfig.OffloadNVMe {
		n := z.OffloadParam.BufferCount * z.OffloadParam.BufferSize
		out = append(out, Line{What: fmt.Sprintf("parameter swap buffers: buffer_count %d × buffer_size %s", z.OffloadParam.BufferCount, num(z.OffloadParam.BufferSize)),
			Category: mem.Params16, Tier: mem.PinnedHost, Elements: n, Bytes: n * in.bytes})
	}
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
