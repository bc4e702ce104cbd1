// Package kernels holds dszero's CUDA kernels, their launcher table and
// their Go reference implementations.
//
// # Sources
//
// The kernels are CUDA C++ in the *.cu files of this package, embedded in
// the binary and concatenated by Source into one header-free translation
// unit that package cuda compiles with NVRTC, at first use, into a CUBIN
// for the GPU's own architecture (Options). Each entry point is an
// extern "C" __global__ wrapper around a template instantiated per
// storage type: float for fp32, unsigned short holding the bit pattern for
// bf16 and fp16, converted with hand-written round-to-nearest-even code
// that is bit for bit package half's. The prelude documents the common
// pieces: the storage-type structs (ld, st, rnd), the grid-stride loop and
// the fixed-order block reductions.
//
// What a training step needs: embedding forward and deterministic
// backward (TokenBuckets), LayerNorm and RMSNorm forward and backward,
// GELU (tanh) and SwiGLU, rotary embeddings, the materialised causal
// softmax and the head split/merge/repeat around cuBLASLt's batched GEMMs,
// the fused softmax cross-entropy with its gradient and ignore_index, bias
// and weight gradients as deterministic column sums, casts, scaling,
// division (PreAvg), accumulation, float64 sums of squares (gradient
// norms), the overflow flag, fills, fused Adam/AdamW and SGD steps on fp32
// masters with an optional 16-bit copy, and the fixed-rank-order n-way
// reduction of ranks sharing one GPU.
//
// # Determinism and the reference contract
//
// No kernel uses floating-point atomics. Reductions fold in an order fixed
// by the block width alone: thread t folds elements t, t+B, t+2B, … and a
// shared-memory tree adds s[t] + s[t+h] for h = B/2, …, 1. Row statistics
// and gradient-norm sums are folded in float64, as package model/gpt and
// DeepSpeed's ZeRO norms fold them; column sums (weight and bias
// gradients) go through float64 chunk partials added in chunk order.
//
// The sources are compiled with --fmad=false and IEEE division and square
// root. The Go references (Table.Run) perform the same float32 and
// float64 operations in the same order — explicit fma where the CUDA code
// writes fmaf — so for every kernel not marked Approx a GPU result must
// equal the reference bit for bit; Approx kernels call CUDA's expf, logf or
// tanhf, within two ulps of the references' correctly rounded ones. The
// references are in turn tested against independent float64 formulas, and
// adam_f32, sgd_f32, reduce_n and the casts bit for bit against package
// zero/optim, package comm and package half.
//
// # The launcher table
//
// Table lists every kernel with its parameters (names and C types, in
// order). A test parses the .cu files and requires the same set of
// kernels with the same parameters; another type-checks the sources with
// g++ and a shim for CUDA's built-ins where g++ exists; package cuda's
// launchers pass arguments through the table, which checks their count and
// kinds, and the fake driver runs the references from the same table.
package kernels
