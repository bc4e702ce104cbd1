//go:build !purego

#include "textflag.h"

// Eight lanes of NearestBF16 and of NearestF16's normal case
// (round_amd64.go), on the float32 bit patterns.

DATA bfBias<>+0(SB)/4, $0x00007FFF
GLOBL bfBias<>(SB), RODATA|NOPTR, $4
DATA one32<>+0(SB)/4, $1
GLOBL one32<>(SB), RODATA|NOPTR, $4
DATA bfMask<>+0(SB)/4, $0xFFFF0000
GLOBL bfMask<>(SB), RODATA|NOPTR, $4
DATA absMask<>+0(SB)/4, $0x7FFFFFFF
GLOBL absMask<>(SB), RODATA|NOPTR, $4
DATA inf32<>+0(SB)/4, $0x7F800000
GLOBL inf32<>(SB), RODATA|NOPTR, $4
DATA bfNaN<>+0(SB)/4, $0x7FC00000
GLOBL bfNaN<>(SB), RODATA|NOPTR, $4
DATA hBias<>+0(SB)/4, $0x00000FFF
GLOBL hBias<>(SB), RODATA|NOPTR, $4
DATA hMask<>+0(SB)/4, $0xFFFFE000
GLOBL hMask<>(SB), RODATA|NOPTR, $4
// (127-14)<<23 = 2^-14: below it the result is zero or subnormal.
DATA hMinNorm<>+0(SB)/4, $0x38800000
GLOBL hMinNorm<>(SB), RODATA|NOPTR, $4
DATA half32<>+0(SB)/4, $0.5
GLOBL half32<>(SB), RODATA|NOPTR, $4
// (127+16)<<23 - 1: above it the result is not finite.
DATA hOvf1<>+0(SB)/4, $0x477FFFFF
GLOBL hOvf1<>(SB), RODATA|NOPTR, $4

// NearestBF16 on eight lanes: r = (b + 0x7FFF + (b>>16)&1) &^ 0xFFFF, and
// 0x7FC00000 for NaN lanes (|b| > Inf). In: Y0 = b. Out: Y2 = r. Uses Y1,
// Y3, and Y8–Y13 hold the constants (BF16CONSTS).
#define ROUNDBF16 \
	VPSRLD    $16, Y0, Y1 \
	VPAND     Y9, Y1, Y1 \
	VPADDD    Y8, Y0, Y2 \
	VPADDD    Y1, Y2, Y2 \
	VPAND     Y10, Y2, Y2 \
	VPAND     Y11, Y0, Y3 \
	VPCMPGTD  Y12, Y3, Y3 \
	VPBLENDVB Y3, Y13, Y2, Y2

#define BF16CONSTS \
	VPBROADCASTD bfBias<>(SB), Y8 \
	VPBROADCASTD one32<>(SB), Y9 \
	VPBROADCASTD bfMask<>(SB), Y10 \
	VPBROADCASTD absMask<>(SB), Y11 \
	VPBROADCASTD inf32<>(SB), Y12 \
	VPBROADCASTD bfNaN<>(SB), Y13

// func roundBF16AVX2(x *float32, n int)
// x[i] = ROUNDBF16(x[i]) for i < n.
TEXT ·roundBF16AVX2(SB), NOSPLIT, $0-16
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	BF16CONSTS

bfloop:
	VMOVDQU   (SI), Y0
	ROUNDBF16
	VMOVDQU   Y2, (SI)
	ADDQ      $32, SI
	SUBQ      $8, CX
	JNZ       bfloop
	VZEROUPPER
	RET

// func roundF16AVX2(x *float32, n int) int
// a = |b|; r = (a + 0xFFF + (a>>13)&1) &^ 0x1FFF for a ≥ 2^-14, and
// (a + 0.5) − 0.5 in float32 below it (the fp16 subnormal grid, as
// NearestF16), with b's sign, while no lane has a or r at or above 2^16
// (Inf, NaN, overflow).
TEXT ·roundF16AVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	XORQ AX, AX
	VPBROADCASTD hBias<>(SB), Y8
	VPBROADCASTD one32<>(SB), Y9
	VPBROADCASTD hMask<>(SB), Y10
	VPBROADCASTD absMask<>(SB), Y11
	VPBROADCASTD hMinNorm<>(SB), Y12
	VPBROADCASTD hOvf1<>(SB), Y13
	VPBROADCASTD half32<>(SB), Y14

