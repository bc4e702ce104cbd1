package cuda

import (
	"math"
	"slices"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/cuda/fakecu"
	"github.com/dszero/dszero/cuda/kernels"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/optim"
)

// confCase exercises one launcher on a device and returns its outputs with
// float64 expectations. The same cases run on the fake driver in every
// `go test` and, on a GPU machine, on the GPU, where each output is also
// compared with the fake's: bit for bit unless the case's kernels are
// Approx (CUDA's expf, logf, tanhf) or a GEMM.
type confCase struct {
	name   string
	dtypes []device.DType
	// approx marks outputs that may differ between a GPU and the Go
	// references by rounding (transcendentals, GEMM accumulation order).
	approx bool
	run    func(h *harness, dt device.DType) []output
}

var all3 = []device.DType{device.F32, device.BF16, device.F16}

func confCases() []confCase {
	return []confCase{
		{"Fill", all3, false, func(h *harness, dt device.DType) []output {
			x := h.zeros(dt, 1000)
			h.do(func(q *Issuer) error { return h.k.Fill(q, h.s, x, dt, 3.3) })
			want := make([]float64, 1000)
			for i := range want {
				want[i] = float64(roundTo(dt, 3.3))
			}
			return []output{{"x", dt, h.out(dt, x), want, 0}}
		}},
		{"Cast", all3[1:], false, func(h *harness, dt device.DType) []output {
			x := append(randn(1, 3000, 100), 0, float32(math.Inf(-1)), 70000, 1e-7, float32(math.NaN()))
			src := h.in(device.F32, x)
			lo, back := h.zeros(dt, len(x)), h.zeros(device.F32, len(x))
			h.do(func(q *Issuer) error {
				if err := h.k.Cast(q, h.s, lo, dt, src, device.F32, int64(len(x))); err != nil {
					return err
				}
				return h.k.Cast(q, h.s, back, device.F32, lo, dt, int64(len(x)))
			})
			return []output{{"low", dt, h.out(dt, lo), f64s(rounded(dt, x)), 0}, {"back", device.F32, h.out(device.F32, back), f64s(rounded(dt, x)), 0}}
		}},
		{"ScaleDivAdd", all3, false, func(h *harness, dt device.DType) []output {
			n := 5000
			a, b := rounded(dt, randn(2, n, 1)), rounded(dt, randn(3, n, 1))
			ma, mb, mc, md := h.in(dt, a), h.in(dt, b), h.in(dt, a), h.in(dt, a)
			sum, f := h.zeros(dt, n), h.in(device.F32, []float32{-0.75})
			h.do(func(q *Issuer) error {
				if err := h.k.Scale(q, h.s, ma, dt, int64(n), 1.5); err != nil {
					return err
				}
				if err := h.k.Div(q, h.s, mc, dt, int64(n), 3); err != nil {
					return err
				}
				if err := h.k.ScaleBy(q, h.s, md, dt, int64(n), f); err != nil {
					return err
				}
				return h.k.Add(q, h.s, sum, mb, mb, dt, int64(n))
			})
			ws, wd, wb, wa := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
			for i := range n {
				ws[i] = float64(roundTo(dt, a[i]*1.5))
				wd[i] = float64(roundTo(dt, a[i]/3))
				wb[i] = float64(roundTo(dt, a[i]*-0.75))
				wa[i] = float64(roundTo(dt, b[i]+b[i]))
			}
			return []output{{"scale", dt, h.out(dt, ma), ws, 0}, {"div", dt, h.out(dt, mc), wd, 0},
				{"scaleBy", dt, h.out(dt, md), wb, 0}, {"add", dt, h.out(dt, sum), wa, 0}}
		}},
		{"Accumulate", all3, false, func(h *harness, dt device.DType) []output {
			n := 4000
			g, acc := rounded(dt, randn(4, n, 1)), rounded(dt, randn(5, n, 1))
			mg, same, wide := h.in(dt, g), h.in(dt, acc), h.in(device.F32, acc)
			h.do(func(q *Issuer) error {
				if err := h.k.Accumulate(q, h.s, same, dt, mg, dt, int64(n)); err != nil {
					return err
				}
				return h.k.Accumulate(q, h.s, wide, device.F32, mg, dt, int64(n))
			})
			w1, w2 := make([]float64, n), make([]float64, n)
			for i := range n {
				w1[i] = float64(roundTo(dt, acc[i]+g[i]))
				w2[i] = float64(acc[i] + g[i])
			}
			return []output{{"same", dt, h.out(dt, same), w1, 0}, {"fp32", device.F32, h.out(device.F32, wide), w2, 0}}
		}},
		{"SumSquares", all3, false, func(h *harness, dt device.DType) []output {
			n := 100003
			x := rounded(dt, randn(6, n, 2))
			mx, ss, s := h.in(dt, x), h.zeros(device.F32, 2), h.zeros(device.F32, 2)
			h.do(func(q *Issuer) error {
				if err := h.k.SumSquares(q, h.s, ss, mx, dt, int64(n)); err != nil {
					return err
				}
				return h.k.Sum(q, h.s, s, mx, dt, int64(n))
			})
			var w2, w1 float64
			for _, v := range x {
				w2 += float64(v) * float64(v)
				w1 += float64(v)
			}
			got2, got1 := h.f64(ss)[0], h.f64(s)[0]
			if math.Abs(got2-w2) > 1e-12*w2 {
				h.t.Errorf("Σx² = %v, want %v: not a float64 accumulation", got2, w2)
			}
			return []output{{"sumsq", device.F32, []float32{float32(got2)}, []float64{w2}, 1e-7},
				{"sum", device.F32, []float32{float32(got1)}, []float64{w1}, 1e-6}}
		}},
		{"AllFinite", all3, false, func(h *harness, dt device.DType) []output {
			x := randn(7, 10000, 1)
			clean, dirty := h.in(dt, x), h.in(dt, append(slices.Clone(x[:9999]), float32(math.Inf(1))))
			f1, f2 := h.zeros(device.F32, 1), h.zeros(device.F32, 1)
			h.do(func(q *Issuer) error {
				if err := h.k.AllFinite(q, h.s, f1, clean, dt, 10000); err != nil {
					return err
				}
				return h.k.AllFinite(q, h.s, f2, dirty, dt, 10000)
			})
			g1, g2 := h.out(device.F32, f1), h.out(device.F32, f2)
			return []output{{"clean", device.F32, []float32{float32(math.Float32bits(g1[0]))}, []float64{0}, 0},
				{"dirty", device.F32, []float32{float32(math.Float32bits(g2[0]))}, []float64{1}, 0}}
		}},
		{"ReduceN", all3, false, func(h *harness, dt device.DType) []output {
			const n, nsrc = 3001, 4
			var outs []output
			for op := range 3 {
				var ms []Mem
				var bufs []comm.Buffer
				for k := range nsrc {
					x := randn(uint64(10*k+op), n, 1)
					ms = append(ms, h.in(dt, x))
					bufs = append(bufs, commBuffer(dt, x))
				}
				srcs, err := h.d.PointerArray(ms)
				if err != nil {
					h.t.Fatal(err)
				}
				h.mems = append(h.mems, srcs)
				dst := h.zeros(dt, n)
				h.do(func(q *Issuer) error { return h.k.ReduceN(q, h.s, dst, dt, srcs, nsrc, n, ReduceOp(op)) })
				want := commBuffer(dt, make([]float32, n))
				comm.Reduce([]comm.Buffer{want}, bufs, comm.Op(op))
				outs = append(outs, output{comm.Op(op).String(), dt, h.out(dt, dst), f64s(commValues(want)), 0})
			}
			return outs
		}},
		{"Adam", []device.DType{device.BF16, device.F16}, false, func(h *harness, dt device.DType) []output {
			// Against package zero/optim's CPU Adam, bit for bit, over three steps.
			const n = 2049
			var outs []output
			for _, cfg := range []optim.AdamConfig{adamCfg(optim.TorchAdamW, 0.01, true), adamCfg(optim.DeepSpeedAdam, 0.01, true), adamCfg(optim.TorchAdam, 0.1, false)} {
				o, err := optim.NewAdam(cfg, n, optim.Alloc{Acct: mem.NewAccountant(0), Tier: mem.Device}, nil)
				if err != nil {
					h.t.Fatal(err)
				}
				p := randn(20, n, 1)
				mp, mm, mv, p16 := h.in(device.F32, p), h.zeros(device.F32, n), h.zeros(device.F32, n), h.zeros(dt, n)
				b1t, b2t := float32(1), float32(1)
				for step := int64(1); step <= 3; step++ {
					g := randn(uint64(30+step), n, 0.1)
					o.Step(p, g)
					a := kernels.TorchAdamArgs(cfg, step)
					if cfg.Flavor == optim.DeepSpeedAdam {
						b1t, b2t = b1t*float32(cfg.Betas[0]), b2t*float32(cfg.Betas[1])
						a = kernels.DeepSpeedAdamArgs(cfg, b1t, b2t)
					}
					mg := h.in(device.F32, g)
					h.do(func(q *Issuer) error { return h.k.Adam(q, h.s, mp, mg, mm, mv, n, p16, dt, a) })
				}
				name := cfg.Flavor.String()
				outs = append(outs, output{name + " p", device.F32, h.out(device.F32, mp), f64s(p), 0},
					output{name + " exp_avg_sq", device.F32, h.out(device.F32, mv), f64s(o.State("exp_avg_sq")), 0},
					output{name + " p16", dt, h.out(dt, p16), f64s(rounded(dt, p)), 0})
			}
			return outs
		}},
		{"SGD", []device.DType{device.F32}, false, func(h *harness, dt device.DType) []output {
			const n = 1000
			cfg := optim.SGDConfig{LR: 0.1, Momentum: 0.9, WeightDecay: 0.01, Nesterov: true}
			o, err := optim.NewSGD(cfg, n, optim.Alloc{Acct: mem.NewAccountant(0), Tier: mem.Device}, nil)
			if err != nil {
				h.t.Fatal(err)
			}
			p := randn(40, n, 1)
			mp, buf := h.in(device.F32, p), h.zeros(device.F32, n)
			for step := range 3 {
				g := randn(uint64(41+step), n, 1)
				o.Step(p, g)
				mg := h.in(device.F32, g)
				a := SGDArgs{LR: cfg.LR, Momentum: cfg.Momentum, WeightDecay: cfg.WeightDecay, Nesterov: true, First: step == 0}
				h.do(func(q *Issuer) error { return h.k.SGD(q, h.s, mp, mg, buf, n, Mem{}, device.BF16, a) })
			}
			return []output{{"p", device.F32, h.out(device.F32, mp), f64s(p), 0}}
		}},
		{"LayerNorm", all3, false, caseLayerNorm},
		{"RMSNorm", all3, false, caseRMSNorm},
		{"BiasGrad", all3, false, func(h *harness, dt device.DType) []output {
			const N, OC = 777, 130
			dout, prev := rounded(dt, randn(50, N*OC, 1)), rounded(dt, randn(51, OC, 1))
			md, db := h.in(dt, dout), h.in(dt, prev)
			h.do(func(q *Issuer) error { return h.k.BiasGrad(q, h.s, dt, db, md, N, OC, true) })
			want := f64s(prev)
			for r := range N {
				for c := range OC {
					want[c] += float64(dout[r*OC+c])
				}
			}
			return []output{{"dbias", dt, h.out(dt, db), want, 2 * ulp(dt)}}
		}},
		{"Activations", all3, true, caseActivations},
		{"RoPE", all3, false, caseRoPE},
		{"AttentionData", all3, false, caseAttentionData},
		{"Softmax", all3, true, caseSoftmax},
		{"CrossEntropy", all3, true, caseCrossEntropy},
		{"Embedding", all3, false, caseEmbedding},
		{"Gemm", all3, true, caseGemm},
	}
}

