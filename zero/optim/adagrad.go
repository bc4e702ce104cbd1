package optim

import "fmt"

// AdagradFlavor selects torch.optim.Adagrad or DeepSpeed's CPU Adagrad.
type AdagradFlavor int

const (
	// TorchAdagrad is torch.optim.Adagrad 1.13 (state "sum" and "step").
	TorchAdagrad AdagradFlavor = iota
	// DeepSpeedAdagrad is DeepSpeedCPUAdagrad (csrc/includes/cpu_adagrad.h):
	// state "exp_avg_sq" and an int "step", no lr_decay, no initial
	// accumulator, and the numerator is the raw gradient even with decay.
	DeepSpeedAdagrad
)

// AdagradConfig is one parameter group of an Adagrad optimizer.
type AdagradConfig struct {
	Flavor      AdagradFlavor
	LR          float64 // lr, default 1e-2
	LRDecay     float64 // lr_decay (torch only), default 0
	WeightDecay float64 // weight_decay, default 0
	// InitialAccumulatorValue fills "sum" at construction (torch only).
	InitialAccumulatorValue float64
	Eps                     float64 // eps, default 1e-10
}

// DefaultAdagradConfig returns the constructor defaults (both flavours:
// lr 1e-2, eps 1e-10, weight_decay 0).
func DefaultAdagradConfig(f AdagradFlavor) AdagradConfig {
	return AdagradConfig{Flavor: f, LR: 1e-2, Eps: 1e-10}
}

// Validate reports what torch.optim.Adagrad's constructor rejects.
func (c AdagradConfig) Validate() error {
	if c.Flavor == DeepSpeedAdagrad {
		if c.LRDecay != 0 || c.InitialAccumulatorValue != 0 {
			return fmt.Errorf("DeepSpeedCPUAdagrad has no lr_decay or initial_accumulator_value")
		}
		return nil
	}
	switch {
	case !(c.LR >= 0):
		return fmt.Errorf("Invalid learning rate: %v", c.LR)
	case !(c.LRDecay >= 0):
		return fmt.Errorf("Invalid lr_decay value: %v", c.LRDecay)
	case !(c.WeightDecay >= 0):
		return fmt.Errorf("Invalid weight_decay value: %v", c.WeightDecay)
	case !(c.InitialAccumulatorValue >= 0):
		return fmt.Errorf("Invalid initial_accumulator_value value: %v", c.InitialAccumulatorValue)
	case !(c.Eps >= 0):
		return fmt.Errorf("Invalid epsilon value: %v", c.Eps)
	}
	return nil
}

// Adagrad is Adagrad over one partition.
type Adagrad struct {
	cfg     AdagradConfig
	n       int
	st      *stateBufs
	pool    *Pool
	steps   int64
	stepF32 float32
	k       adagradKernel
}

var _ Optimizer = (*Adagrad)(nil)

// NewAdagrad allocates the accumulator through a.
func NewAdagrad(cfg AdagradConfig, n int, a Alloc, pool *Pool) (*Adagrad, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("adagrad: %w", err)
	}
	name := "sum"
	if cfg.Flavor == DeepSpeedAdagrad {
		name = "exp_avg_sq"
	}
	st, err := newStateBufs(a, n, name)
	if err != nil {
		return nil, fmt.Errorf("adagrad: %w", err)
	}
	if v := float32(cfg.InitialAccumulatorValue); v != 0 {
		for i := range st.bufs[0] {
			st.bufs[0][i] = v
		}
	}
	return &Adagrad{cfg: cfg, n: n, st: st, pool: pool}, nil
}

func (o *Adagrad) Name() string {
	if o.cfg.Flavor == DeepSpeedAdagrad {
		return "deepspeed.ops.adagrad.DeepSpeedCPUAdagrad"
	}
	return "torch.optim.Adagrad"
}
func (o *Adagrad) Len() int                    { return o.n }
func (o *Adagrad) LR() float64                 { return o.cfg.LR }
func (o *Adagrad) SetLR(lr float64)            { o.cfg.LR = lr }
func (o *Adagrad) Config() AdagradConfig       { return o.cfg }
func (o *Adagrad) StepCount() int64            { return o.steps }
func (o *Adagrad) SetStepCount(n int64)        { o.steps, o.stepF32 = n, float32(n) }
func (o *Adagrad) StateNames() []string        { return append([]string(nil), o.st.names...) }
func (o *Adagrad) State(name string) []float32 { return o.st.get(name) }
func (o *Adagrad) LoadState(name string, v []float32) error {
	return o.st.load(name, v)
}
func (o *Adagrad) Free() { o.st.free() }

// ParamGroup returns the param_groups entry torch or DeepSpeed writes.
func (o *Adagrad) ParamGroup() map[string]any {
	c := o.cfg
	if c.Flavor == DeepSpeedAdagrad {
		return map[string]any{"lr": c.LR, "eps": c.Eps, "weight_decay": c.WeightDecay, "amsgrad": false}
	}
	return map[string]any{"lr": c.LR, "lr_decay": c.LRDecay, "eps": c.Eps, "weight_decay": c.WeightDecay,
		"initial_accumulator_value": c.InitialAccumulatorValue, "foreach": nil, "maximize": false}
}

// Step applies one Adagrad update.
//
// torch:     clr = lr / (1 + (step-1)*lr_decay); grad = grad.add(param, alpha=wd);
//
//	sum.addcmul_(grad, grad, value=1); param.addcdiv_(grad, sum.sqrt().add_(eps), value=-clr)
//
// DeepSpeed: v = fma(g', g', v) with g' = fma(param, wd, g) when wd > 0;
//
//	param = fma(g / (sqrt(v) + eps), -lr, param) — the numerator is the raw g.
func (o *Adagrad) Step(params, grads []float32) {
	checkLens(o.n, params, grads)
	o.steps++
	c := o.cfg
	k := &o.k
	k.p, k.g, k.sum = params, grads, o.st.bufs[0]
	k.eps = float32(c.Eps)
	k.wd = float32(c.WeightDecay)
	if c.Flavor == DeepSpeedAdagrad {
		k.ds = true
		k.useWD = k.wd > 0
		k.nlr = -1 * float32(c.LR)
	} else {
		o.stepF32++
		step := float64(o.stepF32)
		clr := c.LR / (1 + float64((step-1)*c.LRDecay))
		k.ds = false
		k.useWD = c.WeightDecay != 0
		k.nlr = float32(-clr)
	}
	o.pool.Run(o.n, k)
	k.p, k.g = nil, nil
}

type adagradKernel struct {
	p, g, sum    []float32
	eps, wd, nlr float32
	useWD, ds    bool
}

func (k *adagradKernel) Chunk(lo, hi int) {
	for i := lo; i < hi; i++ {
		g, p := k.g[i], k.p[i]
		num := g
		if k.useWD {
			g = fma32(p, k.wd, g)
		}
		s := fma32(g, g, k.sum[i])
		k.sum[i] = s
		d := sqrt32(s) + k.eps
		if k.ds {
			k.p[i] = fma32(num/d, k.nlr, p)
		} else {
			k.p[i] = p + float32(k.nlr*g)/d
		}
	}
}
