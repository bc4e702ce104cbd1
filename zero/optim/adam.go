package optim

import (
	"errors"
	"fmt"
	"math"

	"github.com/dszero/dszero/internal/vecloop"
)

// AdamFlavor selects whose Adam an Adam optimizer reproduces.
type AdamFlavor int

const (
	// TorchAdam is torch.optim.Adam 1.13 (single-tensor CPU path): weight
	// decay is an L2 term added to the gradient.
	TorchAdam AdamFlavor = iota
	// TorchAdamW is torch.optim.AdamW 1.13: decoupled decay p *= 1 - lr*wd
	// before the moment updates.
	TorchAdamW
	// DeepSpeedAdam is DeepSpeed's C++ CPU Adam kernel (csrc/includes/cpu_adam.h
	// Step_AVX), which DeepSpeedCPUAdam and, on the CPU accelerator, FusedAdam
	// run. Scalars are float32, the bias corrections are folded differently,
	// and adam_w_mode selects decoupled or L2 decay.
	DeepSpeedAdam
)

func (f AdamFlavor) String() string {
	switch f {
	case TorchAdam:
		return "torch.optim.Adam"
	case TorchAdamW:
		return "torch.optim.AdamW"
	case DeepSpeedAdam:
		return "deepspeed.ops.adam"
	}
	return fmt.Sprintf("AdamFlavor(%d)", int(f))
}

// DeepSpeedAdamOp says which DeepSpeed Python class drives the kernel; it
// only changes the param_groups entry written to checkpoints.
type DeepSpeedAdamOp int

const (
	FusedAdamOp DeepSpeedAdamOp = iota // deepspeed.ops.adam.FusedAdam
	CPUAdamOp                          // deepspeed.ops.adam.DeepSpeedCPUAdam
)

// AdamConfig is one parameter group of an Adam-family optimizer.
type AdamConfig struct {
	Flavor      AdamFlavor
	LR          float64    // lr
	Betas       [2]float64 // betas
	Eps         float64    // eps
	WeightDecay float64    // weight_decay
	// AMSGrad keeps max_exp_avg_sq (torch flavours only; DeepSpeed's kernels
	// raise "does not support the AMSGrad variant").
	AMSGrad bool
	// AdamWMode (DeepSpeedAdam only) is adam_w_mode: decoupled decay when
	// true (DeepSpeed's default), L2 decay when false.
	AdamWMode bool
	// BiasCorrection (DeepSpeedAdam only) is bias_correction, default true.
	// The torch flavours always correct.
	BiasCorrection bool
	// Op (DeepSpeedAdam only) names the Python class, for ParamGroup.
	Op DeepSpeedAdamOp
}

// DefaultAdamConfig returns the constructor defaults of the flavour:
// torch.optim.Adam (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0),
// torch.optim.AdamW (the same with weight_decay 1e-2), DeepSpeed FusedAdam
// (lr 1e-3, bias_correction, betas (0.9, 0.999), eps 1e-8, adam_w_mode,
// weight_decay 0).
func DefaultAdamConfig(f AdamFlavor) AdamConfig {
	c := AdamConfig{Flavor: f, LR: 1e-3, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8}
	switch f {
	case TorchAdamW:
		c.WeightDecay = 1e-2
	case DeepSpeedAdam:
		c.AdamWMode = true
		c.BiasCorrection = true
	}
	return c
}

// Validate reports what the flavour's Python constructor would reject.
func (c AdamConfig) Validate() error {
	switch c.Flavor {
	case TorchAdam, TorchAdamW:
		return torchHyperErr(c.LR, c.Eps, &c.Betas, c.WeightDecay)
	case DeepSpeedAdam:
		if c.AMSGrad {
			return errors.New("FusedAdam does not support the AMSGrad variant.")
		}
		return nil
	}
	return fmt.Errorf("unknown Adam flavour %d", int(c.Flavor))
}

// Adam is Adam or AdamW over one partition. See the package doc for the
// exact operations of each flavour.
type Adam struct {
	cfg   AdamConfig
	n     int
	st    *stateBufs
	pool  *Pool
	m, v  []float32 // exp_avg, exp_avg_sq
	vmax  []float32 // max_exp_avg_sq (AMSGrad)
	steps int64

	// torch keeps "step" as a float32 tensor and increments it in float32.
	stepF32 float32

	// DeepSpeed's Adam_Optimizer keeps beta^t as float32 running products
	// (IncrementStep); powStale makes the next step recompute them with
	// pow(), as a freshly created C++ optimizer does after a resume.
	dsB1, dsB2   float32
	dsB1t, dsB2t float32
	dsStep       int64
	powStale     bool

	k adamKernel
}

