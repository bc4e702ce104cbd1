package gpt

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
)

// BenchmarkGPTStep times one Forward+Backward (a micro-step) with the gonum
// Gemmer, as the first micro-step of a training step (after
// OverwriteGrads), and reports tokens/s of wall time and tokens per
// CPU-second (all threads; robust on a shared machine). The bf16 cases
// run torch's bf16 kernels (bf16.go). Run with e.g.
//
//	go test ./model/gpt -run '^$' -bench GPTStep/small -benchtime 3x
func BenchmarkGPTStep(b *testing.B) {
	for _, bc := range []struct {
		preset string
		T      int
		bf16   bool
	}{{"small", 128, false}, {"gpt2", 64, false}, {"small", 128, true}} {
		for _, B := range []int{1, 2, 4} {
			name := fmt.Sprintf("%s/B=%d/T=%d", bc.preset, B, bc.T)
			if bc.bf16 {
				name = fmt.Sprintf("%s-bf16/B=%d/T=%d", bc.preset, B, bc.T)
			}
			b.Run(name, func(b *testing.B) {
				cfg, params, tokens, targets := benchInput(b, bc.preset, B*bc.T)
				var opt Options
				if bc.bf16 {
					opt.DType = device.BF16
					half.RoundBF16(params)
				}
				m, _ := newTestModel(b, cfg, opt, params)
				step(b, m, tokens, targets, B, 1) // warm-up: allocates the activations
				cpu0 := cpuTime()
				b.ResetTimer()
				for b.Loop() {
					m.OverwriteGrads()
					step(b, m, tokens, targets, B, 1)
				}
				n := float64(B*bc.T) * float64(b.N)
				b.ReportMetric(n/b.Elapsed().Seconds(), "tokens/s")
				if cpu := (cpuTime() - cpu0).Seconds(); cpu > 0 {
					b.ReportMetric(n/cpu, "tokens/cpu-s")
				}
			})
		}
	}
}

// benchInput is what the step benchmarks share: preset's config, its
// initial weights (Layout.InitRange, seed 1) and n random tokens and
// targets.
func benchInput(b *testing.B, preset string, n int) (cfg Config, params []float32, tokens, targets []int32) {
	b.Helper()
	cfg, err := Preset(preset)
	if err != nil {
		b.Fatal(err)
	}
	l := cfg.Layout()
	params = make([]float32, l.Numel)
	l.InitRange(1, params, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	return cfg, params, randomTokens(rng, n, cfg.Vocab), randomTokens(rng, n, cfg.Vocab)
}
