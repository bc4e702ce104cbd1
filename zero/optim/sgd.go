package optim

import (
	"errors"
	"fmt"
)

// SGDConfig is one parameter group of torch.optim.SGD (1.13).
type SGDConfig struct {
	LR          float64 // lr (required by torch)
	Momentum    float64 // momentum, default 0
	Dampening   float64 // dampening, default 0
	WeightDecay float64 // weight_decay, default 0
	Nesterov    bool    // nesterov, default false
}

// Validate reports what torch.optim.SGD's constructor rejects.
func (c SGDConfig) Validate() error {
	switch {
	case c.LR < 0:
		return fmt.Errorf("Invalid learning rate: %v", c.LR)
	case c.Momentum < 0:
		return fmt.Errorf("Invalid momentum value: %v", c.Momentum)
	case c.WeightDecay < 0:
		return fmt.Errorf("Invalid weight_decay value: %v", c.WeightDecay)
	case c.Nesterov && (c.Momentum <= 0 || c.Dampening != 0):
		return errors.New("Nesterov momentum requires a momentum and zero dampening")
	}
	return nil
}

// SGD is torch.optim.SGD over one partition. With momentum ≠ 0 it keeps
// momentum_buffer, which torch creates at the first step as a copy of the
// (weight-decayed) gradient; State("momentum_buffer") is nil until then.
type SGD struct {
	cfg   SGDConfig
	n     int
	st    *stateBufs
	pool  *Pool
	steps int64
	k     sgdKernel
}

var _ Optimizer = (*SGD)(nil)

// NewSGD allocates momentum_buffer (when momentum ≠ 0) through a.
func NewSGD(cfg SGDConfig, n int, a Alloc, pool *Pool) (*SGD, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("torch.optim.SGD: %w", err)
	}
	var names []string
	if cfg.Momentum != 0 {
		names = []string{"momentum_buffer"}
	}
	st, err := newStateBufs(a, n, names...)
	if err != nil {
		return nil, fmt.Errorf("torch.optim.SGD: %w", err)
	}
	if len(names) > 0 {
		st.present[0] = false // created by the first step
	}
	return &SGD{cfg: cfg, n: n, st: st, pool: pool}, nil
}

func (o *SGD) Name() string         { return "torch.optim.SGD" }
func (o *SGD) Len() int             { return o.n }
func (o *SGD) LR() float64          { return o.cfg.LR }
func (o *SGD) SetLR(lr float64)     { o.cfg.LR = lr }
func (o *SGD) Config() SGDConfig    { return o.cfg }
func (o *SGD) StepCount() int64     { return o.steps }
func (o *SGD) SetStepCount(n int64) { o.steps = n }

// StateNames is [momentum_buffer] with momentum, else empty (torch then
// stores momentum_buffer: None).
func (o *SGD) StateNames() []string                     { return append([]string(nil), o.st.names...) }
func (o *SGD) State(name string) []float32              { return o.st.get(name) }
func (o *SGD) LoadState(name string, v []float32) error { return o.st.load(name, v) }
func (o *SGD) Free()                                    { o.st.free() }

// ParamGroup returns torch 1.13's SGD param_groups entry.
func (o *SGD) ParamGroup() map[string]any {
	c := o.cfg
	return map[string]any{"lr": c.LR, "momentum": c.Momentum, "dampening": c.Dampening,
		"weight_decay": c.WeightDecay, "nesterov": c.Nesterov, "maximize": false, "foreach": nil,
		"differentiable": false}
}

// Step applies
//
//	d_p = grad.add(param, alpha=wd)                     (wd ≠ 0; an fma)
//	buf = clone(d_p) on the first step, else buf.mul_(momentum).add_(d_p, alpha=1-dampening)
//	d_p = d_p.add(buf, alpha=momentum) if nesterov else buf
//	param.add_(d_p, alpha=-lr)
func (o *SGD) Step(params, grads []float32) {
	checkLens(o.n, params, grads)
	o.steps++
	c := o.cfg
	k := &o.k
	k.p, k.g = params, grads
	k.wd, k.useWD = float32(c.WeightDecay), c.WeightDecay != 0
	k.mom, k.omd = float32(c.Momentum), float32(1-c.Dampening)
	k.nesterov = c.Nesterov
	k.nlr = float32(-c.LR)
	k.buf, k.first = nil, false
	if c.Momentum != 0 {
		k.buf = o.st.bufs[0]
		k.first = !o.st.present[0]
		o.st.present[0] = true
	}
	o.pool.Run(o.n, k)
	k.p, k.g, k.buf = nil, nil, nil
}

type sgdKernel struct {
	p, g, buf       []float32
	wd, mom, omd    float32
	nlr             float32
	useWD, nesterov bool
	first           bool
}

func (k *sgdKernel) Chunk(lo, hi int) {
	for i := lo; i < hi; i++ {
		d := k.g[i]
		if k.useWD {
			d = fma32(k.p[i], k.wd, d)
		}
		if k.buf != nil {
			b := d
			if !k.first {
				b = fma32(d, k.omd, float32(k.buf[i]*k.mom))
			}
			k.buf[i] = b
			if k.nesterov {
				d = fma32(b, k.mom, d)
			} else {
				d = b
			}
		}
		k.p[i] = fma32(d, k.nlr, k.p[i])
	}
}
