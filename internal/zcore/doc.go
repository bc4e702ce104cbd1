// Package zcore is what dszero's ZeRO strategies share: the contract with
// the engine (Options, StepInput, StepResult), DeepSpeed's gradient
// averaging around a SUM reduction (Averaging), the rank's partition of
// the flat buffer that stages 1 and 2 train (Shard), a comm.Comm for a
// world of one rank (Solo), and a gradient buffer whose pages can be
// handed back to the operating system (Pages).
//
// The strategies live in package zero (stage 0) and in packages stage1
// and stage2; package zero picks one from the plan. They cannot import
// zero (zero imports them), so the types they exchange with the engine
// are defined here and aliased there.
//
// Vocabulary (see also package zero and package partition):
//
//   - working parameters: the full flat buffer the model computes with,
//     on every rank, in the training precision (fp32, or 16-bit values
//     kept in float32). Stages 1 and 2 pad it to the partitioned length
//     (partition.FlatLayout.Padded) so that the all-gather of the updated
//     partitions writes straight into it.
//   - master partition: the fp32 copy of the rank's partition of the
//     flat buffer, [Lo, Hi); the optimizer and its state cover exactly
//     these PartitionSize elements (padding included, as DeepSpeed's
//     single_partition_of_fp32_groups does).
//   - gradient partition: the reduced (averaged) gradient of the rank's
//     partition, what the optimizer steps with.
//   - bucket: a contiguous range of gradients reduced by one collective
//     call, at most reduce_bucket_size elements.
//
// One optimizer step of ZeRO-1/2 on the gradient partition (Shard.Step),
// as DeepSpeedZeroOptimizer.step does it:
//
//	fp16: any Inf/NaN in any rank's gradient partition → skip the step
//	norm² of the rank's fragments (float64 norms, Zero12LocalSumSq)
//	all-reduce (SUM) → √ (ZeroNorm) → global norm (ZeroGlobalNorm)
//	gradient partition × ZeroUnscaleFactor(norm, loss scale, clip)
//	optimizer step on the master partition
//	working partition ← master partition (rounded to 16 bits)
//	all-gather the working partitions into every rank's working parameters
package zcore
