package optim

import (
	"testing"
	"time"
)

// triadKernel is the STREAM triad a[i] = b[i] + s*c[i].
type triadKernel struct {
	a, b, c []float32
	s       float32
}

func (k *triadKernel) Chunk(lo, hi int) {
	a, b, c := k.a[lo:hi], k.b[lo:hi], k.c[lo:hi]
	b, c = b[:len(a)], c[:len(a)]
	s := k.s
	for i := range a {
		a[i] = b[i] + float32(s*c[i])
	}
}

// BenchmarkAdamWBandwidth measures, in one run, a STREAM-like triad and the
// torch-exact AdamW step over the same number of elements with the same
// pool split, and reports the bytes each moves per second and their ratio.
// AdamW moves 7 float32 per element (reads p, g, m, v; writes p, m, v), the
// triad 3 (reads b, c; writes a).
func BenchmarkAdamWBandwidth(b *testing.B) {
	const n = 16 << 20 // 16 Mi float32 = 64 MiB of parameters
	pool := NewPool(0)
	defer pool.Close()
	o, err := NewAdam(DefaultAdamConfig(TorchAdamW), n, testAlloc(), pool)
	if err != nil {
		b.Fatal(err)
	}
	p, g := make([]float32, n), make([]float32, n)
	for i := range p {
		p[i] = float32(i%1000) * 1e-3
		g[i] = float32(i%777)*1e-4 - 0.03
	}
	tk := &triadKernel{a: make([]float32, n), b: p, c: g, s: 0.5}
	pool.Run(n, tk) // touch every page once
	o.Step(p, g)
	var tTriad, tAdam time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		pool.Run(n, tk)
		t1 := time.Now()
		o.Step(p, g)
		tAdam += time.Since(t1)
		tTriad += t1.Sub(t0)
	}
	b.StopTimer()
	triad := float64(3*4*n) * float64(b.N) / tTriad.Seconds()
	adam := float64(7*4*n) * float64(b.N) / tAdam.Seconds()
	b.ReportMetric(triad/1e9, "triad_GB/s")
	b.ReportMetric(adam/1e9, "adamw_GB/s")
	b.ReportMetric(adam/triad, "adamw/triad")
	b.ReportMetric(float64(pool.Workers()), "workers")
}

// BenchmarkStepInCache is the per-element compute cost of each update on
// one goroutine with a cache-resident partition (32 Ki elements).
func BenchmarkStepInCache(b *testing.B) {
	const n = 1 << 15
	p, g := make([]float32, n), make([]float32, n)
	for i := range p {
		p[i] = float32(i%1000) * 1e-3
		g[i] = float32(i%777)*1e-4 - 0.03
	}
	mk := map[string]func() Optimizer{
		"TorchAdamW":    func() Optimizer { o, _ := NewAdam(DefaultAdamConfig(TorchAdamW), n, testAlloc(), nil); return o },
		"TorchAdam":     func() Optimizer { o, _ := NewAdam(DefaultAdamConfig(TorchAdam), n, testAlloc(), nil); return o },
		"DeepSpeedAdam": func() Optimizer { o, _ := NewAdam(DefaultAdamConfig(DeepSpeedAdam), n, testAlloc(), nil); return o },
		"SGDMomentum":   func() Optimizer { o, _ := NewSGD(SGDConfig{LR: 0.1, Momentum: 0.9}, n, testAlloc(), nil); return o },
		"Lamb": func() Optimizer {
			o, _ := NewLamb(DefaultLambConfig(), n, []Segment{{0, 0, n}}, nil, testAlloc(), nil)
			return o
		},
	}
	for _, name := range []string{"TorchAdamW", "TorchAdam", "DeepSpeedAdam", "SGDMomentum", "Lamb"} {
		b.Run(name, func(b *testing.B) {
			o := mk[name]()
			b.SetBytes(4 * n)
			for i := 0; i < b.N; i++ {
				o.Step(p, g)
			}
		})
	}
}
