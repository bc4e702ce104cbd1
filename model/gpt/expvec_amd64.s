//go:build !purego

#include "textflag.h"

// Eight lanes of e^x in float32 (expvec_amd64.go): Cephes's expf. x is clamped
// to [-87.3365, 88], n = round(x·log2 e), r = x − n·ln2 in two parts
// (fused), e^r = (P(r)·r + 1)·r + 1 with P of degree 5, times 2^n built
// in the exponent bits. Lanes below −87.3365 (−Inf included; e^x below
// 2⁻¹²⁶) give 0, NaN lanes NaN; the arguments dszero passes are ≤ 0 (a
// shifted log-softmax), so the clamp at 88 never bites. In: Y0 = x.
// Out: Y0 = e^x. Uses Y1–Y4, and Y8–Y15 hold the constants (CONSTS).
#define EXP8 \
	VMOVAPS      Y0, Y3            \
	VCMPPS       $1, Y8, Y0, Y4    \
	VMAXPS       Y8, Y0, Y0        \
	VMINPS       Y9, Y0, Y0        \
	VMULPS       Y10, Y0, Y1       \
	VROUNDPS     $0, Y1, Y1        \
	VFNMADD231PS Y11, Y1, Y0       \
	VFNMADD231PS Y12, Y1, Y0       \
	VMOVAPS      Y13, Y2           \
	VFMADD213PS  Y14, Y0, Y2       \
	VFMADD213PS  p2<>(SB), Y0, Y2  \
	VFMADD213PS  p3<>(SB), Y0, Y2  \
	VFMADD213PS  p4<>(SB), Y0, Y2  \
	VFMADD213PS  p5<>(SB), Y0, Y2  \
	VFMADD213PS  Y15, Y0, Y2       \
	VFMADD213PS  Y15, Y0, Y2       \
	VCVTPS2DQ    Y1, Y1            \
	VPSLLD       $23, Y1, Y1       \
	VPADDD       Y15, Y1, Y1       \
	VMULPS       Y1, Y2, Y0        \
	VANDNPS      Y0, Y4, Y0        \
	VCMPPS       $3, Y3, Y3, Y4    \
	VBLENDVPS    Y4, Y3, Y0, Y0

#define CONSTS \
	VBROADCASTSS lo<>(SB), Y8    \
	VBROADCASTSS hi<>(SB), Y9    \
	VBROADCASTSS log2e<>(SB), Y10 \
	VBROADCASTSS ln2hi<>(SB), Y11 \
	VBROADCASTSS ln2lo<>(SB), Y12 \
	VBROADCASTSS p0<>(SB), Y13   \
	VBROADCASTSS p1<>(SB), Y14   \
	VBROADCASTSS one<>(SB), Y15
