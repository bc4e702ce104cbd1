package llama

import (
	"math"
	"testing"

	"github.com/dszero/dszero/model"
)

// gradCases are small configurations that together switch on every
// feature: GQA and MQA, llama3 and yarn RoPE, q/k/v/o and MLP biases,
// Qwen2's q/k/v biases, Qwen3's q/k norms with head_dim ≠ H/heads, tied
// and untied heads, sliding windows (all layers, one layer), packing and
// ignored targets with a LossDenom.
func gradCases() []struct {
	name  string
	cfg   Config
	batch func() model.Batch
} {
	small := func(f Family) Config {
		return Config{Family: f, Vocab: 24, Hidden: 16, Intermediate: 24, Layers: 2, Heads: 4, KVHeads: 2, Eps: 1e-5, MaxPositions: 64}
	}
	llama := small(Llama)
	llama.AttentionBias, llama.MLPBias = true, true
	llama.Rope = Rope{Type: RopeLlama3, Theta: 10000, Factor: 4, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 16}
	qwen3 := small(Qwen3)
	qwen3.HeadDim, qwen3.Tied = 6, true
	mistral := small(Mistral)
	mistral.KVHeads, mistral.SlidingWindow = 1, 3
	mistral.Rope = Rope{Type: RopeYarn, Theta: 10000, Factor: 4}
	qwen2 := small(Qwen2)
	qwen2.SlidingWindow, qwen2.MaxWindowLayers, qwen2.Tied = 4, 1, true
	return []struct {
		name  string
		cfg   Config
		batch func() model.Batch
	}{
		{"llama biases llama3 rope", llama, func() model.Batch { return randomBatch(newRand(3), 2, 8, 24) }},
		{"qwen3 tied packed", qwen3, func() model.Batch {
			b := packedBatch(newRand(4), 8, 24, -1)
			b.LossDenom = 13
			return b
		}},
		{"mistral window yarn", mistral, func() model.Batch { return randomBatch(newRand(5), 2, 9, 24) }},
		{"qwen2 one sliding layer", qwen2, func() model.Batch { return packedBatch(newRand(6), 10, 24, -1) }},
	}
}

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
	for _, tc := range gradCases() {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg.WithDefaults()
			params := perturbedInit(cfg, 11)
			b := tc.batch()
			m, _ := newTestModel(t, cfg, Options{}, params)
			loss := step(t, m, b, 1)
			grads := m.Grads()

			ref := newRef64(cfg, params)
			l64 := ref.loss(b)
			if rel := math.Abs(float64(loss)-l64) / l64; rel > 1e-6 {
				t.Errorf("float32 loss %.9g, float64 %.12g (rel %.2e)", loss, l64, rel)
			}
			const h = 1e-5
			numeric := func(i int, u []float64) float64 {
				save := append([]float64(nil), ref.p...)
				defer copy(ref.p, save)
				at := func(sign float64) float64 {
					copy(ref.p, save)
					if u == nil {
						ref.p[i] += sign * h
					} else {
						for j, v := range u {
							ref.p[i+j] += sign * h * v
						}
					}
					return ref.loss(b)
				}
				return (at(1) - at(-1)) / (2 * h)
			}
			rng := newRand(9)
			l := m.Layout()
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
				for _, j := range []int{0, s.Numel - 1, rng.IntN(s.Numel), rng.IntN(s.Numel)} {
					num := numeric(s.Offset+j, nil)
					if d := math.Abs(float64(g[j]) - num); d > 2e-4*math.Abs(num)+2e-4*gmax {
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
		})
	}
}
