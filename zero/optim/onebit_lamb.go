package optim

import (
	"context"
	"fmt"
	"math"

	"github.com/dszero/dszero/comm"
)

// OneBitLambConfig is DeepSpeed's OnebitLamb (runtime/fp16/onebit/lamb.py)
// as its ds_config params give it.
type OneBitLambConfig struct {
	LR          float64
	Betas       [2]float64
	Eps         float64
	WeightDecay float64
	FreezeStep  int64   // freeze_step (100000)
	MaxCoeff    float64 // max_coeff (10): the warm-up trust ratio's ceiling
	MinCoeff    float64 // min_coeff (0.01): its floor
	CoeffBeta   float64 // coeff_beta (0.9): the EMA of the warm-up trust ratios
	FactorMax   float64 // factor_max (4): the compressed phase's factor's ceiling
	FactorMin   float64 // factor_min (0.5): its floor
	// FactorThreshold is factor_threshold (0.1): how far the factor may move
	// from one step to the next, relatively.
	FactorThreshold float64
	BiasCorrection  bool // stored as DeepSpeed does; unused by its update
	EpsInsideSqrt   bool
}

// DefaultOneBitLambConfig is OnebitLamb's constructor defaults.
func DefaultOneBitLambConfig() OneBitLambConfig {
	return OneBitLambConfig{LR: 1e-3, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, FreezeStep: 100000, MaxCoeff: 10, MinCoeff: 0.01,
		CoeffBeta: 0.9, FactorMax: 4, FactorMin: 0.5, FactorThreshold: 0.1, BiasCorrection: true}
}

// Validate checks the hyper-parameters.
func (c OneBitLambConfig) Validate() error {
	if err := torchHyperErr(c.LR, c.Eps, &c.Betas, c.WeightDecay); err != nil {
		return err
	}
	if c.FreezeStep < 0 {
		return fmt.Errorf("freeze_step must be ≥ 0, got %d", c.FreezeStep)
	}
	if c.Betas[0] == 0 {
		return fmt.Errorf("betas[0] must be > 0 for 1-bit Lamb (it divides by 1 − β₁ and scales by β₁ to rebuild the gradient)")
	}
	return nil
}

// OneBitLamb is DeepSpeed 0.14.5's OnebitLamb (arXiv:2104.06069) over the
// tensors of one flat buffer (each segment one parameter), on one rank's
// communicator:
//
//   - The first Step is the initialization pass (the zero momentum, all
//     tensors in one flat padded buffer, through the compressed
//     all-reduce; nothing updated).
//   - Warm-up, averaged gradients: per tensor m = β₁m + (1−β₁)g,
//     v = β₂v + (1−β₂)g², u = m/(√v + ε) (+ wd·p), the trust ratio
//     c = clamp(‖p‖/‖u‖, min_coeff, max_coeff) (1 when a norm is 0), its
//     EMA c̄ = coeff_beta·c̄ + (1−coeff_beta)·c when c ≠ 1, p −= lr·c·u; at
//     the step freeze_step, v is copied into v_fresh.
//   - Compressed, the rank's own gradients: each tensor's m is scaled by
//     s_t = (mean of the tensors' ‖m‖/√n at the first compressed step) /
//     its own, all tensors' m go through the compressed all-reduce as one
//     flat buffer (padded to world·lcm(world, 8); the padding is kept from
//     step to step, as DeepSpeed's dummy tensor is), and are scaled back;
//     the gradient is rebuilt as (m − β₁m_prev)/(1−β₁) to update v_fresh;
//     u as in the warm-up with the frozen v; the factor
//     f = max((√v + ε)/(√v_fresh + ε)) (blended with ‖u_prelim‖/‖u‖ under
//     weight decay), clamped to [factor_min, factor_max] and to within
//     factor_threshold of the last; p −= lr·c̄·f·u.
//
// No bias correction. Norms are summed in float64 and rounded to float32
// (torch sums in float32); the trust ratios and factors are Python floats.
type OneBitLamb struct {
	cfg  OneBitLambConfig
	n    int
	segs []Segment
	st   *stateBufs // exp_avg, exp_avg_sq, exp_avg_sq_fresh
	flat []float32  // exp_avg and its padding, the compressed buffer
	last []float32  // exp_avg before this step's update (frozen phase)
	x    *tensorExchange

	steps       int64
	initialized bool
	frozen      bool // lamb_freeze_key
	local       bool

	coeffFreeze []float64 // lamb_coeff_freeze per tensor
	lastFactor  []float64 // last_factor per tensor
	scaling     []float64 // scaling_coeff per tensor; nil until the first compressed step

	errStep error
}

