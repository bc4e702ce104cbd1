// Package quant is the block quantization of DeepSpeed's ZeRO++
// collectives (arXiv:2306.10209), as its CUDA kernels compute it
// (csrc/quantization/ and csrc/includes/quantization_utils.h, 0.14.5):
// qwZ's int8 weights for the stage-3 all-gather and qgZ's int4
// gradients for the hierarchical all-to-all reduce-scatter. Everything
// here is a pure function on slices; stage3 moves the bytes.
//
// # Vocabulary
//
//   - group (DeepSpeed's "groups" argument counts them): a run of
//     consecutive elements sharing one scale. A tensor of n elements in g
//     groups has groups of n/g elements (g divides n).
//   - scale: the float32 stored per group, the step between two levels.
//   - packed bytes: int8 values one per byte; int4 values two per byte,
//     element 2i in bits 4–7 and element 2i+1 in bits 0–3 (PackedInt4's
//     bit fields {high:4, low:4} in that order, filled {v[2i+1], v[2i]}).
//
// # Symmetric quantization (Params<Symmetric, bits>)
//
// For each group with m = max |x| (over the group, exact):
//
//	s = f32(2^bits) / f32(2·m)      s = 1 when m = 0
//	q = clamp(rne(f32(x·s)), −2^(bits−1), 2^(bits−1)−1)    rne: round half to even (__float2int_rn)
//	stored scale = f32(1/s)
//	dequantized x' = f32(q · stored)  rounded to fp16 by DeepSpeed's dequantize
//
// so the largest |x| of a group maps to ±2^(bits−1) and is clamped to
// 2^(bits−1)−1 when positive. A non-finite m (an fp16 overflow) gives
// s = 0, every q of a finite x 0 and the stored scale +Inf, so the
// dequantized group is NaN/Inf and the overflow check still sees it. A
// NaN product converts to the lowest level, as __float2int_rn does. A
// NaN element makes its group's scale NaN here, so the whole group
// dequantizes to NaN (DeepSpeed's __hmax2 passes over a NaN, which then
// lands on the lowest level, finite: dszero keeps the overflow visible).
// DeepSpeed's kernels read their input as fp16 (they cast data_ptr to
// __half*); here the input is float32 values, which for fp16 training
// are exactly the fp16 values the kernel reads. The dequantizations and
// sums take a rounding (round: half.NearestF16 for DeepSpeed's fp16;
// half.NearestBF16, or nil for float32), so bf16 and fp32 training
// quantize their own values with the same algorithm, where DeepSpeed's
// kernels would read a bf16 or fp32 tensor's bits as fp16.
//
// # qwZ: CUDAQuantizer (partition_parameters.py)
//
// A rank quantizes the concatenation of the partitions it contributes to
// one all_gather_coalesced call (a module's own parameters: stage3
// quantizes module by module) in WeightGroups(n) groups, 8 bits; every
// rank receives every rank's bytes and scales and dequantizes them all,
// its own included, to fp16, so all ranks hold the same gathered
// weights. Asymmetric quantization, which ZeRO++ does not use, is not
// implemented.
//
// # qgZ: all_to_all_quant_reduce (coalesced_collectives.py)
//
// With W = nodes·devices ranks (rank r on node r/devices, local index
// r%devices) and a gradient of n elements, n a multiple of 2W, in G
// groups (G = max(shape[0], shape[1], W)), the n elements are W
// partitions of n/W, partition p being rank p's share of the result:
//
//  1. SwizzleQuantize: int4, G groups, partition p = k·devices+d moved
//     to position d·nodes+k, so that chunk d (nodes partitions) is what
//     local rank d reduces.
//  2. all_to_all within the node: local rank d receives chunk d from
//     each of the node's devices.
//  3. ReduceQuantized: dequantize each device's chunk to fp16, add them
//     in fp16 (device 0 first, __hadd2), requantize in G/devices groups.
//  4. all_to_all across the nodes (the ranks of local index d): rank
//     (k, d) receives partition k·devices+d of every node's sum.
//  5. Dequantize to fp16, add the nodes' values in fp16 (torch's sum,
//     node 0 first) and divide by nodes in fp16.
//
// The result is Σ over the W ranks / nodes — not the average over W: a
// factor of devices that DeepSpeed 0.14.5 applies as written (it neither
// pre-divides the gradients for this path nor divides in the kernels).
package quant
