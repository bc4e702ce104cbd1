package gpt

import (
	"math"
	"testing"
)

// TestExpVec sweeps the vector exp over the arguments the cross-entropy
// gives it (shifted logits, −87.3 to 0, and past both ends), in slices of
// every length mod 8, against math.Exp: within 2 ulp where e^x is a
// normal float32, 0 below 2⁻¹²⁶ and for −Inf, NaN for NaN; and the sum
// against a float64 sum of math.Exp within 1e-6 relative (plus the
// flushed terms, each below 2⁻¹²⁶).
func TestExpVec(t *testing.T) {
	const n = 200003
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(-88 + 88.5*float64(i)/n) // up to +0.5
	}
	x[7], x[8], x[9], x[100] = float32(math.Inf(-1)), float32(math.NaN()), -1000, 0
	for _, shift := range []float32{0, 0.25} {
		for _, cut := range []int{n, n - 1, n - 5, 13, 7} {
			in := x[:cut]
			got := append([]float32(nil), in...)
			expSubScale(got, shift, 0, 1)
			worst := 0.0
			var want64 float64
			for i, v := range in {
				a := float64(v - shift)
				w := math.Exp(a)
				switch {
				case math.IsNaN(a):
					if !math.IsNaN(float64(got[i])) {
						t.Fatalf("e^NaN = %v, want NaN", got[i])
					}
					continue
				case w < 0x1p-126:
					if got[i] != 0 && ulps(got[i], w) > 2 {
						t.Fatalf("e^%v = %v, want 0 or %v", a, got[i], w)
					}
				default:
					if u := ulps(got[i], w); u > 2 {
						t.Fatalf("e^%v = %v, want %v (%.2f ulp)", a, got[i], float32(w), u)
					} else {
						worst = max(worst, u)
					}
				}
				want64 += w
			}
			sumIn := make([]float32, 0, cut)
			for _, v := range in {
				if !math.IsNaN(float64(v)) {
					sumIn = append(sumIn, v)
				}
			}
			if s := expSubSum(sumIn, shift, 0); math.Abs(s-want64) > 1e-6*want64+float64(len(sumIn))*0x1p-126 {
				t.Errorf("cut %d shift %v: Σ e^x = %v, want %v", cut, shift, s, want64)
			}
			if cut == n {
				t.Logf("shift %v: worst %.3f ulp (vector: %v)", shift, worst, haveVec())
			}
		}
	}
}
