package optim

import (
	"errors"
	"fmt"
	"math"
)

// LambConfig is one parameter group of DeepSpeed's FusedLamb
// (deepspeed/ops/lamb/fused_lamb.py; kernel csrc/lamb/fused_lamb_cuda_kernel.cu).
type LambConfig struct {
	LR             float64    // lr, default 1e-3
	BiasCorrection bool       // bias_correction, default true
	Betas          [2]float64 // betas, default (0.9, 0.999)
	Eps            float64    // eps, default 1e-8
	// EpsInsideSqrt is eps_inside_sqrt (default false): sqrt(v+eps)
	// instead of sqrt(v)+eps.
	EpsInsideSqrt bool
	WeightDecay   float64 // weight_decay, default 0
	// MaxGradNorm (default 0) clips with the gradient norm given to
	// SetGradScale, as FP16_Optimizer passes grad_norms.
	MaxGradNorm float64
	MaxCoeff    float64 // max_coeff, default 10
	MinCoeff    float64 // min_coeff, default 0.01
	AMSGrad     bool    // rejected, as FusedLamb does
}

// DefaultLambConfig returns FusedLamb's constructor defaults.
func DefaultLambConfig() LambConfig {
	return LambConfig{LR: 1e-3, BiasCorrection: true, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8,
		MaxCoeff: 10, MinCoeff: 0.01}
}

// NormReducer sums, across the ranks whose partitions hold pieces of the
// same parameters, the per-parameter partial sums Lamb needs, in place. The
// slice is [Σw² of segment 0, Σu² of segment 0, Σw² of segment 1, ...] in
// the order of the segments given to NewLamb; every rank passes the sums of
// its own segments of the same parameters at the same positions. Nil means
// the partition holds whole parameters.
type NormReducer func(partials []float64)

// Lamb is FusedLamb over one partition split into parameter segments.
//
// The trust ratio needs the norms of each whole parameter — of its weights
// and of its Adam update — so a step runs in two passes over the
// partition: the first updates exp_avg and exp_avg_sq and sums w² and u²
// per segment (float64, in fixed 4096-element blocks, so the result does
// not depend on the number of workers); the NormReducer combines partial
// sums of parameters split across ranks; the second applies
// p -= step_size · clamp(‖w‖/‖u‖, min_coeff, max_coeff) · u.
//
// DeepSpeed's own ZeRO stages hand FusedLamb the flat partition as ONE
// tensor, so the trust ratio there is per rank partition, not per
// parameter: pass a single segment covering the partition to reproduce
// that; pass the parameters' segments (and a reducer) for real Lamb.
type Lamb struct {
	cfg       LambConfig
	n         int
	segs      []Segment
	reduce    NormReducer
	st        *stateBufs
	pool      *Pool
	steps     int64
	gradScale float64
	gradNorm  float64

	items    []lambItem // (segment, block) work units
	partials []float64  // per item: w², u²
	sums     []float64  // per segment: w², u² (after reduction)
	coeffs   []float32  // per segment trust ratio of the last step
	k        lambKernel
}

var (
	_ Optimizer  = (*Lamb)(nil)
	_ BetaSetter = (*Lamb)(nil)
)

type lambItem struct {
	seg    int
	lo, hi int
}

const lambBlock = 4096

// NewLamb allocates exp_avg and exp_avg_sq for n elements. segs must tile
// [0, n) in order (padding belongs to a segment too).
func NewLamb(cfg LambConfig, n int, segs []Segment, reduce NormReducer, a Alloc, pool *Pool) (*Lamb, error) {
	if cfg.AMSGrad {
		return nil, errors.New("FusedLamb: FusedLamb does not support the AMSGrad variant.")
	}
	at := 0
	for i, s := range segs {
		if s.Start != at || s.Len < 0 {
			return nil, fmt.Errorf("FusedLamb: segment %d starts at %d (length %d), want %d: segments must tile the partition", i, s.Start, s.Len, at)
		}
		at += s.Len
	}
	if at != n {
		return nil, fmt.Errorf("FusedLamb: segments cover %d of %d elements", at, n)
	}
	st, err := newStateBufs(a, n, "exp_avg", "exp_avg_sq")
	if err != nil {
		return nil, fmt.Errorf("FusedLamb: %w", err)
	}
	o := &Lamb{cfg: cfg, n: n, segs: append([]Segment(nil), segs...), reduce: reduce, st: st, pool: pool,
		gradScale: 1, gradNorm: math.NaN()}
	for si, s := range segs {
		for lo := s.Start; lo < s.Start+s.Len; lo += lambBlock {
			o.items = append(o.items, lambItem{seg: si, lo: lo, hi: min(lo+lambBlock, s.Start+s.Len)})
		}
	}
	o.partials = make([]float64, 2*len(o.items))
	o.sums = make([]float64, 2*len(segs))
	o.coeffs = make([]float32, len(segs))
	return o, nil
}

func (o *Lamb) Name() string                             { return "deepspeed.ops.lamb.FusedLamb" }
func (o *Lamb) Len() int                                 { return o.n }
func (o *Lamb) LR() float64                              { return o.cfg.LR }
func (o *Lamb) SetLR(lr float64)                         { o.cfg.LR = lr }
func (o *Lamb) Betas() [2]float64                        { return o.cfg.Betas }
func (o *Lamb) SetBetas(b [2]float64)                    { o.cfg.Betas = b }
func (o *Lamb) Config() LambConfig                       { return o.cfg }
func (o *Lamb) StepCount() int64                         { return o.steps }
func (o *Lamb) SetStepCount(n int64)                     { o.steps = n }
func (o *Lamb) StateNames() []string                     { return append([]string(nil), o.st.names...) }
func (o *Lamb) State(name string) []float32              { return o.st.get(name) }
func (o *Lamb) LoadState(name string, v []float32) error { return o.st.load(name, v) }
func (o *Lamb) Free()                                    { o.st.free() }

