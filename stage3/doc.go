// Package stage3 is ZeRO stage 3: parameters, gradients and optimizer
// state all partitioned, as DeepSpeed's DeepSpeedZeroOptimizer_Stage3 and
// its partitioned-parameter coordinator run it (FSDP's FULL_SHARD, or
// SHARD_GRAD_OP with KeepAfterForward).
//
// Partitioning (package partition, Stage3Layout). Every parameter is
// partitioned on its own: each of N ranks holds ceil(numel/N) of its
// elements, the last ranks' tails padded with zeros. A rank's partitions,
// concatenated in parameter order, form its rank-local flat buffer, cut
// into sub-groups of about sub_group_size elements, each stepped on its
// own. What a rank holds (Ψ parameters; P ≈ Ψ/N plus padding):
//
//	parameter partitions   P, training precision        mem.Params16
//	fp32 master partitions P                            mem.MasterParams
//	gradient partitions    P, fp32                      mem.Grads
//	optimizer state        P per state tensor (Adam 2)  mem.OptimState
//	gathered parameters    the units in use, prefetched mem.Gathered
//	                       or kept, and the persistent
//	                       parameters
//	live gradients, staging the units in backward and  mem.Comm
//	                       the collectives in flight
//
// so (2+2+K)Ψ/N in DeepSpeed's mixed-precision notation. In fp32 without
// offload the parameter partitions are the fp32 master partitions — one
// buffer, accounted as mem.MasterParams — so Adam takes (4+4+8)·P bytes
// where DeepSpeed keeps a copy of each, (4+4+4+8)·P. The gradient
// partitions are resident only from a step's first reduction of each
// unit to its optimizer step (gradpart.go): at the end of forward, where
// the gathered parameters and the activations peak, a rank holds none of
// them, where DeepSpeed holds all. The ranks are initialized
// partition by partition (zcore.Options.InitRange): no rank ever holds the
// whole model, as with DeepSpeed's zero.Init.
//
// Units. The model calls its unit hooks (model.UnitHooks); a wrap policy
// (WrapPolicy) groups its units into the groups that are gathered and
// released together. Before a group's first unit runs, its parameters are
// all-gathered into the full-length parameter buffer the model binds (a
// zcore.Pages: resident only where gathered); after its last unit they
// are released — unless FSDP's reshard_after_forward false keeps them
// from forward to backward, or the trace says they are needed again within
// stage3_max_reuse_distance elements. Parameters of at most
// stage3_param_persistence_threshold elements (in total at most
// stage3_model_persistence_threshold) stay gathered for the whole run and
// are all-gathered again after each step. The huge pages released from
// the parameter and gradient buffers stay parked where they are in a page
// cache (zcore.PageCache) and back the same group or unit in the next
// step, or are moved to another, instead of being faulted in afresh; the
// cache holds at most what the two buffers ever had live at once less
// what they have live now, so it never raises their peak.
//
// Prefetch. The first pass (forward and backward of one micro-step)
// records the order in which the groups are needed; once every rank has
// recorded the same order it is the trace. In later passes each time a
// group is needed, the gathers of the next groups of the trace are issued
// ahead, up to stage3_prefetch_bucket_size elements and while the
// gathered elements stay within stage3_max_live_parameters. A pass that
// departs from the trace turns prefetch off with a warning naming the
// step and the unit, and fetches on demand; the next pass records a new
// trace.
//
// Gradients. As in stage 2 the model writes a unit's gradients into a
// full-length buffer resident only where gradients are live; once a
// unit's gradients are complete (its AfterBackward and those of the units
// that borrow it), they are packed rank by rank, each parameter's share
// zero-padded to its partition size (reduce_scatter_coalesced), divided
// by N and reduce-scattered (the division inside the reduction,
// comm.PreAvg, where the bits allow); each rank adds its share to its gradient
// partitions. With overlap_comm the reduce-scatter runs while backward
// continues.
//
// Groups of ranks. With hybrid sharding (DeepSpeed MiCS mics_shard_size,
// FSDP HYBRID_SHARD) the strategy's communicator is the rank's shard
// group: partitions, gathers and reduce-scatters stay inside it, and the
// gradient partitions are all-reduced across the groups (Config.Replicas)
// once per step. With ZeRO++ hpZ (zero_hpz_partition_size) the partitions
// are over the world, but each rank keeps a secondary partition within its
// group from a unit's forward gather, and later gathers come from there
// (Config.HPZ).
//
// ZeRO++ quantized collectives (zeropp.go, qgz.go; the arithmetic is
// package zero/quant's). With qwZ (Config.QuantizedWeights) a group's
// all-gather carries int8 blocks, module by module, and every rank
// gathers the same dequantized weights; the partitions and the
// master are never quantized. With qgZ (Config.QuantizedGradients) each
// 2-D gradient whose numel is a multiple of 2·world is reduced by
// DeepSpeed's all_to_all_quant_reduce — int4 blocks, an all_to_all within
// the node, a requantized sum, an all_to_all across the nodes — into the
// rank's gradient partition; the others are reduce-scattered. Both
// dequantize and add in the model's dtype: fp16 as DeepSpeed's kernels
// do; bf16 and fp32 on their own values, where DeepSpeed's kernels read
// the tensors' bits as fp16 (zeropp.go).
//
// Offload. OptimizerTier and ParamTier put the master, gradient and
// optimizer-state partitions, and the parameter partitions, in the pinned
// host tier (offload cpu); with Partial (offload_optimizer.ratio < 1) only
// some sub-groups' master, gradient and optimizer state go there, the
// others stay on the device with an optimizer of their own (DeepSpeed's
// backup torch AdamW; see PartialOffload). With Swap and ParamSwap they
// rest in swap files (offload nvme, package nvme): a sub-group's master
// and optimizer state are read in for its step and written back (the next
// sub-group read while one steps), a parameter partition is read into its
// unit's all-gather and written after the step. With a trace the
// parameter partitions are read ahead (readahead.go, DeepSpeed's
// AsyncPartitionedParameterSwapper): the next groups' reads start into
// the swapper's buffers — at most offload_param.buffer_count − 1 of them,
// within twice stage3_prefetch_bucket_size elements — while the current
// unit computes, and the gather waits for its read instead of reading
// then; a failed read fails that gather, naming the file. Waits counts
// the reads, those read ahead and those that had landed. A checkpoint's
// load puts each tensor straight into its swap file through a swap buffer
// (load.go: BeginLoad, LoadTensor, EndLoad, then ImportState).
//
// Where those partitions live is not stage 3's business past New: the
// stage holds a parameter store and an optimizer-state store (package
// offload: in memory, aliased, partial, in swap files), chosen once from
// Config in offload.go and called through the small interfaces defined
// there; the step loop reads the same for every tier.
//
// The step, per DeepSpeedZeroOptimizer_Stage3.step: the overflow check
// (fp16); per sub-group the float64 norms of its parameters' gradient
// partitions, squared and summed, all-reduced in float64, rooted; the
// global norm over the sub-groups; each sub-group's gradients unscaled and
// clipped (optim.Zero3UnscaleFactor), its optimizer step, its 16-bit
// partitions copied from the master; then the persistent parameters are
// gathered again.
package stage3
