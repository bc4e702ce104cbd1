//go:build !purego

#include "textflag.h"

// AVX bodies of Pool.Scale and Pool.Divide (elementwise_amd64.go), 8
// float32 lanes per iteration: VMULPS is x*c and VDIVPS is x/d, each
// correctly rounded as the scalar float32 operation is, so
// every lane gets the scalar bits (Go's MXCSR: round to nearest, no
// FTZ/DAZ). n is a positive multiple of 8; nothing needs alignment.
// VDIVPS a, b, c is c = b/a.

// func scaleAVX(x *float32, n int, c float32)
TEXT ·scaleAVX(SB), NOSPLIT, $0-20
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS c+16(FP), Y1
	XORQ         AX, AX

scale:
	VMULPS  (SI)(AX*4), Y1, Y0
	VMOVUPS Y0, (SI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     scale
	VZEROUPPER
	RET

// func divideAVX(x *float32, n int, d float32)
TEXT ·divideAVX(SB), NOSPLIT, $0-20
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS d+16(FP), Y1
	XORQ         AX, AX

divide:
	VMOVUPS (SI)(AX*4), Y0
	VDIVPS  Y1, Y0, Y0
	VMOVUPS Y0, (SI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     divide
	VZEROUPPER
	RET
