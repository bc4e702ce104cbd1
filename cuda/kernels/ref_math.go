package kernels

import "math"

// fma32 is fmaf: a·b + c rounded once to float32. The product of two
// float32 values is exact in float64; the float64 sum s is rounded, and
// rounding s to float32 again is correct except when s lands exactly on a
// float32 midpoint, where the exact error of the addition decides.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	s := p + float64(c)
	r := float32(s)
	if float64(r) == s || s != s || math.IsInf(s, 0) || math.IsInf(float64(r), 0) {
		return r
	}
	up := float32(math.Inf(1))
	if float64(r) > s {
		up = float32(math.Inf(-1))
	}
	o := math.Nextafter32(r, up) // the float32 on the other side of s
	if (float64(r)+float64(o))/2 != s {
		return r // not a midpoint: the double rounding was harmless
	}
	// TwoSum: the exact p + c is s + e.
	bv := s - p
	e := (p - (s - bv)) + (float64(c) - bv)
	switch {
	case e == 0:
		return r // an exact tie: float32(s) already rounded it to even
	case (e > 0) == (float64(o) > float64(r)):
		return o
	}
	return r
}

// sqrt32 is sqrtf, correctly rounded (float64's sqrt rounded to float32
// is the correctly rounded float32 square root).
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// expf, logf and tanhf stand in for CUDA's: the float64 functions rounded
// to float32, which CUDA's are within two ulps of.
func expf(x float32) float32  { return float32(math.Exp(float64(x))) }
func logf(x float32) float32  { return float32(math.Log(float64(x))) }
func tanhf(x float32) float32 { return float32(math.Tanh(float64(x))) }

// blockSum64 folds per-thread values as block_sum does: s[t] += s[t+h] for
// h = B/2, …, 1. It overwrites acc.
func blockSum64(acc []float64) float64 {
	for h := len(acc) / 2; h > 0; h /= 2 {
		for t := range h {
			acc[t] = acc[t] + acc[t+h]
		}
	}
	return acc[0]
}

func blockSum32(acc []float32) float32 {
	for h := len(acc) / 2; h > 0; h /= 2 {
		for t := range h {
			acc[t] = acc[t] + acc[t+h]
		}
	}
	return acc[0]
}

// blockMax32 folds with (a > b ? a : b), as block_max does.
func blockMax32(acc []float32) float32 {
	for h := len(acc) / 2; h > 0; h /= 2 {
		for t := range h {
			if a, b := acc[t], acc[t+h]; !(a > b) {
				acc[t] = b
			}
		}
	}
	return acc[0]
}

// blockThreads is the launch's block width, which the reductions require
// to be a power of two.
func (c *call) blockThreads() int {
	b := c.threads()
	if b&(b-1) != 0 || c.block.Y != 1 || c.block.Z != 1 {
		c.fail(ErrBadLaunch, "block %v: reductions need a one-dimensional power-of-two block", c.block)
	}
	return b
}
