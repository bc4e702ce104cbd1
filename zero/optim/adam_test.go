package optim

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestTorchAdamMatchesTorchBitForBit(t *testing.T) {
	g := loadGolden(t)
	for _, tc := range []struct {
		name string
		run  *goldenRun
		cfg  AdamConfig
	}{
		{"AdamW", &g.AdamW, AdamConfig{Flavor: TorchAdamW, LR: 1e-3, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, WeightDecay: 0.01}},
		{"AdamW changing betas", &g.AdamWBetas, AdamConfig{Flavor: TorchAdamW, LR: 1e-3, Betas: [2]float64{0.85, 0.99}, Eps: 1e-6, WeightDecay: 0.1}},
		{"Adam L2", &g.AdamL2, AdamConfig{Flavor: TorchAdam, LR: 1e-3, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, WeightDecay: 0.01}},
		{"Adam", &g.Adam, DefaultAdamConfig(TorchAdam)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			replay(t, tc.run, []string{"exp_avg", "exp_avg_sq"}, func(n int) Optimizer {
				o, err := NewAdam(tc.cfg, n, testAlloc(), nil)
				if err != nil {
					t.Fatal(err)
				}
				return o
			})
		})
	}
}

// adamRef is an independent float64 transcription of the textbook update
// (Kingma & Ba with torch's eps placement), used to check formulas where
// bit-exactness is not the point.
type adamRef struct {
	b1, b2, eps, wd float64
	decoupled       bool
	biasCorrection  bool
	dsEps           bool // DeepSpeed: eps added to sqrt(v)/sqrt(bc2) — same as torch
	m, v            []float64
	t               int
}

func (r *adamRef) step(p []float64, g []float64, lr float64) {
	r.t++
	for i := range p {
		gi := g[i]
		if r.decoupled {
			p[i] *= 1 - lr*r.wd
		} else {
			gi += r.wd * p[i]
		}
		r.m[i] = r.b1*r.m[i] + (1-r.b1)*gi
		r.v[i] = r.b2*r.v[i] + (1-r.b2)*gi*gi
		bc1, bc2 := 1.0, 1.0
		if r.biasCorrection {
			bc1 = 1 - math.Pow(r.b1, float64(r.t))
			bc2 = 1 - math.Pow(r.b2, float64(r.t))
		}
		p[i] -= lr / bc1 * r.m[i] / (math.Sqrt(r.v[i])/math.Sqrt(bc2) + r.eps)
	}
}