var _ Exchanging = (*OneBitLamb)(nil)

// NewOneBitLamb is 1-bit Lamb over n elements cut into segs, exchanging on
// c under ctx.
func NewOneBitLamb(cfg OneBitLambConfig, n int, segs []Segment, ctx context.Context, c comm.Comm, a Alloc) (*OneBitLamb, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	checkSegments("1-bit Lamb", n, segs)
	st, err := newStateBufs(a, n, "exp_avg", "exp_avg_sq", "exp_avg_sq_fresh")
	if err != nil {
		return nil, err
	}
	o := &OneBitLamb{cfg: cfg, n: n, segs: segs, st: st, flat: make([]float32, OneBitPadded(n, c.Size())),
		last: make([]float32, n), x: newTensorExchange("1-bit Lamb", ctx, c, []Segment{{Param: 0, Start: 0, Len: n}}),
		coeffFreeze: make([]float64, len(segs)), lastFactor: make([]float64, len(segs))}
	for i := range o.lastFactor {
		o.lastFactor[i] = 1
	}
	return o, nil
}

func (o *OneBitLamb) Name() string                 { return "OnebitLamb" }
func (o *OneBitLamb) Len() int                     { return o.n }
func (o *OneBitLamb) LR() float64                  { return o.cfg.LR }
func (o *OneBitLamb) SetLR(lr float64)             { o.cfg.LR = lr }
func (o *OneBitLamb) StepCount() int64             { return o.steps }
func (o *OneBitLamb) StateNames() []string         { return o.st.names }
func (o *OneBitLamb) Betas() [2]float64            { return o.cfg.Betas }
func (o *OneBitLamb) SetBetas(b [2]float64)        { o.cfg.Betas = b }
func (o *OneBitLamb) Free()                        { o.st.free() }
func (o *OneBitLamb) LocalGradients() bool         { return o.local }
func (o *OneBitLamb) Frozen() bool                 { return o.frozen }
func (o *OneBitLamb) Err() error                   { return o.errStep }
func (o *OneBitLamb) Step(params, grads []float32) { o.errStep = o.StepExchange(params, grads) }

// State is a live state tensor; exp_avg is the first n elements of the
// flat compressed buffer.
func (o *OneBitLamb) State(name string) []float32 {
	if name == "exp_avg" {
		return o.flat[:o.n]
	}
	return o.st.get(name)
}

// LoadState copies a checkpointed state tensor.
func (o *OneBitLamb) LoadState(name string, v []float32) error {
	if name == "exp_avg" {
		if len(v) != o.n {
			return fmt.Errorf("state %q has %d elements, the partition has %d", name, len(v), o.n)
		}
		copy(o.flat, v)
		return nil
	}
	return o.st.load(name, v)
}

// SetStepCount restores the step count, sets the phase from it as
// DeepSpeed's load_state_dict does, and drops the errors and the scaling
// coefficients (the next Step is the initialization pass again).
func (o *OneBitLamb) SetStepCount(n int64) {
	o.steps = n
	o.frozen = n >= o.cfg.FreezeStep
	o.local = o.frozen
	o.scaling = nil
	o.x.reset()
}

// ParamGroup is OnebitLamb's defaults dict.
func (o *OneBitLamb) ParamGroup() map[string]any {
	c := o.cfg
	return map[string]any{"lr": c.LR, "bias_correction": c.BiasCorrection, "betas": []float64{c.Betas[0], c.Betas[1]},
		"eps": c.Eps, "weight_decay": c.WeightDecay, "max_grad_norm": 0.0, "max_coeff": c.MaxCoeff, "min_coeff": c.MinCoeff}
}

func norm32(x []float32) float32 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return float32(math.Sqrt(s))
}

// Initialize is the initialization pass (see OneBitAdam.Initialize): the
// zero flat momentum through the compressed all-reduce, nothing updated.
// A collective; a no-op after the first call.
func (o *OneBitLamb) Initialize() error {
	if o.initialized {
		return nil
	}
	o.steps++
	if o.x.c.Size() > 1 {
		if err := o.x.run(0, o.flat, o.steps); err != nil {
			return err
		}
	}
	o.x.reset()
	o.initialized, o.frozen = true, false
	return nil
}

