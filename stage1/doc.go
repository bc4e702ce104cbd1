// Package stage1 is ZeRO stage 1: optimizer-state partitioning, as
// DeepSpeed's DeepSpeedZeroOptimizer runs it with partition_grads false.
//
// What a rank holds (Ψ parameters, N ranks, P = Padded/N):
//
//	working parameters   full, Padded elements, training precision   mem.Params16
//	gradients            full, Padded elements, fp32                 mem.Grads
//	master partition     P elements, fp32                            mem.MasterParams
//	optimizer state      P elements per state tensor (Adam: 2)       mem.OptimState
//
// so with Adam in fp32 4Ψ + 4Ψ + (4+8)Ψ/N bytes, plus the padding of the
// flat buffer to a multiple of 2N (partition.FlatLayout). Nothing else:
// the reduction works in place in the gradient buffer.
//
// The layout is DeepSpeed's: the trainable parameters flattened in
// named_parameters order into one buffer, padded, cut into N equal
// partitions (see package partition); rank r owns [r·P, (r+1)·P).
//
// A step:
//
//	backward (every micro-step): the model accumulates into the full gradient buffer
//	boundary: gradients averaged (zcore.Averaging: ÷N before the sum, with
//	          reduce_scatter) and reduce-scattered in place, so rank r's
//	          partition of the buffer holds the averaged gradient it owns
//	norm, clip, optimizer step on the partition, all-gather (zcore.Shard)
//	the gradient buffer is zeroed for the next step
//
// DeepSpeed reduces stage 1 gradients at the boundary with an all-reduce
// of buckets of reduce_bucket_size elements, each rank keeping its own
// slices (use_multi_rank_bucket_allreduce); a reduce-scatter gives every
// element the same sum in the same rank order with half the traffic.
// Because the gradients are already one flat buffer, the reduce-scatter is
// one in-place call over all of it: bucketing would only add copies, so
// reduce_bucket_size does not split it (it changes no number either way).
// overlap_comm is not implemented at stage 1 (the engine says so): the
// reduction runs after the last backward of the step.
package stage1
