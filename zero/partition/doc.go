// Package partition is the arithmetic of DeepSpeed's ZeRO layouts: which
// elements of which parameter each rank owns, where they sit in the
// rank's buffers, and where they sit in a DeepSpeed checkpoint. Everything
// here is a pure function of the parameter sizes and the world size; the
// stages, the collectives and the checkpoint code build on it.
//
// # Vocabulary
//
//   - full parameter: one trainable tensor, flattened row-major (Param).
//   - flat buffer: the parameters of one parameter group concatenated in
//     flattening order (stages 1 and 2).
//   - padding: elements appended so that a buffer splits evenly across
//     ranks. dszero always fills padding with zeros.
//   - partition: the contiguous range a rank owns — of the flat buffer
//     (stages 1/2), or of each padded parameter (stage 3).
//   - fragment: the part of one parameter inside one rank's partition
//     (DeepSpeed's param_slice_mappings entries).
//   - sub-group: at stage 3, consecutive parameters whose partitions share
//     one rank-local fp32 buffer, one optimizer call and one swap unit.
//
// # Stages 1 and 2: one flat buffer per group (FlatLayout)
//
// DeepSpeedZeroOptimizer (stage_1_and_2.py; BF16_Optimizer at stage 0 has
// the same layout) flattens the trainable parameters of each group into
// one buffer, pads it with zeros to a multiple of 2·world
// (nccl_start_alignment_factor 2) and cuts it into world equal partitions
// (get_data_parallel_partitions: base = N/world, the first N%world ranks
// one more — equal, since N is a multiple of 2·world). Each rank keeps the
// fp32 master copy, the optimizer state and (stage 2) the gradients of its
// partition only. A parameter may straddle a partition boundary; its
// fragments say which rank updates which part.
//
// Worked example, world 4, parameters a (5 elements) and b (6):
//
//	Total 11, Alignment 8, Padded 16, PartitionSize 4
//	flat:     a0 a1 a2 a3 | a4 b0 b1 b2 | b3 b4 b5 ·  | ·  ·  ·  ·
//	rank:          0      |      1      |      2      |      3
//	SliceMappings(0) = {a: ParamOffset 0, PartitionOffset 0, Len 4}
//	SliceMappings(1) = {a: 4, 0, 1} {b: 0, 1, 3}
//	SliceMappings(2) = {b: 3, 0, 3}
//	SliceMappings(3) = none
//	Padding per rank  0 0 1 4    SavedLen per rank  4 4 3 0
//
// A DeepSpeed checkpoint stores, per rank, single_partition_of_fp32_groups
// with the padding stripped (SavedLen elements), group_paddings (Padding),
// and param_slice_mappings (name → {start: PartitionOffset, numel: Len});
// zero_to_fp32 concatenates the saved partitions and cuts parameters off
// in param_shapes order (AssembleFlat, then Unflatten).
//
// With round_robin_gradients, parameters are flattened in RoundRobinOrder
// (i % world buckets, concatenated), so that consecutive gradients in
// backward belong to different owners. Caution: DeepSpeed then still
// computes param_slice_mappings as if the original order were the flat
// order (see RoundRobinOrder); param_shapes and the data follow the
// round-robin order.
//
// # Stage 3: every parameter on its own (Stage3Layout)
//
// DeepSpeedZeroOptimizer_Stage3 (partition_parameters.py) partitions each
// parameter separately: padded by (world − numel%world) % world to a
// multiple of world and cut into world partitions of ceil(numel/world);
// rank r owns [r·ps, (r+1)·ps) of the padded parameter (PerParam). A rank's
// partitions, in parameter order, form its flat buffer, cut into
// sub-groups by sub_group_size (SubGroups). The same example at stage 3:
//
//	a: ps 2, padding 3        b: ps 2, padding 2
//	rank 0: a0 a1 | b0 b1     rank 2: a4 ·  | b4 b5
//	rank 1: a2 a3 | b2 b3     rank 3: ·  ·  | ·  ·
//	RankNumel 4 on every rank; sub_group_size 2 → sub-groups {a} {b}
//
// A DeepSpeed stage 3 checkpoint stores, per rank, fp32_flat_groups (one
// tensor per sub-group, padding kept) and param_shapes (one dict per
// sub-group); zero_to_fp32 rebuilds a parameter by concatenating the
// ranks' slices at its offset and cutting the padding (AssembleStage3).
//
// # Checked against DeepSpeed
//
// The tests compare these functions with what DeepSpeed 0.14.5 recorded
// in real 2-rank runs of two models (testdata/deepspeed_layouts.json:
// partition sizes, param_slice_mappings, fp32 group sizes for stages 0–3)
// and with DeepSpeed's own partition functions run on shapes that need
// padding, for world sizes 1 to 8 (testdata/deepspeed_rules.json). The
// testdata README says how to regenerate both.
package partition
