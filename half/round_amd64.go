//go:build !purego

package half

import "golang.org/x/sys/cpu"

// Rounding a float32 slice to 16-bit values in place is what 16-bit
// training does to every op output and every gradient, so on amd64 with
// AVX2 it runs eight lanes at a time (round_amd64.s), with the same bits
// as NearestBF16 and NearestF16 (TestRoundVecMatchesScalar).

// haveRoundVec: the CPU runs round_amd64.s; haveF16C: and its fp16
// conversions (VCVTPS2PH, VCVTPH2PS; CPUID.1:ECX bit 29).
var (
	haveRoundVec = cpu.X86.HasAVX2
	haveF16C     = haveRoundVec && cpuid1ECX()&(1<<29) != 0
)

func cpuid1ECX() uint32

// roundBF16AVX2 rounds x[0:n] to bf16 in place; n is a positive multiple
// of 8.
//
//go:noescape
func roundBF16AVX2(x *float32, n int)

// roundF16AVX2 rounds x[0:n] to fp16 in place, eight at a time, while
// no lane of an eight is Inf, NaN or rounds past the largest fp16 value,
// and returns how many it rounded (a multiple of 8): the caller rounds
// the next eight one by one. n is a positive multiple of 8.
//
//go:noescape
func roundF16AVX2(x *float32, n int) int

// packBF16AVX2 writes the bf16 patterns of src[0:n] to dst[0:n] in
// ascending order (dst may alias the first half of src's bytes); n is a
// positive multiple of 8.
//
//go:noescape
func packBF16AVX2(dst *uint16, src *float32, n int)

// unpackBF16AVX2 writes the float32 values of the bf16 patterns
// src[0:n] to dst[0:n] in descending order (src may be the first half
// of dst's bytes); n is a positive multiple of 8.
//
//go:noescape
func unpackBF16AVX2(dst *float32, src *uint16, n int)

// packF16F16C is packBF16AVX2 for fp16 (F16FromF32's bits).
//
//go:noescape
func packF16F16C(dst *uint16, src *float32, n int)

// unpackF16F16C is unpackBF16AVX2 for fp16 (F32FromF16's bits).
//
//go:noescape
func unpackF16F16C(dst *float32, src *uint16, n int)
