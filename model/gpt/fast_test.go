package gpt

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/model"
)

// adamW is a plain AdamW step (β 0.9/0.999, eps 1e-8, weight decay 0.01)
// on params with state m, v, at step t (1-based).
func adamW(params, grads, m, v []float32, t int, lr float64) {
	const b1, b2, eps, wd = 0.9, 0.999, 1e-8, 0.01
	c1, c2 := 1-math.Pow(b1, float64(t)), 1-math.Pow(b2, float64(t))
	for i, g := range grads {
		gf := float64(g)
		m[i] = float32(b1*float64(m[i]) + (1-b1)*gf)
		v[i] = float32(b2*float64(v[i]) + (1-b2)*gf*gf)
		p := float64(params[i]) * (1 - lr*wd)
		params[i] = float32(p - lr*(float64(m[i])/c1)/(math.Sqrt(float64(v[i])/c2)+eps))
	}
}

// trainLosses trains a model built with opt for steps AdamW steps on the
// harness batches (B 4, T 32, one micro-batch a step) from the harness's
// initial weights, and returns the loss of each step and the final
// float32 master weights. With a 16-bit DType it trains as DeepSpeed's
// BF16_Optimizer and FP16_Optimizer do: AdamW on the float32 masters, the
// model's bound parameters the masters rounded to the DType after each
// step. block > 0 sets the fast path's attention row block.
func trainLosses(t *testing.T, opt Options, block, steps int) ([]float32, []float32) {
	t.Helper()
	cfg, init := harnessTiny(t)
	master := append([]float32(nil), init...)
	round := opt.DType.Rounding()
	if round == nil { // F32
		round = func([]float32) {}
	}
	round(init)
	m, _ := newTestModel(t, cfg, opt, init)
	if block > 0 {
		m.attnBlock = block
	}
	tok := harnessTokens(t)
	n := m.NumParams()
	mo, vo := make([]float32, n), make([]float32, n)
	var losses []float32
	for s := range steps {
		idx, tgt := microBatch(tok, s, 0, 0)
		m.OverwriteGrads()
		losses = append(losses, step(t, m, idx, tgt, 4, 1))
		adamW(master, m.Grads(), mo, vo, s+1, 1e-3)
		copy(m.Params(), master)
		round(m.Params())
	}
	return losses, master
}

// TestFastMatchesExact: ten AdamW steps of the harness model on the fast
// path stay within 1e-5 relative of the exact path's losses at every
// step — with attention in one block, in causal blocks of 8 rows, and
// with activation checkpointing.
func TestFastMatchesExact(t *testing.T) {
	const steps = 10
	exact, _ := trainLosses(t, Options{}, 0, steps)
	for _, tc := range []struct {
		name  string
		opt   Options
		block int
	}{
		{"one block", Options{Fast: true}, 0},
		{"blocks of 8", Options{Fast: true, Workers: 3}, 8},
		{"blocks of 8, checkpointed", Options{Fast: true, Checkpoint: true}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fast, _ := trainLosses(t, tc.opt, tc.block, steps)
			worst := 0.0
			for s := range steps {
				rel := math.Abs(float64(fast[s])-float64(exact[s])) / math.Abs(float64(exact[s]))
				worst = max(worst, rel)
				if rel > 1e-5 {
					t.Errorf("step %d: fast loss %.8g, exact %.8g (rel %.2e), want within 1e-5", s+1, fast[s], exact[s], rel)
				}
			}
			if exact[steps-1] >= exact[0] {
				t.Errorf("the loss did not fall over %d steps (%v → %v): the comparison proves little", steps, exact[0], exact[steps-1])
			}
			t.Logf("losses %v … %v; worst relative difference %.2e", fast[0], fast[steps-1], worst)
		})
	}
}

