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
// the reduction works in place in the gradient buffer, in 16 bits too. In
// 16-bit training the gradients hold values of the model's dtype
// (DeepSpeed's 16-bit .grad), kept in float32.
//
// The layout is DeepSpeed's: the trainable parameters flattened in
// named_parameters order into one buffer, padded, cut into N equal
// partitions (see package partition); rank r owns [r·P, (r+1)·P).
//
// A step:
//
//	backward (every micro-step): the model accumulates into the full gradient
//	          buffer, rounded to the accumulation dtype after each unit's
//	          backward (DeepSpeed's 16-bit .grad += the micro-step's)
//	boundary: gradients averaged (zcore.Averaging: ÷N before the sum, with
//	          reduce_scatter, in the model's dtype) and reduce-scattered in
//	          place in communication_data_type (16 bits: packed into the
//	          buffer's own memory), so rank r's partition of the buffer
//	          holds the averaged gradient it owns, in the model's dtype
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
//
// With round_robin_gradients the flat buffer holds the parameters in
// DeepSpeed's round-robin order (zcore.FlatOrder), so a rank's partition
// is several runs of the model's buffer: the gradients are all-reduced in
// buckets of reduce_bucket_size and each rank copies its runs into a
// gradient partition of its own (P more elements of mem.Grads), and the
// updated runs are broadcast by their owners (zcore.Shard).
package stage1
