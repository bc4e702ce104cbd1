// Package half converts between float32 and the two 16-bit floating-point
// formats used for mixed-precision training, bit for bit as PyTorch does.
//
// Vocabulary:
//
//   - fp16 (IEEE 754 binary16, torch.float16, DeepSpeed "fp16"): 1 sign bit,
//     5 exponent bits (bias 15), 10 fraction bits. Largest finite value
//     65504; smallest normal 2^-14; subnormals down to 2^-24. Its narrow range
//     is why fp16 training needs a loss scaler.
//   - bf16 (bfloat16, torch.bfloat16, DeepSpeed "bf16"): the top 16 bits of a
//     float32 — 1 sign bit, 8 exponent bits (bias 127), 7 fraction bits. Same
//     range as float32, three significant decimal digits.
//   - Bits: a 16-bit value is stored as its bit pattern in a uint16. Nothing
//     in this package gives those patterns a Go type of their own; buffers of
//     16-bit parameters are plain []uint16.
//   - Rounding: float32 → 16 bits rounds to nearest, ties to even (RNE), as
//     torch's tensor.half() and tensor.to(torch.bfloat16) do. Values beyond
//     the largest finite value round to ±Inf; values below half the smallest
//     subnormal round to ±0; signed zeros keep their sign.
//   - NaN: any float32 NaN becomes one canonical quiet NaN, as in torch's
//     scalar conversions (c10/util/Half.h and BFloat16.h): fp16 keeps the sign
//     (0x7E00 or 0xFE00), bf16 is always 0x7FC0. NaN payloads are not kept
//     (torch's vectorised CPU kernels keep some payload bits; only NaN-ness
//     is portable). Widening is exact: every fp16 and bf16 value, and every
//     non-NaN pattern's round trip 16 → 32 → 16, is preserved.
//   - Round: RoundF16 and RoundBF16 replace float32 values in place by the
//     nearest 16-bit value, kept as float32. The engine emulates 16-bit
//     compute with them: compute in float32, round where the GPU would store
//     16 bits.
//   - Pack: PackBF16 and PackF16 round a float32 buffer to 16 bits in its
//     own memory (the patterns in its first half), UnpackBF16 and
//     UnpackF16 widen any part of it back: a 16-bit collective on
//     gradients held in float32, with no second buffer.
//
// Scalar functions (F16FromF32, F32FromF16, BF16FromF32, F32FromBF16,
// NearestF16, NearestBF16) and slice functions (F32ToF16, F16ToF32, F32ToBF16, BF16ToF32, RoundF16,
// RoundBF16) compute the same thing; the slice forms are plain loops the
// compiler keeps free of bounds checks. A slice function panics when dst and
// src differ in length: that is a programmer error.
package half
