package optim

import (
	"strings"
	"testing"
)

func TestSGDMatchesTorchBitForBit(t *testing.T) {
	g := loadGolden(t)
	for _, tc := range []struct {
		name string
		run  *goldenRun
		cfg  SGDConfig
		keys []string
	}{
		{"momentum+dampening+wd", &g.SGDMomentum, SGDConfig{LR: 1e-3, Momentum: 0.9, Dampening: 0.1, WeightDecay: 0.01}, []string{"momentum_buffer"}},
		{"nesterov", &g.SGDNesterov, SGDConfig{LR: 1e-3, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-3}, []string{"momentum_buffer"}},
		{"plain", &g.SGDPlain, SGDConfig{LR: 1e-3}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			replay(t, tc.run, tc.keys, func(n int) Optimizer {
				o, err := NewSGD(tc.cfg, n, testAlloc(), nil)
				if err != nil {
					t.Fatal(err)
				}
				if tc.keys != nil && o.State("momentum_buffer") != nil {
					t.Fatal("momentum_buffer exists before the first step")
				}
				return o
			})
		})
	}
}

// Hand-computed: the first step's buffer is the gradient itself (no
// dampening applied), the second is momentum*buf + (1-dampening)*g.
func TestSGDMomentumBufferByHand(t *testing.T) {
	o, err := NewSGD(SGDConfig{LR: 0.5, Momentum: 0.5, Dampening: 0.5}, 1, testAlloc(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := []float32{1}
	o.Step(p, []float32{2})
	if buf := o.State("momentum_buffer")[0]; buf != 2 || p[0] != 0 {
		t.Fatalf("step 1: buf %v p %v, want 2 and 1-0.5*2 = 0", buf, p[0])
	}
	o.Step(p, []float32{4})
	// buf = 0.5*2 + 0.5*4 = 3; p = 0 - 0.5*3 = -1.5
	if buf := o.State("momentum_buffer")[0]; buf != 3 || p[0] != -1.5 {
		t.Fatalf("step 2: buf %v p %v, want 3 and -1.5", buf, p[0])
	}
}

func TestSGDValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg  SGDConfig
		want string
	}{
		{SGDConfig{LR: -1}, "Invalid learning rate: -1"},
		{SGDConfig{LR: 1, Momentum: -0.1}, "Invalid momentum value: -0.1"},
		{SGDConfig{LR: 1, WeightDecay: -1}, "Invalid weight_decay value: -1"},
		{SGDConfig{LR: 1, Nesterov: true}, "Nesterov momentum requires a momentum and zero dampening"},
		{SGDConfig{LR: 1, Momentum: 0.9, Dampening: 0.1, Nesterov: true}, "Nesterov momentum requires a momentum and zero dampening"},
	} {
		if _, err := NewSGD(tc.cfg, 1, testAlloc(), nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewSGD(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestTorchAdagradMatchesTorchBitForBit(t *testing.T) {
	g := loadGolden(t)
	cfg := AdagradConfig{LR: 1e-2, LRDecay: 0.01, WeightDecay: 0.01, InitialAccumulatorValue: 0.1, Eps: 1e-10}
	replay(t, &g.Adagrad, []string{"sum"}, func(n int) Optimizer {
		o, err := NewAdagrad(cfg, n, testAlloc(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return o
	})
}

// DeepSpeed's CPU Adagrad divides the raw gradient (not the decayed one) by
// sqrt(v)+eps; v accumulates the decayed gradient. Hand-computed numbers.
func TestDeepSpeedAdagradByHand(t *testing.T) {
	o, err := NewAdagrad(AdagradConfig{Flavor: DeepSpeedAdagrad, LR: 0.1, WeightDecay: 0.5, Eps: 0}, 1, testAlloc(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := []float32{2}
	o.Step(p, []float32{3})
	// g' = 3 + 0.5*2 = 4; v = 16; p = 2 - 0.1 * 3/4 = 1.925
	if v := o.State("exp_avg_sq")[0]; v != 16 || p[0] != float32(2-0.1*0.75) {
		t.Fatalf("v %v p %v, want 16 and 1.925", v, p[0])
	}
}
