//go:build !purego

#include "textflag.h"

// The vector kernels of seqgemm (kernel_amd64.go). Each accumulator lane
// is one element of c and receives, for l = 0, 1, …, k-1 in order, one
// VMULPS (the float32 product a·b) and one VADDPS (the float32 sum): the
// scalar loop's operations, so the same bits. Accumulators start at +0
// (VXORPS). Strides are in bytes; nothing needs alignment. Go's MXCSR
// (round to nearest, no FTZ/DAZ) is assumed, as in the scalar code.
// Operand order is Go's: VMULPS x, y, z is z = y·x.

// func mul4x16(a *float32, ai, al int, b *float32, ldb, k int, c *float32, ldc int)
TEXT ·mul4x16(SB), NOSPLIT, $0-64
	MOVQ   a+0(FP), SI
	MOVQ   ai+8(FP), AX
	MOVQ   al+16(FP), R8
	MOVQ   b+24(FP), DI
	MOVQ   ldb+32(FP), R9
	MOVQ   k+40(FP), CX
	MOVQ   c+48(FP), DX
	MOVQ   ldc+56(FP), R10
	LEAQ   (SI)(AX*1), R11  // row 1 of a
	LEAQ   (R11)(AX*1), R12 // row 2
	LEAQ   (R12)(AX*1), R13 // row 3
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

loop4:
	VMOVUPS      (DI), Y8   // b[l][0:8]
	VMOVUPS      32(DI), Y9 // b[l][8:16]
	VBROADCASTSS (SI), Y10  // a[0][l]
	VMULPS       Y8, Y10, Y11
	VADDPS       Y11, Y0, Y0
	VMULPS       Y9, Y10, Y12
	VADDPS       Y12, Y1, Y1
	VBROADCASTSS (R11), Y13 // a[1][l]
	VMULPS       Y8, Y13, Y14
	VADDPS       Y14, Y2, Y2
	VMULPS       Y9, Y13, Y15
	VADDPS       Y15, Y3, Y3
	VBROADCASTSS (R12), Y10 // a[2][l]
	VMULPS       Y8, Y10, Y11
	VADDPS       Y11, Y4, Y4
	VMULPS       Y9, Y10, Y12
	VADDPS       Y12, Y5, Y5
	VBROADCASTSS (R13), Y13 // a[3][l]
	VMULPS       Y8, Y13, Y14
	VADDPS       Y14, Y6, Y6
	VMULPS       Y9, Y13, Y15
	VADDPS       Y15, Y7, Y7
	ADDQ         R8, SI
	ADDQ         R8, R11
	ADDQ         R8, R12
	ADDQ         R8, R13
	ADDQ         R9, DI
	DECQ         CX
	JNZ          loop4

	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	ADDQ    R10, DX
	VMOVUPS Y2, (DX)
	VMOVUPS Y3, 32(DX)
	ADDQ    R10, DX
	VMOVUPS Y4, (DX)
	VMOVUPS Y5, 32(DX)
	ADDQ    R10, DX
	VMOVUPS Y6, (DX)
	VMOVUPS Y7, 32(DX)
	VZEROUPPER
	RET

// func mul1x8(a *float32, al int, b *float32, ldb, k int, c *float32)
TEXT ·mul1x8(SB), NOSPLIT, $0-48
	MOVQ   a+0(FP), SI
	MOVQ   al+8(FP), R8
	MOVQ   b+16(FP), DI
	MOVQ   ldb+24(FP), R9
	MOVQ   k+32(FP), CX
	MOVQ   c+40(FP), DX
	VXORPS Y0, Y0, Y0

loop1:
	VBROADCASTSS (SI), Y10
	VMULPS       (DI), Y10, Y11
	VADDPS       Y11, Y0, Y0
	ADDQ         R8, SI
	ADDQ         R9, DI
	DECQ         CX
	JNZ          loop1

	VMOVUPS Y0, (DX)
	VZEROUPPER
	RET
