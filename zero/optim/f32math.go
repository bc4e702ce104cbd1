package optim

import "math"

// This file holds the scalar float32 arithmetic the kernels are built from.
// Go evaluates float32 expressions in float32, but it may fuse x*y+z into
// one FMA on some architectures; every product that must be rounded on its
// own is therefore wrapped in an explicit float32() conversion, which the
// language spec guarantees to round. Fused operations are spelled fma32.

// fma32 returns a*b+c rounded once to float32, as the FMA instruction that
// PyTorch's and DeepSpeed's AVX2 kernels use does.
//
// The product of two float32 values is exact in float64, so math.FMA gives
// the exact sum rounded once to float64. Rounding that to float32 (a second
// rounding) is wrong only when the float64 result lies exactly halfway
// between two float32 values while the exact sum does not; then the sign of
// the float64 rounding error decides the direction.
func fma32(a, b, c float32) float32 {
	s := fmaD(a, b, c)
	if roundsLikeExact(s) {
		return float32(s)
	}
	return fma32Slow(a, b, c, s)
}

// fmaD is a*b+c rounded once to float64: the product of two float32
// values is exact in float64, so one float64 addition rounds the exact sum
// (the same value math.FMA returns, without its call on CPUs lacking FMA).
func fmaD(a, b, c float32) float64 {
	return float64(float64(a)*float64(b)) + float64(c)
}

// roundsLikeExact reports whether float32(s) is the correctly rounded
// float32 of the exact value s was rounded from. In the normal float32
// range (|s| ≥ 2^-126: biased float64 exponent ≥ 0x381) the float32
// midpoints are the float64 values whose low 29 significand bits are
// exactly 1<<28; any other s rounds like the exact value, and so does a
// zero. Hot loops inline
// this test and call fma32Slow on the rare miss.
func roundsLikeExact(s float64) bool {
	bits := math.Float64bits(s)
	// A zero sum of two float64 values is exact (its sign too), so zeros
	// (the gradients of unused embedding rows) stay on the fast path.
	return bits&(1<<29-1) != 1<<28 && bits&(0x7FF<<52) >= 0x381<<52 || bits<<1 == 0
}

// fma32Slow handles midpoints, float32 subnormals, zeros, Inf and NaN.
func fma32Slow(a, b, c float32, s float64) float32 {
	r := float32(s)
	if float64(r) == s || s != s || math.IsInf(float64(r), 0) {
		return r
	}
	// r is the float32 nearest to s; o is the float32 on the other side of s.
	o := math.Nextafter32(r, float32(math.Copysign(math.Inf(1), s-float64(r))))
	if (float64(r)+float64(o))/2 != s {
		return r // not a tie: both roundings agree
	}
	// s is a float32 midpoint. Recover the float64 rounding error of a*b+c
	// (a*b is exact in float64; TwoSum gives the error of the addition).
	p := float64(float64(a) * float64(b))
	cc := float64(c)
	bb := s - p
	err := (p - (s - bb)) + (cc - bb)
	if err == 0 {
		return r // a true tie: float32(s) already rounded it to even
	}
	lower, upper := r, o
	if o < r {
		lower, upper = o, r
	}
	if err > 0 {
		return upper
	}
	return lower
}

// sqrt32 is the correctly rounded float32 square root (sqrtps/sqrtss):
// the float64 root of a float32 rounds to the right float32.
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// powInt returns b**n for an integer n ≥ 0 rounded from a double-double
// product, i.e. correctly rounded in all but astronomically rare cases. It
// stands in for C's pow(), which Python's float ** float calls and which
// glibc computes to within 0.52 ulp; math.Pow is less accurate.
func powInt(b float64, n int64) float64 {
	if n < 0 {
		panic("optim: negative exponent")
	}
	hi, lo := 1.0, 0.0 // result
	bh, bl := b, 0.0   // running square
	for n > 0 {
		if n&1 == 1 {
			hi, lo = ddMul(hi, lo, bh, bl)
		}
		n >>= 1
		if n > 0 {
			bh, bl = ddMul(bh, bl, bh, bl)
		}
	}
	return hi + lo
}

// ddMul multiplies two double-double numbers.
func ddMul(ah, al, bh, bl float64) (float64, float64) {
	p := ah * bh
	e := math.FMA(ah, bh, -p)
	e += float64(ah*bl) + float64(al*bh)
	h := p + e
	return h, e - (h - p)
}