func TestAdamFlavoursAgreeWithFloat64Formula(t *testing.T) {
	const n = 300
	p0 := make([]float32, n)
	grads := make([][]float32, 7)
	for i := range p0 {
		p0[i] = float32(math.Sin(float64(i)*0.37) * 0.05)
	}
	for s := range grads {
		grads[s] = make([]float32, n)
		for i := range grads[s] {
			grads[s][i] = float32(math.Cos(float64(i*(s+3))*0.11) * math.Pow(10, -float64(i%5)))
		}
	}
	lrs := []float64{1e-3, 1e-4, 4e-4, 7e-4, 1e-3, 8.714e-4, 7.429e-4}
	for _, tc := range []struct {
		name string
		cfg  AdamConfig
		ref  adamRef
	}{
		{"torch AdamW", AdamConfig{Flavor: TorchAdamW, LR: 1, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, WeightDecay: 0.01},
			adamRef{b1: 0.9, b2: 0.999, eps: 1e-8, wd: 0.01, decoupled: true, biasCorrection: true}},
		{"torch Adam L2", AdamConfig{Flavor: TorchAdam, LR: 1, Betas: [2]float64{0.8, 0.99}, Eps: 1e-6, WeightDecay: 0.1},
			adamRef{b1: 0.8, b2: 0.99, eps: 1e-6, wd: 0.1, biasCorrection: true}},
		{"DeepSpeed adamw_mode", AdamConfig{Flavor: DeepSpeedAdam, LR: 1, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, WeightDecay: 0.01, AdamWMode: true, BiasCorrection: true},
			adamRef{b1: 0.9, b2: 0.999, eps: 1e-8, wd: 0.01, decoupled: true, biasCorrection: true}},
		{"DeepSpeed L2 mode", AdamConfig{Flavor: DeepSpeedAdam, LR: 1, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, WeightDecay: 0.01, BiasCorrection: true},
			adamRef{b1: 0.9, b2: 0.999, eps: 1e-8, wd: 0.01, biasCorrection: true}},
		{"DeepSpeed no bias correction", AdamConfig{Flavor: DeepSpeedAdam, LR: 1, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, AdamWMode: true},
			adamRef{b1: 0.9, b2: 0.999, eps: 1e-8, decoupled: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := NewAdam(tc.cfg, n, testAlloc(), nil)
			if err != nil {
				t.Fatal(err)
			}
			ref := tc.ref
			ref.m, ref.v = make([]float64, n), make([]float64, n)
			p := append([]float32(nil), p0...)
			pr := make([]float64, n)
			for i := range p {
				pr[i] = float64(p[i])
			}
			for s, g := range grads {
				o.SetLR(lrs[s])
				o.Step(p, g)
				g64 := make([]float64, n)
				for i := range g {
					g64[i] = float64(g[i])
				}
				ref.step(pr, g64, lrs[s])
			}
			got := make([]float64, n)
			for i := range p {
				got[i] = float64(p[i])
			}
			// float32 state and arithmetic against float64: a few ulps of the update.
			if d := cmp.Diff(pr, got, cmpopts.EquateApprox(0, 2e-7)); d != "" {
				t.Errorf("params differ from the float64 formula (-ref +got):\n%s", d)
			}
		})
	}
}

// The first bias-corrected Adam step moves every weight by lr·g/(|g|+eps):
// m̂ = g and v̂ = g², whatever the betas. Hand-checked numbers.
func TestAdamFirstStepByHand(t *testing.T) {
	for _, flavor := range []AdamFlavor{TorchAdam, TorchAdamW, DeepSpeedAdam} {
		cfg := DefaultAdamConfig(flavor)
		cfg.WeightDecay = 0
		cfg.LR = 0.5
		o, err := NewAdam(cfg, 3, testAlloc(), nil)
		if err != nil {
			t.Fatal(err)
		}
		p := []float32{1, 1, 1}
		o.Step(p, []float32{2, -1e-3, 0})
		// 1 - 0.5*2/(2+1e-8) = 0.5 (to float32); 1 + 0.5*1e-3/(1e-3+1e-8) = 1.49999...;
		// a zero gradient leaves the weight alone.
		want := []float32{0.5, float32(1 + 0.5*1e-3/(1e-3+1e-8)), 1}
		if d := cmp.Diff(want, p, cmpopts.EquateApprox(0, 1e-6)); d != "" {
			t.Errorf("%v first step (-want +got):\n%s", flavor, d)
		}
	}
}

func TestAdamValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg  AdamConfig
		want string
	}{
		{AdamConfig{Flavor: TorchAdamW, LR: -1, Betas: [2]float64{0.9, 0.999}}, "Invalid learning rate: -1"},
		{AdamConfig{Flavor: TorchAdam, LR: 1, Betas: [2]float64{1, 0.999}}, "Invalid beta parameter at index 0: 1"},
		{AdamConfig{Flavor: TorchAdam, LR: 1, Betas: [2]float64{0.9, -0.1}}, "Invalid beta parameter at index 1: -0.1"},
		{AdamConfig{Flavor: TorchAdam, LR: 1, Eps: -1}, "Invalid epsilon value: -1"},
		{AdamConfig{Flavor: TorchAdamW, LR: 1, WeightDecay: -0.5}, "Invalid weight_decay value: -0.5"},
		{AdamConfig{Flavor: DeepSpeedAdam, AMSGrad: true}, "FusedAdam does not support the AMSGrad variant."},
	} {
		_, err := NewAdam(tc.cfg, 4, testAlloc(), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewAdam(%+v) error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