// TestFastGradients checks the fast path's gradients against central
// differences of the float64 reference (TestGradientCheck's comparison)
// with attention in causal blocks of 4 rows, and element-wise against the
// exact path's: within 1e-5 of each tensor's largest gradient.
func TestFastGradients(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		B, T int
	}{
		{"untied, T 16", Config{Vocab: 64, Context: 32, Dim: 32, Heads: 4, Layers: 2, MLP: 96}, 2, 16},
		{"tied, odd sizes, T 11", Config{Vocab: 29, Context: 12, Dim: 24, Heads: 3, Layers: 2, MLP: 40, Tied: true}, 3, 11},
	}
	block4 := func(m *Model) { m.attnBlock = 4 }
	for _, tc := range cases {
		t.Run(tc.name+"/finite differences", func(t *testing.T) {
			gradientCheck(t, tc.cfg, tc.B, tc.T, Options{Fast: true, Workers: 2}, block4)
		})
		t.Run(tc.name+"/exact path", func(t *testing.T) {
			cfg := tc.cfg.WithDefaults()
			params := perturbedInit(cfg, 5)
			rng := rand.New(rand.NewPCG(8, 9))
			tokens, targets := randomTokens(rng, tc.B*tc.T, cfg.Vocab), randomTokens(rng, tc.B*tc.T, cfg.Vocab)
			ex, _ := newTestModel(t, cfg, Options{}, params)
			fa, _ := newTestModel(t, cfg, Options{Fast: true, Workers: 3}, params)
			block4(fa)
			le, lf := step(t, ex, tokens, targets, tc.B, 1), step(t, fa, tokens, targets, tc.B, 1)
			if rel := math.Abs(float64(le-lf)) / float64(le); rel > 1e-6 {
				t.Errorf("loss: fast %.8g, exact %.8g (rel %.2e)", lf, le, rel)
			}
			l := ex.Layout()
			for si, s := range l.Specs {
				ge, gf := l.View(ex.Grads(), si), l.View(fa.Grads(), si)
				gmax := 0.0
				for _, v := range ge {
					gmax = max(gmax, math.Abs(float64(v)))
				}
				for j := range ge {
					if d := math.Abs(float64(gf[j] - ge[j])); d > 1e-5*gmax {
						t.Errorf("%s[%d]: fast %.8g, exact %.8g (%.2e of the largest)", s.Name, j, gf[j], ge[j], d/gmax)
						break
					}
				}
			}
		})
	}
}

// TestFastNoAllocations: after warm-up a fast step allocates nothing,
// with or without checkpointing, in bf16, attention in several blocks.
func TestFastNoAllocations(t *testing.T) {
	for _, opt := range []Options{{Fast: true}, {Fast: true, Checkpoint: true}, {Fast: true, DType: device.BF16}} {
		cfg := Config{Vocab: 32, Context: 16, Dim: 32, Heads: 4, Layers: 2}
		opt.Gemm, opt.Workers = loopGemm{}, 2
		m, _ := newTestModel(t, cfg, opt, perturbedInit(cfg.WithDefaults(), 1))
		m.attnBlock = 4
		rng := rand.New(rand.NewPCG(1, 1))
		tokens, targets := randomTokens(rng, 3*16, 32), randomTokens(rng, 3*16, 32)
		step(t, m, tokens, targets, 3, 1)
		if n := testing.AllocsPerRun(5, func() { m.OverwriteGrads(); step(t, m, tokens, targets, 3, 1) }); n != 0 {
			t.Errorf("options %+v: %v allocations per step after warm-up", opt, n)
		}
	}
}

// BenchmarkGPTStepBLAS times a micro-step (Forward+Backward after
// OverwriteGrads) on OpenBLAS with one thread, the exact and the fast path
// interleaved step by step in the same run, and reports each one's
// wall seconds per step and their ratio (exact/fast: the fast path's
// speed-up), and the ratio of their CPU seconds (exact/fast-cpu: robust
// on a shared machine, as one thread and one worker run each step).
// Run with e.g.
//
//	go test ./model/gpt -run '^$' -bench GPTStepBLAS -benchtime 3x
func BenchmarkGPTStepBLAS(b *testing.B) {
	gemm := openBLAS(b)
	for _, bc := range []struct {
		preset string
		B, T   int
	}{{"small", 4, 128}, {"gpt2s-untied", 1, 256}} {
		b.Run(fmt.Sprintf("%s/B=%d/T=%d", bc.preset, bc.B, bc.T), func(b *testing.B) {
			cfg, params, tokens, targets := benchInput(b, bc.preset, bc.B*bc.T)
			var ms [2]*Model
			for i, fast := range []bool{false, true} {
				ms[i], _ = newTestModel(b, cfg, Options{Gemm: gemm, Fast: fast, Workers: 1}, params)
				step(b, ms[i], tokens, targets, bc.B, 1) // warm-up: allocates the activations
			}
			var wall, cpu [2]float64
			b.ResetTimer()
			for b.Loop() {
				for i, m := range ms {
					start, cpu0 := time.Now(), cpuTime()
					m.OverwriteGrads()
					step(b, m, tokens, targets, bc.B, 1)
					wall[i] += time.Since(start).Seconds()
					cpu[i] += (cpuTime() - cpu0).Seconds()
				}
			}
			n := float64(b.N)
			b.ReportMetric(wall[0]/n, "exact-s/step")
			b.ReportMetric(wall[1]/n, "fast-s/step")
			b.ReportMetric(wall[0]/wall[1], "exact/fast")
			if cpu[1] > 0 {
				b.ReportMetric(cpu[0]/cpu[1], "exact/fast-cpu")
			}
		})
	}
}

// openBLAS is the OpenBLAS engine with one thread, or a skip.
func openBLAS(b *testing.B) model.Gemmer {
	e, err := blas.New(blas.Options{Backend: blas.OpenBLAS, Threads: 1})
	if err != nil {
		b.Skipf("OpenBLAS: %v", err)
	}
	return e
}