hloop:
	CMPQ      AX, CX
	JGE       hdone
	VMOVDQU   (SI)(AX*4), Y0
	VPAND     Y11, Y0, Y1
	VPSRLD    $13, Y1, Y2
	VPAND     Y9, Y2, Y2
	VPADDD    Y8, Y1, Y3
	VPADDD    Y2, Y3, Y3
	VPAND     Y10, Y3, Y3
	VPCMPGTD  Y13, Y3, Y4 // r ≥ 2^16
	VPCMPGTD  Y13, Y1, Y5 // a ≥ 2^16 (Inf, NaN: r may wrap)
	VPOR      Y5, Y4, Y4
	VMOVMSKPS Y4, DX
	TESTL     DX, DX
	JNZ       hdone
	VADDPS    Y14, Y1, Y5
	VSUBPS    Y14, Y5, Y5 // the subnormal (or zero) result
	VPCMPGTD  Y1, Y12, Y6 // a < 2^-14
	VBLENDVPS Y6, Y5, Y3, Y3
	VPANDN    Y0, Y11, Y6 // sign bits
	VPOR      Y6, Y3, Y3
	VMOVDQU   Y3, (SI)(AX*4)
	ADDQ      $8, AX
	JMP       hloop

hdone:
	MOVQ AX, ret+16(FP)
	VZEROUPPER
	RET

// func packBF16AVX2(dst *uint16, src *float32, n int)
// dst[i] = the bf16 pattern of src[i] (ROUNDBF16, then the
// top 16 bits), ascending: dst may alias the first half of src's bytes.
TEXT ·packBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	BF16CONSTS

packloop:
	VMOVDQU   (SI), Y0
	ROUNDBF16
	VPSRLD    $16, Y2, Y2
	VPACKUSDW Y2, Y2, Y2
	VPERMQ    $0x08, Y2, Y2
	VMOVDQU   X2, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	SUBQ      $8, CX
	JNZ       packloop
	VZEROUPPER
	RET

// func unpackBF16AVX2(dst *float32, src *uint16, n int)
// dst[i] = the float32 of bf16 pattern src[i], descending: src may be
// the first half of dst's bytes.
TEXT ·unpackBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

unpackloop:
	SUBQ      $8, CX
	VPMOVZXWD (SI)(CX*2), Y0
	VPSLLD    $16, Y0, Y0
	VMOVDQU   Y0, (DI)(CX*4)
	TESTQ     CX, CX
	JNZ       unpackloop
	VZEROUPPER
	RET

// func cpuid1ECX() uint32
// CPUID leaf 1's ECX (bit 29: F16C).
TEXT ·cpuid1ECX(SB), NOSPLIT, $0-4
	MOVL  $1, AX
	XORL  CX, CX
	CPUID
	MOVL  CX, ret+0(FP)
	RET

// func packF16F16C(dst *uint16, src *float32, n int)
// dst[i] = the fp16 pattern of src[i], ascending: VCVTPS2PH rounding to
// nearest even (subnormals, overflow to Inf as F16FromF32), NaN lanes
// first made sign | 0x7FC00000 so that they become sign | 0x7E00.
TEXT ·packF16F16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VPBROADCASTD absMask<>(SB), Y11
	VPBROADCASTD inf32<>(SB), Y12
	VPBROADCASTD bfNaN<>(SB), Y13

hpackloop:
	VMOVDQU   (SI), Y0
	VPAND     Y11, Y0, Y3
	VPCMPGTD  Y12, Y3, Y3
	VPANDN    Y0, Y11, Y4
	VPOR      Y13, Y4, Y4
	VPBLENDVB Y3, Y4, Y0, Y0
	VCVTPS2PH $0, Y0, X1
	VMOVDQU   X1, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	SUBQ      $8, CX
	JNZ       hpackloop
	VZEROUPPER
	RET

// func unpackF16F16C(dst *float32, src *uint16, n int)
// dst[i] = the float32 of fp16 pattern src[i] (VCVTPH2PS: exact, NaNs
// quiet with their sign and payload, as F32FromF16), descending.
TEXT ·unpackF16F16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

hunpackloop:
	SUBQ      $8, CX
	VCVTPH2PS (SI)(CX*2), Y0
	VMOVUPS   Y0, (DI)(CX*4)
	TESTQ     CX, CX
	JNZ       hunpackloop
	VZEROUPPER
	RET