// StepExchange implements Exchanging: one OnebitLamb.step.
func (o *OneBitLamb) StepExchange(params, grads []float32) error {
	checkLens(o.n, params, grads)
	multi := o.x.c.Size() > 1
	m, v, vf := o.flat[:o.n], o.st.get("exp_avg_sq"), o.st.get("exp_avg_sq_fresh")
	b1, b2 := float32(o.cfg.Betas[0]), float32(o.cfg.Betas[1])
	c1, c2 := float32(1-o.cfg.Betas[0]), float32(1-o.cfg.Betas[1])
	eps, wd := float32(o.cfg.Eps), float32(o.cfg.WeightDecay)
	if !o.initialized {
		return o.Initialize()
	}
	o.steps++
	if !o.frozen {
		for i, s := range o.segs {
			lo, hi := s.Start, s.Start+s.Len
			mm, vv, g, p := m[lo:hi], v[lo:hi], grads[lo:hi], params[lo:hi]
			for j, gj := range g {
				mm[j] = float32(mm[j]*b1) + float32(c1*gj)
				vv[j] = float32(vv[j]*b2) + float32(c2*float32(gj*gj))
			}
			if o.steps == o.cfg.FreezeStep {
				copy(vf[lo:hi], vv)
			}
			u := o.last[lo:hi] // scratch for the update
			for j := range u {
				u[j] = mm[j] / (float32(math.Sqrt(float64(vv[j]))) + eps)
				if wd > 0 {
					u[j] += float32(wd * p[j])
				}
			}
			wn, un := norm32(p), norm32(u)
			coeff := 1.0
			if wn != 0 && un != 0 {
				coeff = max(min(float64(wn/un), o.cfg.MaxCoeff), o.cfg.MinCoeff) // DeepSpeed's order
			}
			if coeff != 1 {
				o.coeffFreeze[i] = o.cfg.CoeffBeta*o.coeffFreeze[i] + (1-o.cfg.CoeffBeta)*coeff
			}
			k := float32(-o.cfg.LR * coeff)
			for j := range p {
				p[j] += float32(k * u[j])
			}
		}
		if o.steps >= o.cfg.FreezeStep {
			o.frozen, o.local = true, true
		}
		return nil
	}

	copy(o.last, m)
	if o.scaling == nil {
		scales := make([]float64, len(o.segs))
		var sum float64
		for i, s := range o.segs {
			scales[i] = float64(norm32(m[s.Start:s.Start+s.Len]) / float32(math.Sqrt(float64(s.Len))))
			sum += scales[i]
		}
		united := sum / float64(len(o.segs))
		o.scaling = make([]float64, len(o.segs))
		for i := range scales {
			o.scaling[i] = united / scales[i]
		}
	}
	for i, s := range o.segs {
		lo, hi := s.Start, s.Start+s.Len
		sc := float32(o.scaling[i])
		for j, gj := range grads[lo:hi] {
			mm := float32(m[lo+j]*b1) + float32(c1*gj)
			m[lo+j] = mm * sc
		}
	}
	if multi {
		if err := o.x.run(0, o.flat, o.steps); err != nil {
			return err
		}
	}
	for i, s := range o.segs {
		lo, hi := s.Start, s.Start+s.Len
		mm, vv, vvf, p, prev := m[lo:hi], v[lo:hi], vf[lo:hi], params[lo:hi], o.last[lo:hi]
		sc := float32(o.scaling[i])
		var prelimSq, updSq float64
		factor := math.Inf(-1)
		for j := range mm {
			mm[j] /= sc
			gr := float32(mm[j]-float32(prev[j]*b1)) / c1
			vvf[j] = float32(vvf[j]*b2) + float32(c2*float32(gr*gr))
			denom := float32(math.Sqrt(float64(vv[j]))) + eps
			pre := mm[j] / denom
			u := pre
			if wd > 0 {
				u = pre + float32(wd*p[j])
			}
			prelimSq += float64(pre) * float64(pre)
			updSq += float64(u) * float64(u)
			factor = max(factor, float64(denom/(float32(math.Sqrt(float64(vvf[j])))+eps)))
			prev[j] = u // prev is done with: keep the update
		}
		un := float32(math.Sqrt(updSq))
		if wd > 0 {
			ratio := min(1.0, float64(float32(math.Sqrt(prelimSq))/un))
			factor = factor*ratio + (1 - ratio)
		}
		factor = max(min(factor, o.cfg.FactorMax), o.cfg.FactorMin) // DeepSpeed's order
		factor = min(factor, o.lastFactor[i]*(1+o.cfg.FactorThreshold))
		factor = max(factor, o.lastFactor[i]*(1-o.cfg.FactorThreshold))
		o.lastFactor[i] = factor
		k := float32(-o.cfg.LR * (o.coeffFreeze[i] * factor))
		for j := range p {
			p[j] += float32(k * prev[j])
		}
	}
	return nil
}
