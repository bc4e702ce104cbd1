package gpt

import (
	"math"
	"testing"
)

// ulps is how many float32 ulps got is from the exact value want (a
// float64): the distance over the spacing of float32 at want (2⁻¹⁴⁹ among
// the subnormals). Equal infinities are 0 apart, any other mismatch with
// an infinity or a NaN is +Inf.
func ulps(got float32, want float64) float64 {
	g := float64(got)
	switch {
	case math.IsNaN(want) || math.IsNaN(g):
		if math.IsNaN(want) && math.IsNaN(g) {
			return 0
		}
		return math.Inf(1)
	case math.Abs(want) > math.MaxFloat32:
		// Correct rounding gives ±Inf past MaxFloat32 plus half an ulp.
		if math.IsInf(g, 0) && math.Signbit(g) == math.Signbit(want) {
			return 0
		}
		return math.Abs(g-want) / math.Pow(2, 104)
	case math.IsInf(g, 0):
		return math.Inf(1)
	}
	w32 := float32(want)
	spacing := float64(math.Nextafter32(float32(math.Abs(float64(w32))), math.MaxFloat32)) - math.Abs(float64(w32))
	spacing = max(spacing, 0x1p-149)
	return math.Abs(g-want) / spacing
}

// TestFastMathULP sweeps fastExp and fastTanh over a dense set of float32
// arguments — every 61st bit pattern, positive and negative, over each
// function's whole interesting range, and a few specials — against
// math.Exp and math.Tanh in float64: both stay within 2 ulp (they are
// meant to round once, so the worst seen is logged; it should be ≤ 1).
func TestFastMathULP(t *testing.T) {
	for _, tc := range []struct {
		name   string
		f      func(float32) float32
		exact  func(float64) float64
		lo, hi float32 // |x| swept
	}{
		{"fastExp", fastExp, math.Exp, 0x1p-30, 110},
		{"fastTanh", fastTanh, math.Tanh, 0x1p-30, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			worst, worstAt, n := 0.0, float32(0), 0
			check := func(x float32) {
				n++
				if u := ulps(tc.f(x), tc.exact(float64(x))); u > worst {
					worst, worstAt = u, x
				}
			}
			for bits := math.Float32bits(tc.lo); bits <= math.Float32bits(tc.hi); bits += 61 {
				x := math.Float32frombits(bits)
				check(x)
				check(-x)
			}
			for _, x := range []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32, 0x1p-149} {
				check(x)
			}
			t.Logf("%d arguments: worst %.3f ulp at %v", n, worst, worstAt)
			if worst > 2 {
				t.Errorf("%s(%v) is %.3f ulp from the exact value, want ≤ 2", tc.name, worstAt, worst)
			}
		})
	}
}
