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

// TestTanhVec sweeps the vector tanh (TANH8, the GELU's) over
// [−12, 12] and the specials against math.Tanh: within 2 ulp (±0 and ±1
// exact at the ends, NaN for NaN).
func TestTanhVec(t *testing.T) {
	const n = 400009
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(-12 + 24*float64(i)/n)
	}
	x[3], x[4], x[5], x[6] = float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1))
	x[11], x[12], x[13] = 1e-30, -3e-8, 0.625
	got := make([]float32, n)
	for _, cut := range []int{n, n - 3, 7} {
		tanhRange(got[:cut], x[:cut])
		worst := 0.0
		for i, v := range x[:cut] {
			w := math.Tanh(float64(v))
			if u := ulps(got[i], w); u > 2 {
				t.Fatalf("tanh(%v) = %v, want %v (%.2f ulp)", v, got[i], float32(w), u)
			} else {
				worst = max(worst, u)
			}
		}
		if cut == n {
			t.Logf("worst %.3f ulp (vector: %v)", worst, haveVec())
		}
	}
	tanhRange(got[:8], []float32{float32(math.NaN()), 1, 2, 3, 4, 5, 6, 7})
	if !math.IsNaN(float64(got[0])) {
		t.Errorf("tanh(NaN) = %v", got[0])
	}
}

// TestGeluVec: the vector GELU and its backward agree with the float64
// formulas (the exact path's) over [−10, 10] within what float32 tanh
// allows: |error| ≤ 2⁻²¹·(|x| + |result|), for dout = 1 and a random one.
func TestGeluVec(t *testing.T) {
	const n = 200011
	x, dout := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(-10 + 20*float64(i)/n)
		dout[i] = float32(1 + math.Sin(float64(i)))
	}
	gelu64 := func(x float64) float64 { return 0.5 * x * (1 + math.Tanh(geluBeta*(x+geluKappa*x*x*x))) }
	geluBack64 := func(d, x float64) float64 {
		th := math.Tanh(geluBeta * (x + geluKappa*x*x*x))
		return d * (0.5*(1+th) + 0.5*x*(1-th*th)*geluBeta*(1+3*geluKappa*x*x))
	}
	out, din := make([]float32, n), make([]float32, n)
	for _, cut := range []int{n, n - 5, 9} {
		geluRange(out[:cut], x[:cut])
		geluBackRange(din[:cut], x[:cut], dout[:cut])
		for i, v := range x[:cut] {
			xv := float64(v)
			if w := gelu64(xv); math.Abs(float64(out[i])-w) > 0x1p-21*(math.Abs(xv)+math.Abs(w)) {
				t.Fatalf("gelu(%v) = %v, want %v", v, out[i], w)
			}
			if w := geluBack64(float64(dout[i]), xv); math.Abs(float64(din[i])-w) > 0x1p-21*(math.Abs(xv)+1)*math.Abs(float64(dout[i]))+0x1p-21*math.Abs(w) {
				t.Fatalf("gelu'(%v)·%v = %v, want %v", v, dout[i], din[i], w)
			}
		}
	}
	// In place, as the model calls them.
	y := append([]float32(nil), x...)
	geluRange(y, y)
	geluRange(out, x)
	if first, zeros := sameBitsOrZeros(y, out); first >= 0 || zeros > 0 {
		t.Errorf("geluRange in place differs (first at %d, %d signed zeros)", first, zeros)
	}
	d := append([]float32(nil), dout...)
	geluBackRange(d, x, d)
	geluBackRange(din, x, dout)
	if first, zeros := sameBitsOrZeros(d, din); first >= 0 || zeros > 0 {
		t.Errorf("geluBackRange in place differs (first at %d, %d signed zeros)", first, zeros)
	}
}
