package stage3

// Reading parameter partitions ahead (offload_param nvme), as DeepSpeed's
// AsyncPartitionedParameterSwapper does for its coordinator's
// __prefetch_nvme_param_partitions.
//
// With a trace, the fetcher knows which groups come next. Whenever it
// moves along the trace (at the start of a pass, at each group a hook
// needs, after the step has written the new partitions) it starts
// reading, from their swap files, the partitions of the next groups that
// are neither gathered nor being gathered: nvme.Swapper.Prefetch, into a
// buffer of the swapper's pool that the parameter store
// (offload.SwappedParams) then holds. The window is
// the trace from that point on, skipping the groups gathered or in
// flight (as prefetch does), up to 2 × stage3_prefetch_bucket_size
// elements of groups still to gather — what the next two prefetches will
// issue, as DeepSpeed reads up to twice the elements in flight — and at
// most buffer_count − 1 reads are held at once: one buffer always stays
// for the reads and writes that do not wait (SwapIn, SwapOut). A group
// gathered when the walk passes it and released later (the last forward
// units, needed again in backward) is read when its gather is issued.
//
// Memory. A read ahead lands in a swap buffer, and the pool is accounted
// by the swapper once, whether its buffers are used or not
// (mem.Params16 in the pinned-host tier: offload_param.buffer_count
// buffers of the largest partition). Reading ahead adds no memory: it
// only uses buffers that would otherwise sit idle.
//
// When the group's gather is issued, the store's Read waits for the read
// (usually landed by then) and copies the buffer into the all-gather's
// input, as SwapIn would have; the read's error, an *nvme.IOError naming
// the key and the file, is that gather's error. A read that no gather
// uses — its group was kept gathered, the pass ended, the trace was
// departed from, or the step is about to write the file — is waited for
// and its buffer handed back (Waits.ReadsUnused); its error, if any,
// goes with it, because nothing read its data: the next read of that
// file is a fresh one and reports its own. Close waits for every read
// ahead before it closes the swapper: no handle outlives the strategy.
//
// Without a trace (the first pass, or after a departure) nothing is read
// ahead and every partition is read when its gather is issued.

// readAhead starts reading the partitions of the groups the trace needs
// from position from on (see above). It does nothing without a trace, or
// when the parameter store cannot read ahead (in memory, every
// read-ahead buffer held).
func (f *fetcher) readAhead(from int) {
	s := f.s
	if !f.complete || !s.params.CanReadAhead() {
		return
	}
	window := 2 * s.c.PrefetchBucketSize
	n := 0
	for j := from; j < len(f.trace) && n < window; j++ {
		g := f.trace[j]
		if f.state[g].state != released || s.hpz != nil && s.hpz.valid[g] {
			continue // gathered, or gathered without a read
		}
		n += f.gatherable(g)
		if !s.params.ReadAhead(s.groups[g].First, s.groups[g].Last) {
			return // every read-ahead buffer held
		}
	}
}
