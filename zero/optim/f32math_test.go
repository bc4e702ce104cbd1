package optim

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// exactFMA32 computes a*b+c exactly with big.Float and rounds it to float32.
func exactFMA32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(0).SetFloat64(float64(a))
	y := new(big.Float).SetPrec(0).SetFloat64(float64(b))
	z := new(big.Float).SetPrec(0).SetFloat64(float64(c))
	prod := new(big.Float).SetPrec(200).Mul(x, y)
	sum := new(big.Float).SetPrec(400).Add(prod, z)
	f, _ := sum.Float32()
	return f
}

func TestFMA32IsCorrectlyRounded(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	rnd := func() float32 {
		e := r.IntN(60) - 30
		if r.IntN(20) == 0 {
			e = -140 + r.IntN(30) // subnormal results
		}
		return float32(math.Ldexp(r.Float64()*2-1, e))
	}
	for i := 0; i < 200000; i++ {
		a, b, c := rnd(), rnd(), rnd()
		if got, want := fma32(a, b, c), exactFMA32(a, b, c); got != want {
			t.Fatalf("fma32(%g, %g, %g) = %g, exact %g", a, b, c, got, want)
		}
	}
	// Crafted double-rounding cases: a*b+c lands a hair off a float32
	// midpoint, so rounding through float64 first would tie.
	one := float32(1)
	ulp := math.Nextafter32(1, 2) - 1 // 2^-23
	for _, tc := range [][3]float32{
		{one + ulp, one + ulp, 0},                 // (1+2^-23)^2 = 1 + 2^-22 + 2^-46
		{one + 3*ulp, one - ulp, 0},               // 1 + 2^-22 - 3·2^-46
		{1 + ulp, float32(math.Ldexp(1, -24)), 1}, // 1 + 2^-24 + 2^-47: just above a midpoint
		{-1 - ulp, float32(math.Ldexp(1, -24)), -1},
		{float32(math.Ldexp(1, -70)), float32(math.Ldexp(1, -70)), float32(math.Ldexp(1, -149))},
		{0, 0, 0}, {1, -1, 1}, {3e38, 3e38, -3e38},
	} {
		got, want := fma32(tc[0], tc[1], tc[2]), exactFMA32(tc[0], tc[1], tc[2])
		if got != want {
			t.Errorf("fma32(%g, %g, %g) = %g, exact %g", tc[0], tc[1], tc[2], got, want)
		}
	}
	inf := float32(math.Inf(1))
	if got := fma32(inf, 1, 1); got != inf {
		t.Errorf("fma32(Inf, 1, 1) = %v", got)
	}
	if got := fma32(float32(math.NaN()), 1, 1); got == got {
		t.Errorf("fma32(NaN, 1, 1) = %v", got)
	}
	if got := fma32(inf, 0, 1); got == got {
		t.Errorf("fma32(Inf, 0, 1) = %v, want NaN", got)
	}
}

func TestPowIntMatchesBigFloat(t *testing.T) {
	for _, b := range []float64{0.9, 0.999, 0.99, 0.95, 0.8, float64(float32(0.999))} {
		for _, n := range []int64{1, 2, 3, 7, 10, 100, 1000, 4097, 100000} {
			x := new(big.Float).SetPrec(2000).SetFloat64(b)
			r := new(big.Float).SetPrec(2000).SetFloat64(1)
			for i := int64(0); i < n; i++ {
				r.Mul(r, x)
			}
			want, _ := r.Float64()
			if got := powInt(b, n); got != want {
				t.Errorf("powInt(%v, %d) = %v, exact %v", b, n, got, want)
			}
		}
	}
}

// The Adam kernels take an inlined fast path and fall back to fma32 on
// rare elements; both must give the fully exact result everywhere.
func TestAdamFastPathsEqualExactPath(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const n = 20000
	mk := func(lo, hi int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(math.Ldexp(r.Float64()*2-1, lo+r.IntN(hi-lo)))
		}
		return x
	}
	p, g, m := mk(-12, 2), mk(-60, 0), mk(-40, -2)
	v := mk(-100, -4)
	for i := range v {
		v[i] = float32(math.Abs(float64(v[i])))
	}
	for _, mode := range []adamKernelMode{kTorchAdamW, kDeepSpeed} {
		for _, wdMode := range []int{0, 1} {
			k := adamKernel{mode: mode, b1: 0.9, omb1: 1 - float32(0.9), b2: 0.999, omb2: 1 - float32(0.999),
				bc2: 0.3, eps: 1e-8, ss: -1e-3, wd: 0.01, decay: float32(1 - 1e-5)}
			if mode == kDeepSpeed {
				k.decay = -1e-5
				k.dsDecoupled, k.dsL2 = wdMode == 1, wdMode == 0
			}
			fast := adamKernel(k)
			fast.p, fast.g, fast.m, fast.v = clone(p), g, clone(m), clone(v)
			fast.Chunk(0, n)
			ex := adamKernel(k)
			ex.p, ex.g, ex.m, ex.v = clone(p), g, clone(m), clone(v)
			for i := 0; i < n; i++ {
				if mode == kDeepSpeed {
					ex.deepSpeedExact(ex.p, ex.g, ex.m, ex.v, i)
				} else {
					gi := g[i]
					mi := fma32(gi, k.omb1, float32(ex.m[i]*k.b1))
					vi := fma32(float32(k.omb2*gi), gi, float32(ex.v[i]*k.b2))
					d := sqrt32(vi)/k.bc2 + k.eps
					ex.p[i] = float32(ex.p[i]*k.decay) + float32(k.ss*mi)/d
					ex.m[i], ex.v[i] = mi, vi
				}
			}
			for _, pair := range [][2][]float32{{fast.p, ex.p}, {fast.m, ex.m}, {fast.v, ex.v}} {
				if d := firstDiff(pair[0], pair[1]); d >= 0 {
					t.Fatalf("mode %d wd %d: element %d fast %v exact %v", mode, wdMode, d, pair[0][d], pair[1][d])
				}
			}
			if mode != kDeepSpeed {
				break
			}
		}
	}
}

func clone(x []float32) []float32 { return append([]float32(nil), x...) }
