package optim

import (
	"math"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// lambRef is FusedLamb's formula in float64, one parameter at a time.
func lambRef(p, g, m, v []float64, step int, lr, b1, b2, eps, wd, maxC, minC float64) float64 {
	u := make([]float64, len(p))
	var w2, u2 float64
	for i := range p {
		m[i] = b1*m[i] + (1-b1)*g[i]
		v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
		u[i] = m[i]/(math.Sqrt(v[i])+eps) + wd*p[i]
		w2 += p[i] * p[i]
		u2 += u[i] * u[i]
	}
	coeff := 1.0
	if w2 != 0 && u2 != 0 {
		coeff = math.Min(maxC, math.Max(minC, math.Sqrt(w2)/math.Sqrt(u2)))
	}
	ss := lr * math.Sqrt(1-math.Pow(b2, float64(step))) / (1 - math.Pow(b1, float64(step)))
	for i := range p {
		p[i] -= ss * coeff * u[i]
	}
	return coeff
}

func lambInputs(n, steps int) (p0 []float32, grads [][]float32) {
	p0 = make([]float32, n)
	for i := range p0 {
		p0[i] = float32(math.Sin(float64(i)*1.3) * 0.1)
	}
	grads = make([][]float32, steps)
	for s := range grads {
		grads[s] = make([]float32, n)
		for i := range grads[s] {
			grads[s][i] = float32(math.Cos(float64(i+7*s)*0.7) * 0.01)
		}
	}
	return p0, grads
}

func TestLambPerParameterTrustRatioMatchesFormula(t *testing.T) {
	segs := []Segment{{0, 0, 50}, {1, 50, 5000}, {2, 5050, 7}} // a multi-block middle segment
	n := 5057
	cfg := DefaultLambConfig()
	cfg.WeightDecay = 0.01
	cfg.LR = 0.01
	pool := NewPool(2)
	defer pool.Close()
	o, err := NewLamb(cfg, n, segs, nil, testAlloc(), pool)
	if err != nil {
		t.Fatal(err)
	}
	p0, grads := lambInputs(n, 4)
	p := append([]float32(nil), p0...)
	ref := make([]float64, n)
	m, v := make([]float64, n), make([]float64, n)
	for i := range p {
		ref[i] = float64(p[i])
	}
	for s, g := range grads {
		o.Step(p, g)
		for si, seg := range segs {
			g64 := make([]float64, seg.Len)
			for i := range g64 {
				g64[i] = float64(g[seg.Start+i])
			}
			r := seg.Start
			e := r + seg.Len
			coeff := lambRef(ref[r:e], g64, m[r:e], v[r:e], s+1, cfg.LR, 0.9, 0.999, 1e-8, 0.01, 10, 0.01)
			if math.Abs(float64(o.Coeffs()[si])-coeff) > 1e-5*coeff {
				t.Errorf("step %d segment %d: coeff %v, formula %v", s+1, si, o.Coeffs()[si], coeff)
			}
		}
	}
	got := make([]float64, n)
	for i := range p {
		got[i] = float64(p[i])
	}
	if d := cmp.Diff(ref, got, cmpopts.EquateApprox(0, 1e-6)); d != "" {
		t.Errorf("params differ from the float64 formula (-ref +got):\n%s", d)
	}
}

// A parameter split across two ranks' partitions gets the same trust
// ratio as the whole parameter once the reducer sums the partial norms.
func TestLambSplitParameterUsesWholeNorm(t *testing.T) {
	const n = 600
	cfg := DefaultLambConfig()
	cfg.LR = 0.02
	p0, grads := lambInputs(n, 3)

	whole, err := NewLamb(cfg, n, []Segment{{0, 0, 200}, {1, 200, 400}}, nil, testAlloc(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pw := append([]float32(nil), p0...)
	for _, g := range grads {
		whole.Step(pw, g)
	}

	// Rank 0 holds [0, 300): param 0 and the first 100 of param 1; rank 1
	// holds the other 300 of param 1.
	var mu sync.Mutex
	var bar sync.WaitGroup
	shared := make([]float64, 4)
	arrived := 0
	reducer := func(rank int) NormReducer {
		return func(partials []float64) {
			// In the rank's layout: segment order is its own; map to params.
			mu.Lock()
			if rank == 0 {
				shared[0] += partials[0]
				shared[1] += partials[1]
				shared[2] += partials[2]
				shared[3] += partials[3]
			} else {
				shared[2] += partials[0]
				shared[3] += partials[1]
			}
			arrived++
			if arrived == 2 {
				bar.Done()
			}
			mu.Unlock()
			bar.Wait()
			if rank == 0 {
				copy(partials, shared)
			} else {
				partials[0], partials[1] = shared[2], shared[3]
			}
		}
	}
	r0, err := NewLamb(cfg, 300, []Segment{{0, 0, 200}, {1, 200, 100}}, reducer(0), testAlloc(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := NewLamb(cfg, 300, []Segment{{1, 0, 300}}, reducer(1), testAlloc(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ps := append([]float32(nil), p0...)
	for _, g := range grads {
		for i := range shared {
			shared[i] = 0
		}
		arrived = 0
		bar.Add(1)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); r0.Step(ps[:300], g[:300]) }()
		go func() { defer wg.Done(); r1.Step(ps[300:], g[300:]) }()
		wg.Wait()
	}
	if d := cmp.Diff(pw, ps, cmpopts.EquateApprox(0, 1e-7)); d != "" {
		t.Errorf("split parameter differs from whole (-whole +split):\n%s", d)
	}
	if r1.Coeffs()[0] != r0.Coeffs()[1] {
		t.Errorf("ranks disagree on the split parameter's trust ratio: %v vs %v", r0.Coeffs()[1], r1.Coeffs()[0])
	}
}

func TestLambTrustRatioClampsByHand(t *testing.T) {
	for _, tc := range []struct {
		name string
		p, g float32
		want float32
	}{
		{"zero weights keep ratio 1", 0, 1, 1},
		{"huge weights clamp to max_coeff", 1e6, 1, 10},
		{"tiny weights clamp to min_coeff", 1e-6, 1, 0.01},
		// ‖w‖ = 0.5; the first update is m/(sqrt(v)+eps) = (1-b1)/(sqrt(1-b2)+eps) ≈ 0.1/0.0316,
		// with the betas as the float32 the kernel receives.
		{"in range", 0.5, 1, float32(0.5 / (float64(1-float32(0.9)) / (math.Sqrt(float64(1-float32(0.999))) + 1e-8)))},
	} {
		o, err := NewLamb(DefaultLambConfig(), 1, []Segment{{0, 0, 1}}, nil, testAlloc(), nil)
		if err != nil {
			t.Fatal(err)
		}
		o.Step([]float32{tc.p}, []float32{tc.g})
		if got := o.Coeffs()[0]; math.Abs(float64(got-tc.want)) > 1e-6*float64(tc.want) {
			t.Errorf("%s: coeff %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestLambRejectsBadSegments(t *testing.T) {
	for _, segs := range [][]Segment{{{0, 0, 5}}, {{0, 1, 10}}, {{0, 0, 4}, {1, 5, 5}}} {
		if _, err := NewLamb(DefaultLambConfig(), 10, segs, nil, testAlloc(), nil); err == nil {
			t.Errorf("segments %v accepted", segs)
		}
	}
	cfg := DefaultLambConfig()
	cfg.AMSGrad = true
	if _, err := NewLamb(cfg, 1, []Segment{{0, 0, 1}}, nil, testAlloc(), nil); err == nil {
		t.Error("amsgrad accepted")
	}
}
