//go:build !purego

package optim

import (
	"golang.org/x/sys/cpu"

	"github.com/dszero/dszero/internal/vecloop"
)

// haveAVX2FMA selects the AVX2+FMA3 Adam kernels of adam_avx2_amd64.s.
// x/sys/cpu also checks that the OS saves the YMM registers. Lanes and
// scalar code round identically (see vector), so the choice changes
// speed only, never a bit of the result.
var haveAVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// vectorPrefix runs block(i, n) over the longest multiple-of-8 prefix of
// [0, length) in blocks of at most vecBlock elements (vecloop.Prefix) and
// returns where the scalar code must continue (0 without AVX2+FMA).
func vectorPrefix(length int, block func(i, n int)) int {
	return vecloop.Prefix(haveAVX2FMA, length, block)
}

// vector runs the non-AMSGrad kernels 8 lanes at a time over the longest
// multiple-of-8 prefix of [lo, hi) and returns where the scalar code must
// continue (lo when there is nothing to vectorise). The lanes execute the
// scalar kernels' float32 operations in their order, with the hardware FMA
// for fma32 (both correctly rounded), so each element gets the same bits
// as from torchAdamW, torchAdam or deepSpeed, NaN, Inf and subnormals
// included.
func (k *adamKernel) vector(lo, hi int) int {
	if k.amsgrad {
		return lo
	}
	// Slicing checks every buffer's length once; the blocks index within.
	p, g, m, v := k.p[lo:hi], k.g[lo:hi], k.m[lo:hi], k.v[lo:hi]
	return lo + vectorPrefix(len(p), func(i, n int) {
		switch k.mode {
		case kTorchAdamW:
			torchAdamWAVX2(&p[i], &g[i], &m[i], &v[i], n, k.decay, k.b1, k.omb1, k.b2, k.omb2, k.bc2, k.eps, k.ss)
		case kTorchAdam, kTorchAdamL2:
			torchAdamAVX2(&p[i], &g[i], &m[i], &v[i], n, k.wd, k.b1, k.omb1, k.b2, k.omb2, k.bc2, k.eps, k.ss, k.mode == kTorchAdamL2)
		case kDeepSpeed:
			deepSpeedAVX2(&p[i], &g[i], &m[i], &v[i], n, k.wd, k.b1, k.omb1, k.b2, k.omb2, k.bc2, k.eps, k.ss, k.decay, k.dsL2, k.dsDecoupled)
		default:
			panic("optim: unknown Adam kernel mode")
		}
	})
}

// torchAdamWAVX2 is torchAdamW on n elements, n a positive multiple of 8.
//
//go:noescape
func torchAdamWAVX2(p, grad, m, v *float32, n int, decay, b1, omb1, b2, omb2, bc2, eps, ss float32)

// torchAdamAVX2 is torchAdam on n elements (L2 decay when l2).
//
//go:noescape
func torchAdamAVX2(p, grad, m, v *float32, n int, wd, b1, omb1, b2, omb2, bc2, eps, ss float32, l2 bool)

// deepSpeedAVX2 is deepSpeed on n elements (dsL2 and dsDecoupled as l2 and dec).
//
//go:noescape
func deepSpeedAVX2(p, grad, m, v *float32, n int, wd, b1, omb1, b2, omb2, bc2, eps, ss, decay float32, l2, dec bool)