var (
	_ Optimizer  = (*Adam)(nil)
	_ BetaSetter = (*Adam)(nil)
)

// NewAdam allocates exp_avg and exp_avg_sq (and max_exp_avg_sq with
// AMSGrad) for a partition of n elements through a.
func NewAdam(cfg AdamConfig, n int, a Alloc, pool *Pool) (*Adam, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Flavor, err)
	}
	names := []string{"exp_avg", "exp_avg_sq"}
	if cfg.AMSGrad {
		names = append(names, "max_exp_avg_sq")
	}
	st, err := newStateBufs(a, n, names...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Flavor, err)
	}
	o := &Adam{cfg: cfg, n: n, st: st, pool: pool, m: st.bufs[0], v: st.bufs[1], dsB1t: 1, dsB2t: 1}
	if cfg.AMSGrad {
		o.vmax = st.bufs[2]
	}
	o.dsB1, o.dsB2 = float32(cfg.Betas[0]), float32(cfg.Betas[1])
	return o, nil
}

func (o *Adam) Name() string { return o.cfg.Flavor.String() }
func (o *Adam) Len() int     { return o.n }
func (o *Adam) LR() float64  { return o.cfg.LR }

// SetLR sets the group's lr.
func (o *Adam) SetLR(lr float64) { o.cfg.LR = lr }

// Betas returns the group's betas.
func (o *Adam) Betas() [2]float64 { return o.cfg.Betas }

// SetBetas sets the group's betas (OneCycle's momentum cycling).
func (o *Adam) SetBetas(b [2]float64) { o.cfg.Betas = b }

// Config returns the group's current hyper-parameters.
func (o *Adam) Config() AdamConfig { return o.cfg }

func (o *Adam) StepCount() int64 { return o.steps }

// SetStepCount restores the step count from a checkpoint.
func (o *Adam) SetStepCount(n int64) {
	o.steps = n
	o.stepF32 = float32(n)
	o.powStale = true
}

// ResumeState is what DeepSpeed's Adam keeps outside its state dict: the
// running β₁ᵗ and β₂ᵗ (float32 products, IncrementStep), the step they are
// for and the betas. A freshly created DeepSpeed optimizer recomputes them
// with pow(), which rounds differently, so DeepSpeed's own resume drifts
// from the uninterrupted run in the last bits; carrying them in dszero's
// checkpoints makes dszero's resume bit-exact. Nil for the torch flavours,
// whose state dict is complete.
func (o *Adam) ResumeState() []float64 {
	if o.cfg.Flavor != DeepSpeedAdam || o.powStale || o.dsStep == 0 {
		return nil
	}
	return []float64{float64(o.dsB1), float64(o.dsB2), float64(o.dsB1t), float64(o.dsB2t), float64(o.dsStep)}
}

// SetResumeState restores what ResumeState returned; call it after
// SetStepCount.
func (o *Adam) SetResumeState(v []float64) error {
	if o.cfg.Flavor != DeepSpeedAdam {
		return nil
	}
	if len(v) != 5 || v[4] != float64(o.steps) {
		return fmt.Errorf("%s: the resume state %v is not for step %d", o.Name(), v, o.steps)
	}
	o.dsB1, o.dsB2, o.dsB1t, o.dsB2t = float32(v[0]), float32(v[1]), float32(v[2]), float32(v[3])
	o.dsStep, o.powStale = o.steps, false
	return nil
}

// StepIsTensor tells whether the state dict stores "step" as a float32
// scalar tensor (torch.optim 1.12+) or as a Python int (DeepSpeed's Adam).
func (o *Adam) StepIsTensor() bool { return o.cfg.Flavor != DeepSpeedAdam }

func (o *Adam) StateNames() []string                     { return append([]string(nil), o.st.names...) }
func (o *Adam) State(name string) []float32              { return o.st.get(name) }
func (o *Adam) LoadState(name string, v []float32) error { return o.st.load(name, v) }
func (o *Adam) Free()                                    { o.st.free() }

