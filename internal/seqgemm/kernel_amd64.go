//go:build !purego

package seqgemm

import "golang.org/x/sys/cpu"

// haveAVX selects the kernels of kernel_amd64.s (VBROADCASTSS, VMULPS and
// VADDPS on YMM registers: AVX, which x/sys/cpu reports only when the OS
// saves those registers). They round exactly as the scalar loop does, so
// the choice changes speed only.
var haveAVX = cpu.X86.HasAVX

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