func adamCfg(f optim.AdamFlavor, wd float64, wmode bool) optim.AdamConfig {
	c := optim.DefaultAdamConfig(f)
	c.LR, c.WeightDecay, c.AdamWMode = 2e-3, wd, wmode
	return c
}

func commBuffer(dt device.DType, x []float32) comm.Buffer {
	switch dt {
	case device.BF16:
		b := make([]uint16, len(x))
		half.F32ToBF16(b, x)
		return comm.BF16(b)
	case device.F16:
		b := make([]uint16, len(x))
		half.F32ToF16(b, x)
		return comm.F16(b)
	}
	return comm.F32(slices.Clone(x))
}

func commValues(b comm.Buffer) []float32 {
	if b.DType() == device.F32 {
		return b.F32()
	}
	out := make([]float32, b.Len())
	if b.DType() == device.BF16 {
		half.BF16ToF32(out, b.Bits())
	} else {
		half.F16ToF32(out, b.Bits())
	}
	return out
}

// TestConformanceFake runs every conformance case on the fake driver.
func TestConformanceFake(t *testing.T) {
	r := openFake(t, fakecu.Options{Memory: 1 << 30}, Config{})
	h := newHarness(t, r.d)
	for _, c := range confCases() {
		for _, dt := range c.dtypes {
			t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
				h.t = t
				for _, o := range c.run(h, dt) {
					o.check(t, "")
				}
			})
		}
	}
	// Every kernel of the table ran at least once.
	ran := r.drv.Launches()
	for _, s := range kernels.NewTable().Specs() {
		if ran[s.Name] == 0 {
			t.Errorf("no conformance case launches %s", s.Name)
		}
	}
}
