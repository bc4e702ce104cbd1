package gpt

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dszero/dszero/model"
)

// TestGradientCheck compares the float32 analytic gradients with central
// differences of the independent float64 forward (ref64), two ways:
//
//   - element-wise on a sample of every tensor (first, last and random
//     elements), relative 2e-4 with an absolute floor of 2e-4 of the
//     tensor's largest gradient;
//   - a random directional derivative per tensor, which involves every
//     element: Σ g·u against (L(θ+hu) − L(θ−hu))/2h, relative 2e-4.
//
// It also checks the float32 loss against the float64 loss.
func TestGradientCheck(t *testing.T) {
	tiny, _ := Preset("tiny")
	cases := []struct {
		name string
		cfg  Config
		B, T int
	}{
		{"tiny untied", tiny, 2, 16},
		{"tied, odd MLP width", Config{Vocab: 29, Context: 12, Dim: 24, Heads: 3, Layers: 2, MLP: 40, Tied: true}, 3, 12},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { gradientCheck(t, tc.cfg, tc.B, tc.T, Options{}, nil) })
	}
}

// gradientCheck is TestGradientCheck's comparison for one model of cfg
// built with opt (setup, if set, adjusts it before the pass).
func gradientCheck(t *testing.T, cfg Config, B, T int, opt Options, setup func(*Model)) {
	t.Helper()
	cfg = cfg.WithDefaults()
	params := perturbedInit(cfg, 11)
	rng := rand.New(rand.NewPCG(3, 4))
	tokens := randomTokens(rng, B*T, cfg.Vocab)
	targets := randomTokens(rng, B*T, cfg.Vocab)

	m, _ := newTestModel(t, cfg, opt, params)
	if setup != nil {
		setup(m)
	}
	loss, err := m.Forward(model.Batch{Tokens: tokens, B: B, Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(1); err != nil {
		t.Fatal(err)
	}
	grads := m.Grads()

	ref := newRef64(cfg, params)
	l64 := ref.loss(tokens, targets, B)
	if rel := math.Abs(float64(loss)-l64) / l64; rel > 1e-6 {
		t.Errorf("float32 loss %.9g, float64 %.12g (rel %.2e)", loss, l64, rel)
	}
	const h = 1e-4
	numeric := func(i int, u []float64) float64 {
		// derivative along u (or along element i if u is nil)
		save := append([]float64(nil), ref.p...)
		defer copy(ref.p, save)
		step := func(sign float64) float64 {
			copy(ref.p, save)
			if u == nil {
				ref.p[i] += sign * h
			} else {
				for j, v := range u {
					ref.p[i+j] += sign * h * v
				}
			}
			return ref.loss(tokens, targets, B)
		}
		return (step(1) - step(-1)) / (2 * h)
	}
	l := m.Layout()
	worst := 0.0
	for si, s := range l.Specs {
		g := l.View(grads, si)
		gmax := 0.0
		for _, v := range g {
			gmax = max(gmax, math.Abs(float64(v)))
		}
		if gmax == 0 {
			t.Errorf("%s: gradient is all zero", s.Name)
			continue
		}
		idx := []int{0, s.Numel - 1, rng.IntN(s.Numel), rng.IntN(s.Numel)}
		for _, j := range idx {
			num := numeric(s.Offset+j, nil)
			d := math.Abs(float64(g[j]) - num)
			worst = max(worst, d/(2e-4*math.Abs(num)+2e-4*gmax))
			if d > 2e-4*math.Abs(num)+2e-4*gmax {
				t.Errorf("%s[%d]: analytic %.6g, numeric %.6g", s.Name, j, g[j], num)
			}
		}
		u := make([]float64, s.Numel)
		dot := 0.0
		for j := range u {
			u[j] = rng.NormFloat64()
			dot += float64(g[j]) * u[j]
		}
		num := numeric(s.Offset, u)
		if d := math.Abs(dot - num); d > 2e-4*math.Abs(num) {
			t.Errorf("%s: directional derivative analytic %.6g, numeric %.6g (rel %.2e)", s.Name, dot, num, d/math.Abs(num))
		}
	}
	t.Logf("worst element-wise error: %.6g of the tolerance", worst)
}