// Coeffs returns the trust ratio of each segment at the last step
// (FusedLamb.get_lamb_coeffs).
func (o *Lamb) Coeffs() []float32 { return o.coeffs }

// SetGradScale sets the scale the next step divides gradients by and the
// gradient norm used with MaxGradNorm (FusedLamb.step's scale and
// grad_norms arguments).
func (o *Lamb) SetGradScale(scale, gradNorm float64) { o.gradScale, o.gradNorm = scale, gradNorm }

// ParamGroup returns FusedLamb's param_groups entry.
func (o *Lamb) ParamGroup() map[string]any {
	c := o.cfg
	return map[string]any{"lr": c.LR, "bias_correction": c.BiasCorrection, "betas": []float64{c.Betas[0], c.Betas[1]},
		"eps": c.Eps, "weight_decay": c.WeightDecay, "max_grad_norm": c.MaxGradNorm,
		"max_coeff": c.MaxCoeff, "min_coeff": c.MinCoeff}
}

// Step applies one Lamb update.
func (o *Lamb) Step(params, grads []float32) {
	checkLens(o.n, params, grads)
	c := o.cfg
	o.steps++
	combined := o.gradScale
	if c.MaxGradNorm > 0 {
		if o.gradNorm != o.gradNorm {
			panic("optim: Lamb with max_grad_norm needs the gradient norm (SetGradScale)")
		}
		if clip := ((o.gradNorm / o.gradScale) + 1e-6) / c.MaxGradNorm; clip > 1 {
			combined = clip * o.gradScale
		}
	}
	b1, b2, lr := float32(c.Betas[0]), float32(c.Betas[1]), float32(c.LR)
	stepSize := lr
	if c.BiasCorrection {
		// std::pow(float, int) is a double pow; the results are stored in floats.
		bc1 := float32(1 - powInt(float64(b1), o.steps))
		bc2 := float32(1 - powInt(float64(b2), o.steps))
		stepSize = float32(lr*sqrt32(bc2)) / bc1
	}
	k := &o.k
	*k = lambKernel{o: o, p: params, g: grads, m: o.st.bufs[0], v: o.st.bufs[1],
		b1: b1, omb1: 1 - b1, b2: b2, omb2: 1 - b2, eps: float32(c.Eps), epsInside: c.EpsInsideSqrt,
		decay: float32(c.WeightDecay), scale: float32(combined), stepSize: stepSize}

	o.pool.Run(len(o.items), k) // pass 1: moments and partial sums
	for i := range o.sums {
		o.sums[i] = 0
	}
	for it, item := range o.items {
		o.sums[2*item.seg] += o.partials[2*it]
		o.sums[2*item.seg+1] += o.partials[2*it+1]
	}
	if o.reduce != nil {
		o.reduce(o.sums)
	}
	maxC, minC := float32(c.MaxCoeff), float32(c.MinCoeff)
	for s := range o.segs {
		rw, ru := sqrt32(float32(o.sums[2*s])), sqrt32(float32(o.sums[2*s+1]))
		coeff := float32(1)
		if rw != 0 && ru != 0 {
			coeff = rw / ru
			if coeff > maxC {
				coeff = maxC
			}
			if coeff < minC {
				coeff = minC
			}
		}
		o.coeffs[s] = coeff
	}
	k.apply = true
	o.pool.Run(len(o.items), k) // pass 2: the update
	k.p, k.g = nil, nil
	o.gradScale, o.gradNorm = 1, math.NaN()
}

type lambKernel struct {
	o                       *Lamb
	p, g, m, v              []float32
	b1, omb1, b2, omb2, eps float32
	decay, scale, stepSize  float32
	epsInside, apply        bool
}

func (k *lambKernel) Chunk(lo, hi int) {
	for it := lo; it < hi; it++ {
		item := k.o.items[it]
		if k.apply {
			k.update(item)
		} else {
			k.o.partials[2*it], k.o.partials[2*it+1] = k.moments(item)
		}
	}
}

func (k *lambKernel) denom(v float32) float32 {
	if k.epsInside {
		return sqrt32(v + k.eps)
	}
	return sqrt32(v) + k.eps
}

// moments is lamb_cuda_kernel_part1 for one block, with float64 sums.
func (k *lambKernel) moments(item lambItem) (w2, u2 float64) {
	for j := item.lo; j < item.hi; j++ {
		sg := k.g[j] / k.scale
		p := k.p[j]
		m := float32(k.b1*k.m[j]) + float32(k.omb1*sg)
		v := float32(k.b2*k.v[j]) + float32(float32(k.omb2*sg)*sg)
		k.m[j], k.v[j] = m, v
		u := m/k.denom(v) + float32(k.decay*p)
		u2 += float64(u) * float64(u)
		w2 += float64(p) * float64(p)
	}
	return w2, u2
}

// update is lamb_cuda_kernel_part3: p -= step_size * coeff * update.
func (k *lambKernel) update(item lambItem) {
	sc := float32(k.stepSize * k.o.coeffs[item.seg])
	for j := item.lo; j < item.hi; j++ {
		p := k.p[j]
		u := k.m[j]/k.denom(k.v[j]) + float32(k.decay*p)
		k.p[j] = p - float32(sc*u)
	}
}
