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

// Eight lanes of fastTanh's algorithm in float32 (Cephes's tanhf): below
// |u| = 0.625 the odd polynomial u + u·z·P(z), z = u²; above,
// 1 − 2/(e^{2|u|} + 1) with u's sign (EXP8; large |u| gives ±1, NaN
// NaN). In: Y0 = u. Out: Y0 = tanh u. Uses Y1–Y7 and EXP8's constants.
#define TANH8 \
	VANDPS       absf<>(SB), Y0, Y5 \
	VANDPS       signf<>(SB), Y0, Y6 \
	VMULPS       Y0, Y0, Y7 \
	VMOVAPS      th0<>(SB), Y1 \
	VFMADD213PS  th1<>(SB), Y7, Y1 \
	VFMADD213PS  th2<>(SB), Y7, Y1 \
	VFMADD213PS  th3<>(SB), Y7, Y1 \
	VFMADD213PS  th4<>(SB), Y7, Y1 \
	VMULPS       Y7, Y1, Y1 \
	VFMADD213PS  Y0, Y0, Y1 \
	VMOVAPS      Y1, Y7 \
	VADDPS       Y5, Y5, Y0 \
	EXP8 \
	VADDPS       Y15, Y0, Y0 \
	VMOVAPS      two<>(SB), Y1 \
	VDIVPS       Y0, Y1, Y1 \
	VSUBPS       Y1, Y15, Y0 \
	VORPS        Y6, Y0, Y0 \
	VCMPPS       $1, c0625<>(SB), Y5, Y1 \
	VBLENDVPS    Y1, Y7, Y0, Y0

// GELU's inner argument: Y0 = β·(x + κ·x³) from Y0 = x. Uses Y1.
#define GELUARG \
	VMULPS       Y0, Y0, Y1 \
	VMULPS       gkappa<>(SB), Y1, Y1 \
	VFMADD213PS  Y0, Y0, Y1 \
	VMULPS       gbeta<>(SB), Y1, Y0

#define C8(sym, val) \
	DATA sym+0(SB)/4, val; DATA sym+4(SB)/4, val; DATA sym+8(SB)/4, val; DATA sym+12(SB)/4, val; \
	DATA sym+16(SB)/4, val; DATA sym+20(SB)/4, val; DATA sym+24(SB)/4, val; DATA sym+28(SB)/4, val; \
	GLOBL sym(SB), RODATA|NOPTR, $32

C8(absf<>, $0x7FFFFFFF)
C8(signf<>, $0x80000000)
C8(th0<>, $-5.70498872745e-3)
C8(th1<>, $2.06390887954e-2)
C8(th2<>, $-5.37397155531e-2)
C8(th3<>, $1.33314422036e-1)
C8(th4<>, $-3.33332819422e-1)
C8(two<>, $2.0)
C8(c0625<>, $0.625)
C8(gbeta<>, $0.7978845608028654)
C8(gkappa<>, $0.044715)
C8(gkappa3<>, $0.134145)
C8(half8<>, $0.5)

// func tanhAVX2(out, in *float32, n int)
// out[i] = tanh(in[i]) for i < n; n a positive multiple of 8.
TEXT ·tanhAVX2(SB), NOSPLIT, $0-24
	MOVQ    out+0(FP), DI
	MOVQ    in+8(FP), SI
	MOVQ    n+16(FP), CX
	CONSTS
	XORQ    AX, AX
tanhloop:
	VMOVUPS (SI)(AX*4), Y0
	TANH8
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     tanhloop
	VZEROUPPER
	RET

// func geluAVX2(out, in *float32, n int)
// out[i] = 0.5·x·(1 + tanh(β(x + κx³))), x = in[i], i < n; n a positive
// multiple of 8; out may be in.
TEXT ·geluAVX2(SB), NOSPLIT, $0-24
	MOVQ    out+0(FP), DI
	MOVQ    in+8(FP), SI
	MOVQ    n+16(FP), CX
	CONSTS
	XORQ    AX, AX
geluloop:
	VMOVUPS (SI)(AX*4), Y0
	GELUARG
	TANH8
	VADDPS  Y15, Y0, Y0
	VMOVUPS (SI)(AX*4), Y1
	VMULPS  half8<>(SB), Y1, Y1
	VMULPS  Y1, Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     geluloop
	VZEROUPPER
	RET

// func geluBackAVX2(dinp, in, dout *float32, n int)
// dinp[i] = dout[i]·(0.5(1 + t) + 0.5x(1 − t²)·β(1 + 3κx²)), t the tanh
// of GELU's argument at x = in[i], i < n; n a positive multiple of 8;
// dinp may be dout.
TEXT ·geluBackAVX2(SB), NOSPLIT, $0-32
	MOVQ         dinp+0(FP), DI
	MOVQ         in+8(FP), SI
	MOVQ         dout+16(FP), DX
	MOVQ         n+24(FP), CX
	CONSTS
	XORQ         AX, AX
gelubackloop:
	VMOVUPS      (SI)(AX*4), Y0
	GELUARG
	TANH8
	VMOVUPS      (SI)(AX*4), Y5
	VMULPS       Y5, Y5, Y6
	VMULPS       gkappa3<>(SB), Y6, Y6
	VADDPS       Y15, Y6, Y6
	VMULPS       gbeta<>(SB), Y6, Y6
	VMULPS       half8<>(SB), Y5, Y5
	VMULPS       Y6, Y5, Y5
	VMOVAPS      Y0, Y1
	VFNMADD213PS Y15, Y0, Y1
	VMULPS       Y1, Y5, Y5
	VADDPS       Y15, Y0, Y0
	VMULPS       half8<>(SB), Y0, Y0
	VADDPS       Y5, Y0, Y0
	VMULPS       (DX)(AX*4), Y0, Y0
	VMOVUPS      Y0, (DI)(AX*4)
	ADDQ         $8, AX
	CMPQ         AX, CX
	JLT          gelubackloop
	VZEROUPPER
	RET
