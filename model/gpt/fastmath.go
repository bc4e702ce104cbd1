package gpt

import "math"

// The fast path's exp and tanh (Options.Fast): float32 in, float32 out,
// within 2 ulp of the correctly rounded result (TestFastMathULP sweeps
// them against math.Exp and math.Tanh), at a fraction of the cost of the
// float64 library functions the exact path calls. Both reduce the
// argument and evaluate a short polynomial in float64 — as cheap as
// float32 arithmetic in scalar Go, and with enough headroom that the one
// rounding to float32 at the end is the only error that shows.

const (
	log2e = 1.4426950408889634 // 1/ln 2
	ln2   = 0.6931471805599453

	// Beyond expfMax exp is +Inf in float32 (it is past MaxFloat32 from
	// 88.73 on), below expfMin 0 (it is below half the smallest subnormal,
	// 2⁻¹⁵⁰, from -103.98 on); between, the rounding to float32 gives
	// both ends.
	expfMax = 100
	expfMin = -110
)

// expReduced is e^r for |r| ≤ ln2/2, to about 5e-9 relative: the
// Taylor polynomial of degree 7 in Horner form.
func expReduced(r float64) float64 {
	return 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040)))))))
}

// roundMagic rounds a float64 of magnitude below 2⁵¹ to the nearest
// integer when added and subtracted again (no call to math.Floor, which is
// not inlined for GOAMD64=v1).
const roundMagic = 0x1.8p52

// exp64 is e^x for |x| ≤ 700, accurate to about 5e-9 relative:
// x = k·ln2 + r, e^x = 2^k · e^r.
func exp64(x float64) float64 {
	k := (x*log2e + roundMagic) - roundMagic
	r := x - k*ln2
	return expReduced(r) * math.Float64frombits(uint64(int64(k)+1023)<<52)
}

// fastExp is e^x in float32 (≤ 1 ulp; NaN for NaN).
func fastExp(x float32) float32 {
	switch {
	case x > expfMax:
		return float32(math.Inf(1))
	case x < expfMin:
		return 0
	}
	return float32(exp64(float64(x)))
}

// fastTanh is tanh(x) in float32 (≤ 1 ulp). Below |x| = 0.625 it is
// Cephes's odd polynomial for tanhf, x + x·z·P(z) with z = x², evaluated in
// float64; above, 1 − 2/(e^{2|x|} + 1) with the sign of x, whose
// cancellation costs float64 at most a factor 2.3; above 9.5 it rounds
// to ±1.
func fastTanh(x float32) float32 {
	xd := float64(x)
	a := math.Abs(xd)
	switch {
	case a < 0.625:
		z := xd * xd
		return float32(xd + xd*z*((((-5.70498872745e-3*z+2.06390887954e-2)*z-5.37397155531e-2)*z+1.33314422036e-1)*z-3.33332819422e-1))
	case a > 9.5:
		return float32(math.Copysign(1, xd))
	}
	t := 1 - 2/(exp64(2*a)+1)
	return float32(math.Copysign(t, xd))
}
