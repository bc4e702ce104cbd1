//go:build !purego

#include "textflag.h"

// The lane loop of SumSquaresF32 (norm.go, norm_avx2_amd64.go): Y0 holds
// the 8 lane accumulators acc[0..7], and each iteration loads the next 8
// elements and does acc = x*x + acc with one VFMADD231PS, which rounds
// once, as fma32 does. Lane j therefore sees elements j, j+8, j+16, … in
// the scalar order, and every lane gets the scalar bits (Go's MXCSR: round
// to nearest, no FTZ/DAZ; NaN, Inf and subnormals included).
//
// The loop is one chain of dependent FMAs, so it runs at one iteration per
// FMA latency (4 to 5 cycles: about 2 elements a cycle, near what one core
// streams from memory). Splitting the sum over several registers would
// hide the latency but reassociate the sum, which changes the bits torch
// produces; unrolling without splitting gains nothing, the chain is the
// same. The slice needs no alignment.

// func sumSquaresAVX2(acc *[8]float32, x *float32, n int)
TEXT ·sumSquaresAVX2(SB), NOSPLIT, $0-24
	MOVQ    acc+0(FP), DI
	MOVQ    x+8(FP), SI
	MOVQ    n+16(FP), CX
	VMOVUPS (DI), Y0
	XORQ    AX, AX

loop:
	VMOVUPS     (SI)(AX*4), Y1
	VFMADD231PS Y1, Y1, Y0         // acc = x*x + acc
	ADDQ        $8, AX
	CMPQ        AX, CX
	JLT         loop
	VMOVUPS     Y0, (DI)
	VZEROUPPER
	RET
