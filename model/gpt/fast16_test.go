package gpt

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/model"
)

// TestFast16Rounded: on the fast path with a 16-bit DType every op output
// is a 16-bit value — each block's activations, the residual stream, the
// final LayerNorm and the logits after Forward; the residual stream's
// gradient and every parameter gradient after Backward — so a fast
// 16-bit step computes in float32 and rounds each op's output once, as a
// GPU's 16-bit kernels do. A pass that forgot its rounding fails here.
func TestFast16Rounded(t *testing.T) {
	for _, dt := range []device.DType{device.BF16, device.F16} {
		t.Run(dt.String(), func(t *testing.T) {
			cfg := Config{Vocab: 64, Context: 32, Dim: 32, Heads: 4, Layers: 2, MLP: 96}.WithDefaults()
			params := perturbedInit(cfg, 3)
			dt.Rounding()(params)
			rng := rand.New(rand.NewPCG(5, 6))
			const B, T = 2, 16
			tokens, targets := randomTokens(rng, B*T, cfg.Vocab), randomTokens(rng, B*T, cfg.Vocab)
			m, _ := newTestModel(t, cfg, Options{DType: dt, Fast: true, Workers: 2}, params)
			m.attnBlock = 4
			near := dt.Nearest()
			check := func(name string, x []float32) {
				t.Helper()
				for i, v := range x {
					if near(v) != v {
						t.Errorf("%s[%d] = %v is not a %v value", name, i, v, dt)
						return
					}
				}
			}
			if _, err := m.Forward(model.Batch{Tokens: tokens, B: B, Targets: targets}); err != nil {
				t.Fatal(err)
			}
			a := &m.a
			for l := range cfg.Layers {
				ba := &a.blocks[l]
				for name, x := range map[string][]float32{"ln1": ba.ln1, "qkv": ba.qkv, "att": ba.att, "atty": ba.atty,
					"res2": ba.res2, "ln2": ba.ln2, "fch": ba.fch, "fchGelu": ba.fchGelu} {
					check(name, x)
				}
			}
			for _, r := range a.res {
				check("res", r)
			}
			check("lnf", a.lnf)
			check("logits", a.logits)
			m.OverwriteGrads()
			if err := m.Backward(1); err != nil {
				t.Fatal(err)
			}
			check("dres", a.dres)
			l := m.Layout()
			for i, s := range l.Specs {
				check("grad "+s.Name, l.View(m.Grads(), i))
			}
		})
	}
}

// TestFast16MatchesExact: ten training steps of the harness model in bf16
// and in fp16 on the fast path keep their losses within the conformance
// band of the exact path's (conformance.Defaults for 16 bits: 1e-3
// relative at every step), and their final weights as close to the exact
// path's as an fp32 run's are (see below). The exact path is
// torch 1.13's CPU bf16 kernels for bf16 and "float32, round once" for
// fp16; the fast path is "float32 through the Gemmer, round once" for
// both.
func TestFast16MatchesExact(t *testing.T) {
	const steps = 10
	for _, dt := range []device.DType{device.BF16, device.F16} {
		t.Run(dt.String(), func(t *testing.T) {
			exact, we := trainLosses(t, Options{DType: dt}, 0, steps)
			fast, wf := trainLosses(t, Options{DType: dt, Fast: true, Workers: 2}, 0, steps)
			worst := 0.0
			for s := range steps {
				rel := math.Abs(float64(fast[s])-float64(exact[s])) / math.Abs(float64(exact[s]))
				worst = max(worst, rel)
				if rel > 1e-3 {
					t.Errorf("step %d: fast loss %.8g, exact %.8g (rel %.2e), want within 1e-3", s+1, fast[s], exact[s], rel)
				}
			}
			if exact[steps-1] >= exact[0] {
				t.Errorf("the loss did not fall over %d steps (%v → %v): the comparison proves little", steps, exact[0], exact[steps-1])
			}
			// The weights: two correct 16-bit kernel sets part where a
			// rounding lands on the other side and Adam, which divides
			// by √v, turns a gradient at rounding noise into a step of
			// up to ~lr either way. So the fast path's distance from the
			// exact path is held to the distance that 16-bit itself
			// puts between the exact path and an fp32 run: within 1.5×
			// of it (root mean square, over the training update's).
			_, init := harnessTiny(t)
			_, w32 := trainLosses(t, Options{DType: device.F32}, 0, steps)
			var dFast, d32, upd, maxFast float64
			for i := range we {
				df, d, u := float64(wf[i]-we[i]), float64(w32[i]-we[i]), float64(we[i]-init[i])
				dFast, d32, upd = dFast+df*df, d32+d*d, upd+u*u
				maxFast = max(maxFast, math.Abs(df))
			}
			rFast, r32 := math.Sqrt(dFast/upd), math.Sqrt(d32/upd)
			if rFast > 1.5*r32 {
				t.Errorf("final weights: fast vs exact %.3g of the update (rms), fp32 vs exact %.3g: want within 1.5×", rFast, r32)
			}
			t.Logf("final weights: fast vs exact %.3g of the update (rms, largest %.2e), fp32 vs exact %.3g", rFast, maxFast, r32)
			t.Logf("losses %v … %v; worst loss difference %.2e relative", fast[0], fast[steps-1], worst)
		})
	}
}

