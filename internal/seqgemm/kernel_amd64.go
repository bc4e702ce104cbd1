//go:build !purego

package seqgemm

import "golang.org/x/sys/cpu"

// haveAVX selects the kernels of kernel_amd64.s (VBROADCASTSS, VMULPS and
// VADDPS on YMM registers: AVX, which x/sys/cpu reports only when the OS
// saves those registers). They round exactly as the scalar loop does, so
// the choice changes speed only.
var haveAVX = cpu.X86.HasAVX

// Block sizes of the vector kernels: rows of a held at once, and columns
// of b per vector (eight float32 lanes of a 256-bit register).
const (
	rowBlock = 4
	lanes    = 8
)

// mulVector computes columns [0, vn) of Mul's product with the vector
// kernels, vn being n rounded down to whole vectors, and returns vn (0
// without AVX). Mul has checked the arguments.
func mulVector(m, n, k int, a []float32, ai, al int, b []float32, ldb int, c []float32, ldc int) int {
	vn := n &^ (lanes - 1)
	if !haveAVX || vn == 0 {
		return 0
	}
	i := 0
	for ; i+rowBlock <= m; i += rowBlock {
		j := 0
		for ; j+2*lanes <= vn; j += 2 * lanes {
			mul4x16(&a[i*ai], 4*ai, 4*al, &b[j], 4*ldb, k, &c[i*ldc+j], 4*ldc)
		}
		for ; j < vn; j += lanes {
			for r := i; r < i+rowBlock; r++ {
				mul1x8(&a[r*ai], 4*al, &b[j], 4*ldb, k, &c[r*ldc+j])
			}
		}
	}
	for ; i < m; i++ {
		for j := 0; j < vn; j += lanes {
			mul1x8(&a[i*ai], 4*al, &b[j], 4*ldb, k, &c[i*ldc+j])
		}
	}
	return vn
}

// mul4x16 computes a 4×16 block of c: rows a, a+ai, a+2ai, a+3ai (bytes),
// each advancing al bytes per step of l; b advancing ldb bytes per step;
// c rows ldc bytes apart. k > 0.
//
//go:noescape
func mul4x16(a *float32, ai, al int, b *float32, ldb, k int, c *float32, ldc int)

// mul1x8 computes one row of eight columns of c. k > 0.
//
//go:noescape
func mul1x8(a *float32, al int, b *float32, ldb, k int, c *float32)
