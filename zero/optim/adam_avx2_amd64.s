//go:build !purego

#include "textflag.h"

// AVX2+FMA3 bodies of the Adam kernels (adam_avx2_amd64.go), 8 float32
// lanes per iteration. Each instruction is one float32 operation of the
// scalar code in adam.go, in the same order, so every lane rounds exactly
// as the scalar kernel does: VFMADD231PS/VFMADD213PS round once (fma32),
// VSQRTPS is sqrt32, and VMULPS/VDIVPS/VADDPS are the float32 products,
// quotients and sums. n is a positive multiple of 8; the slices need no
// alignment. Go's MXCSR (no FTZ/DAZ, round to nearest) is assumed, as in
// the scalar code.
//
// Go's operand order is Intel's reversed: VFMADD231PS a, b, c is
// c = b*a + c; VFMADD213PS a, b, c is c = b*c + a; VDIVPS a, b, c is
// c = b/a.

// func torchAdamWAVX2(p, grad, m, v *float32, n int, decay, b1, omb1, b2, omb2, bc2, eps, ss float32)
TEXT ·torchAdamWAVX2(SB), NOSPLIT, $0-72
	MOVQ         p+0(FP), BX
	MOVQ         grad+8(FP), SI
	MOVQ         m+16(FP), DX
	MOVQ         v+24(FP), DI
	MOVQ         n+32(FP), CX
	VBROADCASTSS decay+40(FP), Y8
	VBROADCASTSS b1+44(FP), Y9
	VBROADCASTSS omb1+48(FP), Y10
	VBROADCASTSS b2+52(FP), Y11
	VBROADCASTSS omb2+56(FP), Y12
	VBROADCASTSS bc2+60(FP), Y13
	VBROADCASTSS eps+64(FP), Y14
	VBROADCASTSS ss+68(FP), Y15
	XORQ         AX, AX

adamw:
	VMOVUPS      (SI)(AX*4), Y0            // g
	VMULPS       (DX)(AX*4), Y9, Y1        // m1 = m*b1
	VFMADD231PS  Y10, Y0, Y1               // m = fma(g, omb1, m1)
	VMULPS       Y0, Y12, Y3               // gs = omb2*g
	VMULPS       (DI)(AX*4), Y11, Y2       // v1 = v*b2
	VFMADD231PS  Y0, Y3, Y2                // v = fma(gs, g, v1)
	VMOVUPS      Y1, (DX)(AX*4)
	VMOVUPS      Y2, (DI)(AX*4)
	VSQRTPS      Y2, Y3                    // sqrt(v)
	VDIVPS       Y13, Y3, Y3               // /bc2
	VADDPS       Y14, Y3, Y3               // d = ... + eps
	VMULPS       Y1, Y15, Y0               // ss*m
	VDIVPS       Y3, Y0, Y0                // q = ss*m / d
	VMULPS       (BX)(AX*4), Y8, Y1        // p*decay
	VADDPS       Y0, Y1, Y1                // p = p*decay + q
	VMOVUPS      Y1, (BX)(AX*4)
	ADDQ         $8, AX
	CMPQ         AX, CX
	JLT          adamw
	VZEROUPPER
	RET

// func torchAdamAVX2(p, grad, m, v *float32, n int, wd, b1, omb1, b2, omb2, bc2, eps, ss float32, l2 bool)
TEXT ·torchAdamAVX2(SB), NOSPLIT, $0-73
	MOVQ         p+0(FP), BX
	MOVQ         grad+8(FP), SI
	MOVQ         m+16(FP), DX
	MOVQ         v+24(FP), DI
	MOVQ         n+32(FP), CX
	MOVBLZX      l2+72(FP), R8
	VBROADCASTSS wd+40(FP), Y8
	VBROADCASTSS b1+44(FP), Y9
	VBROADCASTSS omb1+48(FP), Y10
	VBROADCASTSS b2+52(FP), Y11
	VBROADCASTSS omb2+56(FP), Y12
	VBROADCASTSS bc2+60(FP), Y13
	VBROADCASTSS eps+64(FP), Y14
	VBROADCASTSS ss+68(FP), Y15
	XORQ         AX, AX