DATA lo<>+0(SB)/4, $-87.3365448
GLOBL lo<>(SB), RODATA|NOPTR, $4
DATA hi<>+0(SB)/4, $88.0
GLOBL hi<>(SB), RODATA|NOPTR, $4
DATA log2e<>+0(SB)/4, $1.44269504088896341
GLOBL log2e<>(SB), RODATA|NOPTR, $4
DATA ln2hi<>+0(SB)/4, $0.693359375
GLOBL ln2hi<>(SB), RODATA|NOPTR, $4
DATA ln2lo<>+0(SB)/4, $-2.12194440e-4
GLOBL ln2lo<>(SB), RODATA|NOPTR, $4
DATA p0<>+0(SB)/4, $1.9875691500e-4
GLOBL p0<>(SB), RODATA|NOPTR, $4
DATA p1<>+0(SB)/4, $1.3981999507e-3
GLOBL p1<>(SB), RODATA|NOPTR, $4
DATA p2<>+0(SB)/4, $8.3334519073e-3
DATA p2<>+4(SB)/4, $8.3334519073e-3
DATA p2<>+8(SB)/4, $8.3334519073e-3
DATA p2<>+12(SB)/4, $8.3334519073e-3
DATA p2<>+16(SB)/4, $8.3334519073e-3
DATA p2<>+20(SB)/4, $8.3334519073e-3
DATA p2<>+24(SB)/4, $8.3334519073e-3
DATA p2<>+28(SB)/4, $8.3334519073e-3
GLOBL p2<>(SB), RODATA|NOPTR, $32
DATA p3<>+0(SB)/4, $4.1665795894e-2
DATA p3<>+4(SB)/4, $4.1665795894e-2
DATA p3<>+8(SB)/4, $4.1665795894e-2
DATA p3<>+12(SB)/4, $4.1665795894e-2
DATA p3<>+16(SB)/4, $4.1665795894e-2
DATA p3<>+20(SB)/4, $4.1665795894e-2
DATA p3<>+24(SB)/4, $4.1665795894e-2
DATA p3<>+28(SB)/4, $4.1665795894e-2
GLOBL p3<>(SB), RODATA|NOPTR, $32
DATA p4<>+0(SB)/4, $1.6666665459e-1
DATA p4<>+4(SB)/4, $1.6666665459e-1
DATA p4<>+8(SB)/4, $1.6666665459e-1
DATA p4<>+12(SB)/4, $1.6666665459e-1
DATA p4<>+16(SB)/4, $1.6666665459e-1
DATA p4<>+20(SB)/4, $1.6666665459e-1
DATA p4<>+24(SB)/4, $1.6666665459e-1
DATA p4<>+28(SB)/4, $1.6666665459e-1
GLOBL p4<>(SB), RODATA|NOPTR, $32
DATA p5<>+0(SB)/4, $5.0000001201e-1
DATA p5<>+4(SB)/4, $5.0000001201e-1
DATA p5<>+8(SB)/4, $5.0000001201e-1
DATA p5<>+12(SB)/4, $5.0000001201e-1
DATA p5<>+16(SB)/4, $5.0000001201e-1
DATA p5<>+20(SB)/4, $5.0000001201e-1
DATA p5<>+24(SB)/4, $5.0000001201e-1
DATA p5<>+28(SB)/4, $5.0000001201e-1
GLOBL p5<>(SB), RODATA|NOPTR, $32
DATA one<>+0(SB)/4, $1.0
GLOBL one<>(SB), RODATA|NOPTR, $4

// func expSubSumAVX2(x *float32, n int, a, b float32, sums *[8]float32)
// sums[j] += e^((x[i]−a)−b) for i ≡ j (mod 8), i < n; n a positive multiple of 8.
TEXT ·expSubSumAVX2(SB), NOSPLIT, $0-32
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS a+16(FP), Y5
	VBROADCASTSS b+20(FP), Y6
	MOVQ         sums+24(FP), DI
	VMOVUPS      (DI), Y7
	CONSTS
	XORQ         AX, AX
sumloop:
	VMOVUPS      (SI)(AX*4), Y0
	VSUBPS       Y5, Y0, Y0
	VSUBPS       Y6, Y0, Y0
	EXP8
	VADDPS       Y0, Y7, Y7
	ADDQ         $8, AX
	CMPQ         AX, CX
	JLT          sumloop
	VMOVUPS      Y7, (DI)
	VZEROUPPER
	RET

// func expSubScaleAVX2(x *float32, n int, a, b, d float32)
// x[i] = e^((x[i]−a)−b)·d for i < n; n a positive multiple of 8.
TEXT ·expSubScaleAVX2(SB), NOSPLIT, $0-28
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS a+16(FP), Y5
	VBROADCASTSS b+20(FP), Y6
	VBROADCASTSS d+24(FP), Y7
	CONSTS
	XORQ         AX, AX
scaleloop:
	VMOVUPS      (SI)(AX*4), Y0
	VSUBPS       Y5, Y0, Y0
	VSUBPS       Y6, Y0, Y0
	EXP8
	VMULPS       Y7, Y0, Y0
	VMOVUPS      Y0, (SI)(AX*4)
	ADDQ         $8, AX
	CMPQ         AX, CX
	JLT          scaleloop
	VZEROUPPER
	RET
