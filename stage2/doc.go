// Package stage2 is ZeRO stage 2: optimizer-state and gradient
// partitioning, as DeepSpeed's DeepSpeedZeroOptimizer runs it with
// partition_grads true.
//
// What a rank holds (Ψ parameters, N ranks, P = Padded/N):
//
//	working parameters   full, Padded elements, training precision   mem.Params16
//	gradient partition   P elements, fp32                            mem.Grads
//	master partition     P elements, fp32                            mem.MasterParams
//	optimizer state      P elements per state tensor (Adam: 2)       mem.OptimState
//	live gradients       the units in backward and in unreduced      mem.Comm
//	                     buckets (at most about one bucket, two with
//	                     overlap_comm, plus the units being computed)
//
// so with Adam in fp32 4Ψ + (4+4+8)Ψ/N bytes of model states, plus the
// padding of the flat buffer, plus the live gradients. The layout is
// DeepSpeed's (see package partition and package stage1).
//
// The model writes its gradients into a full-length buffer (it binds one
// of Layout.Numel elements), but that buffer is a zcore.Pages: memory is
// resident only where gradients are live, the role DeepSpeed's
// short-lived param.grad tensors and its ipg buckets play. A unit's
// gradients are live from its BeforeBackward (or that of a unit that
// borrows it, like GPT's tied head) until the bucket they are reduced in
// completes; then they are added to the gradient partition and released.
// Released pages are parked in a zcore.PageCache, as stage 3's are, and
// back the next units' gradients instead of fresh pages the kernel must
// zero (the cache holds at most the peak of live gradients less what is
// live: PyTorch's caching allocator reuses the freed .grad blocks alike).
// With LeaveGradsDirty the model writes each step's first gradients
// over those pages without clearing them.
//
// A micro-step, as DeepSpeed's reduce-ready hooks and the IPG buckets do:
//
//	unit u's gradients are complete after AfterBackward of u and of every
//	unit that borrows u; complete units, in the order they complete, join
//	the bucket while it stays one contiguous range of at most
//	reduce_bucket_size elements (otherwise the bucket is reduced first),
//	and a bucket that is full is reduced at once:
//	    ÷N in the model's dtype (zcore.Averaging), all-reduce (SUM) in
//	    place in communication_data_type, in calls of at most
//	    reduce_bucket_size elements
//	    the rank adds the part of the bucket inside its partition to its
//	    gradient partition (rounded to the accumulation dtype: the model's,
//	    DeepSpeed's 16-bit averaged_gradients), and releases the bucket
//	after the last unit, the last bucket is reduced and every reduction
//	waited for
//
// So gradients are reduced at every micro-step and accumulated, already
// averaged, in the gradient partition, as DeepSpeed does at stage 2
// (its averaged_gradients); at the boundary the step runs on the partition
// (zcore.Shard: norm, clip, optimizer, all-gather).
//
// With overlap_comm, a bucket's all-reduce runs on the communicator's
// worker while backward continues; the previous bucket is waited for when
// the next one is issued (DeepSpeed's two ipg buffers), and all of them at
// the end of backward. Without it, each bucket is waited for at once.
//
// Each bucket is all-reduced and each rank keeps its own slices, which is
// what DeepSpeed 0.14.5 does by default (use_multi_rank_bucket_allreduce):
// a bucket lies in one or two ranks' partitions, and the communicator has
// no reduce-to-one-rank collective, so a reduce-scatter would move more
// data, not less. The sums are the same either way: every element is
// reduced in rank order (comm.Reduce).
//
// With round_robin_gradients the partitions follow DeepSpeed's
// round-robin flat order (zcore.FlatOrder): a rank's partition is several
// runs of the model's buffer, and a landed bucket adds each run it
// overlaps to its place in the gradient partition.
package stage2