adam:
	VMOVUPS      (SI)(AX*4), Y0            // g
	VMOVUPS      (BX)(AX*4), Y4            // p
	TESTQ        R8, R8
	JZ           adamgrad
	VFMADD231PS  Y8, Y4, Y0                // g = fma(p, wd, g)

adamgrad:
	VMULPS       (DX)(AX*4), Y9, Y1        // m1 = m*b1
	VFMADD231PS  Y10, Y0, Y1               // m = fma(g, omb1, m1)
	VMULPS       Y0, Y12, Y3               // gs = omb2*g
	VMULPS       (DI)(AX*4), Y11, Y2       // v1 = v*b2
	VFMADD231PS  Y0, Y3, Y2                // v = fma(gs, g, v1)
	VMOVUPS      Y1, (DX)(AX*4)
	VMOVUPS      Y2, (DI)(AX*4)
	VSQRTPS      Y2, Y3                    // sqrt(v)
	VDIVPS       Y13, Y3, Y3               // /bc2
	VADDPS       Y14, Y3, Y3               // d = ... + eps
	VMULPS       Y1, Y15, Y0               // ss*m
	VDIVPS       Y3, Y0, Y0                // q = ss*m / d
	VADDPS       Y0, Y4, Y4                // p = p + q
	VMOVUPS      Y4, (BX)(AX*4)
	ADDQ         $8, AX
	CMPQ         AX, CX
	JLT          adam
	VZEROUPPER
	RET

// func deepSpeedAVX2(p, grad, m, v *float32, n int, wd, b1, omb1, b2, omb2, bc2, eps, ss, decay float32, l2, dec bool)
TEXT ·deepSpeedAVX2(SB), NOSPLIT, $0-78
	MOVQ         p+0(FP), BX
	MOVQ         grad+8(FP), SI
	MOVQ         m+16(FP), DX
	MOVQ         v+24(FP), DI
	MOVQ         n+32(FP), CX
	MOVBLZX      l2+76(FP), R8
	MOVBLZX      dec+77(FP), R9
	VBROADCASTSS wd+40(FP), Y7
	VBROADCASTSS b1+44(FP), Y8
	VBROADCASTSS omb1+48(FP), Y9
	VBROADCASTSS b2+52(FP), Y10
	VBROADCASTSS omb2+56(FP), Y11
	VBROADCASTSS bc2+60(FP), Y12
	VBROADCASTSS eps+64(FP), Y13
	VBROADCASTSS ss+68(FP), Y14
	VBROADCASTSS decay+72(FP), Y15
	XORQ         AX, AX

ds:
	VMOVUPS      (SI)(AX*4), Y0            // g
	VMOVUPS      (BX)(AX*4), Y4            // p
	TESTQ        R8, R8
	JZ           dsgrad
	VFMADD231PS  Y7, Y4, Y0                // g = fma(p, wd, g)

dsgrad:
	VMULPS       (DX)(AX*4), Y8, Y1        // m1 = m*b1
	VFMADD231PS  Y9, Y0, Y1                // m = fma(g, omb1, m1)
	VMULPS       Y0, Y0, Y3                // g*g
	VMULPS       (DI)(AX*4), Y10, Y2       // v1 = v*b2
	VFMADD231PS  Y11, Y3, Y2               // v = fma(g*g, omb2, v1)
	VMOVUPS      Y1, (DX)(AX*4)
	VMOVUPS      Y2, (DI)(AX*4)
	VSQRTPS      Y2, Y3                    // sqrt(v)
	VFMADD213PS  Y13, Y12, Y3              // d = fma(sqrt(v), bc2, eps)
	VDIVPS       Y3, Y1, Y1                // u = m / d
	TESTQ        R9, R9
	JZ           dsparam
	VFMADD231PS  Y15, Y4, Y4               // p = fma(p, decay, p)

dsparam:
	VFMADD231PS  Y14, Y1, Y4               // p = fma(u, ss, p)
	VMOVUPS      Y4, (BX)(AX*4)
	ADDQ         $8, AX
	CMPQ         AX, CX
	JLT          ds
	VZEROUPPER
	RET