// ParamGroup returns the param_groups entry torch or DeepSpeed writes.
func (o *Adam) ParamGroup() map[string]any {
	c := o.cfg
	betas := []float64{c.Betas[0], c.Betas[1]}
	switch c.Flavor {
	case TorchAdam:
		return map[string]any{"lr": c.LR, "betas": betas, "eps": c.Eps, "weight_decay": c.WeightDecay,
			"amsgrad": c.AMSGrad, "maximize": false, "foreach": nil, "capturable": false,
			"differentiable": false, "fused": false}
	case TorchAdamW:
		return map[string]any{"lr": c.LR, "betas": betas, "eps": c.Eps, "weight_decay": c.WeightDecay,
			"amsgrad": c.AMSGrad, "foreach": nil, "maximize": false, "capturable": false}
	}
	if c.Op == CPUAdamOp {
		return map[string]any{"lr": c.LR, "betas": betas, "eps": c.Eps, "weight_decay": c.WeightDecay,
			"bias_correction": c.BiasCorrection, "amsgrad": false}
	}
	return map[string]any{"lr": c.LR, "bias_correction": c.BiasCorrection, "betas": betas, "eps": c.Eps,
		"weight_decay": c.WeightDecay, "step": 0}
}

// Step applies one Adam update to params using grads.
func (o *Adam) Step(params, grads []float32) {
	checkLens(o.n, params, grads)
	o.steps++
	if o.cfg.Flavor == DeepSpeedAdam {
		o.prepareDeepSpeed()
	} else {
		o.prepareTorch()
	}
	o.k.p, o.k.g, o.k.m, o.k.v, o.k.vmax = params, grads, o.m, o.v, o.vmax
	o.pool.Run(o.n, &o.k)
	o.k.p, o.k.g = nil, nil
}

// prepareTorch computes the step's scalars as torch 1.13 does: in Python
// floats (float64), converted to float32 when a kernel receives them.
func (o *Adam) prepareTorch() {
	c := o.cfg
	o.stepF32++ // step_t += 1 on a float32 tensor
	step := int64(o.stepF32)
	b1, b2 := c.Betas[0], c.Betas[1]
	bc1 := 1 - powInt(b1, step)
	bc2 := 1 - powInt(b2, step)
	stepSize := c.LR / bc1
	k := &o.k
	k.mode = kTorchAdam
	if c.Flavor == TorchAdamW {
		k.mode = kTorchAdamW
		k.decay = float32(1 - float64(c.LR*c.WeightDecay))
	} else if c.WeightDecay != 0 {
		k.mode = kTorchAdamL2
	}
	k.amsgrad = c.AMSGrad
	k.wd = float32(c.WeightDecay)
	k.b1, k.omb1 = float32(b1), float32(1-b1)
	k.b2, k.omb2 = float32(b2), float32(1-b2)
	k.bc2 = float32(math.Sqrt(bc2))
	k.eps = float32(c.Eps)
	k.ss = float32(-stepSize)
}

// prepareDeepSpeed reproduces Adam_Optimizer::IncrementStep and
// update_state (cpu_adam.h): every scalar is a float32.
func (o *Adam) prepareDeepSpeed() {
	c := o.cfg
	b1, b2 := float32(c.Betas[0]), float32(c.Betas[1])
	step := o.steps
	switch {
	case b1 != o.dsB1 || b2 != o.dsB2 || o.powStale:
		o.dsB1, o.dsB2 = b1, b2
		o.dsB1t = float32(powInt(float64(b1), step)) // std::pow(float, size_t) is a double pow
		o.dsB2t = float32(powInt(float64(b2), step))
	case step == o.dsStep+1:
		o.dsB1t = float32(o.dsB1t * b1)
		o.dsB2t = float32(o.dsB2t * b2)
	case step == o.dsStep:
	default:
		o.dsB1t = float32(powInt(float64(b1), step))
		o.dsB2t = float32(powInt(float64(b2), step))
	}
	o.dsStep, o.powStale = step, false

	lr := float32(c.LR)
	wd := float32(c.WeightDecay)
	bc1, bc2 := float32(1), float32(1)
	if c.BiasCorrection {
		bc1 = 1 - o.dsB1t
		bc2 = 1 / sqrt32(1-o.dsB2t)
	}
	k := &o.k
	k.mode = kDeepSpeed
	k.dsL2 = wd > 0 && !c.AdamWMode
	k.dsDecoupled = wd > 0 && c.AdamWMode
	k.wd = wd
	k.b1, k.omb1 = b1, 1-b1
	k.b2, k.omb2 = b2, 1-b2
	k.bc2 = bc2
	k.eps = float32(c.Eps)
	k.ss = -1 * lr / bc1
	k.decay = -1 * lr * wd
}