// BenchmarkGPTStep16 times a micro-step (Forward+Backward after
// OverwriteGrads) on OpenBLAS with one thread in fp32, bf16 and fp16 on
// the fast path, and on the smaller model bf16 on the exact path (torch's
// CPU bf16 kernels), interleaved step by step in the same run, and reports each one's
// seconds per step and its tokens/s over fp32's (bf16/fp32 and so on).
// Run with e.g.
//
//	go test ./model/gpt -run '^$' -bench GPTStep16 -benchtime 3x
func BenchmarkGPTStep16(b *testing.B) {
	gemm := openBLAS(b)
	type variant struct {
		name string
		opt  Options
	}
	variants := []variant{
		{"fp32", Options{Fast: true}},
		{"bf16", Options{Fast: true, DType: device.BF16}},
		{"fp16", Options{Fast: true, DType: device.F16}},
	}
	for _, bc := range []struct {
		preset string
		B, T   int
		exact  bool // also bf16 on the exact path (a minute a step on gpt2s)
	}{{"small", 4, 128, true}, {"gpt2s-untied", 1, 256, false}} {
		variants := variants
		if bc.exact {
			variants = append(variants, variant{"bf16-exact", Options{DType: device.BF16}})
		}
		b.Run(fmt.Sprintf("%s/B=%d/T=%d", bc.preset, bc.B, bc.T), func(b *testing.B) {
			cfg, params, tokens, targets := benchInput(b, bc.preset, bc.B*bc.T)
			ms := make([]*Model, len(variants))
			for i, v := range variants {
				p := append([]float32(nil), params...)
				if r := v.opt.DType.Rounding(); r != nil {
					r(p)
				}
				v.opt.Gemm, v.opt.Workers = gemm, 1
				ms[i], _ = newTestModel(b, cfg, v.opt, p)
				step(b, ms[i], tokens, targets, bc.B, 1) // warm-up: allocates the activations
			}
			wall := make([]float64, len(variants))
			b.ResetTimer()
			for b.Loop() {
				for i, m := range ms {
					start := time.Now()
					m.OverwriteGrads()
					step(b, m, tokens, targets, bc.B, 1)
					wall[i] += time.Since(start).Seconds()
				}
			}
			for i, v := range variants {
				b.ReportMetric(wall[i]/float64(b.N), v.name+"-s/step")
				if i > 0 {
					b.ReportMetric(wall[0]/wall[i], v.name+"/fp32")
				}
			}
		})
	}
}
