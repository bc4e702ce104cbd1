package llama

import (
	"fmt"
	"testing"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/half"
)

// BenchmarkStep times one Forward+Backward (a micro-step, after
// OverwriteGrads as the first of a training step) of the smollm2-135m
// shape and of tiny-llama, with package blas's Auto engine (OpenBLAS when
// it loads, the benchmark log says which), and reports tokens/s of wall
// time and tokens per CPU-second (all threads; robust on a shared
// machine). workers=1 runs the attention's GEMMs one at a time, each on
// all of the engine's threads, against the default of one per worker at
// once. Run with e.g.
//
//	go test ./model/llama -run '^$' -bench 'Step/smollm2' -benchtime 2x
func BenchmarkStep(b *testing.B) {
	for _, bc := range []struct {
		preset  string
		B, T    int
		bf16    bool
		ckpt    bool
		workers int
	}{
		{"smollm2-135m", 1, 256, false, false, 0},
		{"smollm2-135m", 1, 256, false, false, 1},
		{"smollm2-135m", 1, 256, false, true, 0},
		{"tiny-llama", 4, 128, false, false, 0},
		{"tiny-llama", 4, 128, true, false, 0},
	} {
		name := fmt.Sprintf("%s/B=%d/T=%d", bc.preset, bc.B, bc.T)
		if bc.bf16 {
			name += "/bf16"
		}
		if bc.ckpt {
			name += "/checkpoint"
		}
		if bc.workers > 0 {
			name += fmt.Sprintf("/workers=%d", bc.workers)
		}
		b.Run(name, func(b *testing.B) {
			cfg, err := Preset(bc.preset)
			if err != nil {
				b.Fatal(err)
			}
			e, err := blas.New(blas.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Log(e.Description())
			l := cfg.Layout()
			params := make([]float32, l.Numel)
			cfg.InitRange(&l, 1, params, 0)
			opt := Options{Gemm: e, Checkpoint: bc.ckpt, Workers: bc.workers}
			if bc.bf16 {
				opt.Round = half.RoundBF16
				half.RoundBF16(params)
			}
			m, _ := newTestModel(b, cfg, opt, params)
			batch := randomBatch(newRand(1), bc.B, bc.T, cfg.Vocab)
			step(b, m, batch, 1) // warm-up: allocates the activations
			cpu0 := cpuTime()
			b.ResetTimer()
			for b.Loop() {
				m.OverwriteGrads()
				step(b, m, batch, 1)
			}
			n := float64(bc.B*bc.T) * float64(b.N)
			b.ReportMetric(n/b.Elapsed().Seconds(), "tokens/s")
			if cpu := (cpuTime() - cpu0).Seconds(); cpu > 0 {
				b.ReportMetric(n/cpu, "tokens/cpu-s")
			}
		})
	}
}