type adamKernelMode int

const (
	kTorchAdam adamKernelMode = iota
	kTorchAdamL2
	kTorchAdamW
	kDeepSpeed
)

// adamKernel holds one step's float32 scalars and buffers.
type adamKernel struct {
	mode               adamKernelMode
	amsgrad            bool
	dsL2, dsDecoupled  bool
	decay, wd          float32
	b1, omb1, b2, omb2 float32
	bc2, eps, ss       float32
	p, g, m, v, vmax   []float32
}

// vecBlock is the most elements one assembly call gets (vecloop.Block);
// the tests size their buffers by it on every build.
const vecBlock = vecloop.Block

// Chunk runs the AVX2 kernels (adam_avx2_amd64.go), where the CPU has
// them, on all but the last (hi-lo)%8 elements, and the scalar kernels on
// the rest: the whole range with AMSGrad, on other CPUs and under the
// purego build tag. Both give the same bits.
func (k *adamKernel) Chunk(lo, hi int) {
	k.scalar(k.vector(lo, hi), hi)
}

// scalar updates [lo, hi) one element at a time.
func (k *adamKernel) scalar(lo, hi int) {
	switch {
	case k.mode == kDeepSpeed:
		k.deepSpeed(lo, hi)
	case k.amsgrad:
		k.torchAMSGrad(lo, hi)
	case k.mode == kTorchAdamW:
		k.torchAdamW(lo, hi)
	default:
		k.torchAdam(lo, hi)
	}
}

// torchAdamW is, per element, what torch 1.13's CPU kernels compute for
//
//	param.mul_(1 - lr*wd)
//	exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)            # fmadd
//	exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2) # contracted to an fma
//	denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//	param.addcdiv_(exp_avg, denom, value=-step_size)
func (k *adamKernel) torchAdamW(lo, hi int) {
	p, g, m, v := k.p[lo:hi], k.g[lo:hi], k.m[lo:hi], k.v[lo:hi]
	m, v, g = m[:len(p)], v[:len(p)], g[:len(p)]
	decay, b1, omb1, b2, omb2, bc2, eps, ss := k.decay, k.b1, k.omb1, k.b2, k.omb2, k.bc2, k.eps, k.ss
	// omb1 is converted once: a conversion inside the loop writes only the
	// low half of its register, which makes every iteration wait for the
	// previous one's last use of that register (a false dependency).
	omb1d := float64(omb1)
	for i := 0; i < len(p); i++ {
		// The fast loop has no calls, so the compiler keeps everything in
		// registers; an element whose fma needs the exact slow path (a
		// float32 midpoint or subnormal) leaves it.
		for ; i < len(p); i++ {
			gi := g[i]
			m1, gs, v1 := float32(m[i]*b1), float32(omb2*gi), float32(v[i]*b2)
			gd := float64(gi)
			sm := float64(gd*omb1d) + float64(m1)
			sv := float64(float64(gs)*gd) + float64(v1)
			if !roundsLikeExact(sm) || !roundsLikeExact(sv) {
				break
			}
			mi, vi := float32(sm), float32(sv)
			d := sqrt32(vi)/bc2 + eps
			p[i] = float32(p[i]*decay) + float32(ss*mi)/d
			m[i], v[i] = mi, vi
		}
		if i < len(p) {
			gi := g[i]
			mi := fma32(gi, omb1, float32(m[i]*b1))
			vi := fma32(float32(omb2*gi), gi, float32(v[i]*b2))
			d := sqrt32(vi)/bc2 + eps
			p[i] = float32(p[i]*decay) + float32(ss*mi)/d
			m[i], v[i] = mi, vi
		}
	}
}

// torchAdam is torch.optim.Adam: grad = grad.add(param, alpha=wd) (an fma)
// when wd ≠ 0, then the AdamW sequence without the decay.
func (k *adamKernel) torchAdam(lo, hi int) {
	p, g, m, v := k.p[lo:hi], k.g[lo:hi], k.m[lo:hi], k.v[lo:hi]
	m, v, g = m[:len(p)], v[:len(p)], g[:len(p)]
	l2 := k.mode == kTorchAdamL2
	wd, b1, omb1, b2, omb2, bc2, eps, ss := k.wd, k.b1, k.omb1, k.b2, k.omb2, k.bc2, k.eps, k.ss
	for i := range p {
		gi := g[i]
		if l2 {
			gi = fma32(p[i], wd, gi)
		}
		mi := fma32(gi, omb1, float32(m[i]*b1))
		vi := fma32(float32(omb2*gi), gi, float32(v[i]*b2))
		d := sqrt32(vi)/bc2 + eps
		p[i] = p[i] + float32(ss*mi)/d
		m[i], v[i] = mi, vi
	}
}

// torchAMSGrad is either torch flavour with amsgrad: the denominator uses
// max_exp_avg_sq = maximum(max_exp_avg_sq, exp_avg_sq).
func (k *adamKernel) torchAMSGrad(lo, hi int) {
	for i := lo; i < hi; i++ {
		gi, pi := k.g[i], k.p[i]
		switch k.mode {
		case kTorchAdamW:
			pi = float32(pi * k.decay)
		case kTorchAdamL2:
			gi = fma32(pi, k.wd, gi)
		}
		mi := fma32(gi, k.omb1, float32(k.m[i]*k.b1))
		vi := fma32(float32(k.omb2*gi), gi, float32(k.v[i]*k.b2))
		mx := k.vmax[i]
		if vi > mx || vi != vi {
			mx = vi
		}
		d := sqrt32(mx)/k.bc2 + k.eps
		k.p[i] = pi + float32(k.ss*mi)/d
		k.m[i], k.v[i], k.vmax[i] = mi, vi, mx
	}
}

// deepSpeed is Adam_Optimizer::Step_AVX (cpu_adam.h), one lane at a time:
//
//	grad = fma(param, wd, grad)                 (L2 mode, wd > 0)
//	m = fma(grad, 1-b1, m*b1)
//	v = fma(grad*grad, 1-b2, v*b2)
//	u = m / fma(sqrt(v), 1/sqrt(1-b2^t), eps)
//	param = fma(param, -lr*wd, param)           (AdamW mode, wd > 0)
//	param = fma(u, -lr/(1-b1^t), param)
func (k *adamKernel) deepSpeed(lo, hi int) {
	p, g, m, v := k.p[lo:hi], k.g[lo:hi], k.m[lo:hi], k.v[lo:hi]
	m, v, g = m[:len(p)], v[:len(p)], g[:len(p)]
	l2, dec := k.dsL2, k.dsDecoupled
	b1, b2 := k.b1, k.b2
	// Loop invariants converted once (see torchAdamW).
	wdd, decd, omb1d, omb2d := float64(k.wd), float64(k.decay), float64(k.omb1), float64(k.omb2)
	bc2d, epsd, ssd := float64(k.bc2), float64(k.eps), float64(k.ss)
	for i := 0; i < len(p); i++ {
		for ; i < len(p); i++ {
			gi, pi := g[i], p[i]
			ok := true
			if l2 {
				s := float64(float64(pi)*wdd) + float64(gi)
				ok, gi = roundsLikeExact(s), float32(s)
			}
			sm := float64(float64(gi)*omb1d) + float64(float32(m[i]*b1))
			sv := float64(float64(float32(gi*gi))*omb2d) + float64(float32(v[i]*b2))
			mi, vi := float32(sm), float32(sv)
			sd := float64(float64(sqrt32(vi))*bc2d) + epsd
			u := mi / float32(sd)
			if dec {
				s := float64(float64(pi)*decd) + float64(pi)
				ok, pi = ok && roundsLikeExact(s), float32(s)
			}
			sp := float64(float64(u)*ssd) + float64(pi)
			if !ok || !roundsLikeExact(sm) || !roundsLikeExact(sv) || !roundsLikeExact(sd) || !roundsLikeExact(sp) {
				break
			}
			p[i], m[i], v[i] = float32(sp), mi, vi
		}
		if i < len(p) {
			k.deepSpeedExact(p, g, m, v, i)
		}
	}
}

// deepSpeedExact updates element i with the general fma32.
func (k *adamKernel) deepSpeedExact(p, g, m, v []float32, i int) {
	gi, pi := g[i], p[i]
	if k.dsL2 {
		gi = fma32(pi, k.wd, gi)
	}
	mi := fma32(gi, k.omb1, float32(m[i]*k.b1))
	vi := fma32(float32(gi*gi), k.omb2, float32(v[i]*k.b2))
	u := mi / fma32(sqrt32(vi), k.bc2, k.eps)
	if k.dsDecoupled {
		pi = fma32(pi, k.decay, pi)
	}
	p[i] = fma32(u, k.ss, pi)
	m[i], v[i] = mi, vi
}
