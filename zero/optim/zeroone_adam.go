package optim

import (
	"context"
	"fmt"
	"math"

	"github.com/dszero/dszero/comm"
)

// ZeroOneAdamConfig is DeepSpeed's ZeroOneAdam (runtime/fp16/onebit/zoadam.py)
// as its ds_config params give it.
type ZeroOneAdamConfig struct {
	LR          float64
	Betas       [2]float64
	Eps         float64
	WeightDecay float64
	// VarFreezeStep is var_freeze_step (default 100000): after the step
	// whose count exceeds it the variance is frozen and the ranks take
	// local steps, syncing through the compressed all-reduce.
	VarFreezeStep int64
	// VarUpdateScaler is var_update_scaler (16): how many variance updates
	// at one interval before the interval doubles.
	VarUpdateScaler int64
	// LocalStepScaler is local_step_scaler (32678): how many frozen steps
	// at one sync interval before it doubles; LocalStepClipper
	// (local_step_clipper, 16) is the interval's ceiling.
	LocalStepScaler  int64
	LocalStepClipper int64
	// BiasCorrection and EpsInsideSqrt are stored as DeepSpeed does; its
	// update uses neither.
	BiasCorrection bool
	EpsInsideSqrt  bool
}

// DefaultZeroOneAdamConfig is ZeroOneAdam's constructor defaults.
func DefaultZeroOneAdamConfig() ZeroOneAdamConfig {
	return ZeroOneAdamConfig{LR: 1e-3, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, VarFreezeStep: 100000,
		VarUpdateScaler: 16, LocalStepScaler: 32678, LocalStepClipper: 16, BiasCorrection: true}
}

// Validate checks what ZeroOneAdam's constructor and step would fail on
// (a local_step_clipper below 1 makes its interval 0: step % 0).
func (c ZeroOneAdamConfig) Validate() error {
	if err := torchHyperErr(c.LR, c.Eps, &c.Betas, c.WeightDecay); err != nil {
		return err
	}
	switch {
	case c.VarFreezeStep < 0:
		return fmt.Errorf("var_freeze_step must be ≥ 0, got %d", c.VarFreezeStep)
	case c.VarUpdateScaler < 0 || c.LocalStepScaler < 0:
		return fmt.Errorf("var_update_scaler and local_step_scaler must be ≥ 0, got %d and %d", c.VarUpdateScaler, c.LocalStepScaler)
	case c.LocalStepClipper < 1:
		return fmt.Errorf("local_step_clipper must be ≥ 1 (DeepSpeed divides the step by it), got %d", c.LocalStepClipper)
	}
	return nil
}

// ZeroOneAdam is DeepSpeed 0.14.5's ZeroOneAdam (0/1 Adam,
// arXiv:2202.06009) over the tensors of one flat buffer on one rank's
// communicator, step for step as zoadam.py takes it:
//
//   - The first Step is the initialization pass: the step count rises, the
//     zero momentum accumulator goes through the compressed all-reduce
//     (world > 1), nothing is updated.
//   - Before the variance freeze, a step whose count is a multiple of the
//     variance interval (1, doubling after VarUpdateScaler updates at it)
//     has averaged gradients and updates m and v as Adam does; the other
//     steps have the rank's own gradients, average them through the
//     compressed all-reduce and update m only (world > 1).
//   - After the step whose count exceeds VarFreezeStep, every step is
//     local: m from the rank's gradient, the update applied and also
//     accumulated (with the lr) in a buffer; at every sync interval (1,
//     doubling after LocalStepScaler steps, at most LocalStepClipper) the
//     accumulated update, scaled by √v + ε, is averaged compressed, the
//     local updates are replaced by the average, and m becomes −(average)/Σlr.
//
// The update is u = m/(√v + ε) (+ wd·p), p −= lr·u, without bias
// correction. Each tensor is padded and keeps its errors as in OneBitAdam;
// they are zeroed once, at the freeze.
type ZeroOneAdam struct {
	cfg  ZeroOneAdamConfig
	n    int
	segs []Segment
	st   *stateBufs // exp_avg, exp_avg_sq
	acc  []float32  // momentum_accumulator
	x    *tensorExchange

	steps       int64
	initialized bool
	frozen      bool // freeze_key
	reinit      bool // reinitial_error_buffer
	local       bool // not engine.enable_backward_allreduce

	varInterval, varCounter     int64
	localInterval, localCounter int64
	lrs                         float64 // Σ lr since the last sync (a Python float)
	lrsFloat                    bool    // lrs is a float: DeepSpeed resets it to the int 0

	// For the checkpoint's key order: whether DeepSpeed's state holds the
	// momentum_accumulator, and per tensor whether its errors were made
	// after it (they follow it in the state dict).
	accKept  bool
	errAfter []bool

	errStep error
}

var _ Exchanging = (*ZeroOneAdam)(nil)

// NewZeroOneAdam is 0/1 Adam over n elements cut into segs, exchanging on
// c under ctx.
func NewZeroOneAdam(cfg ZeroOneAdamConfig, n int, segs []Segment, ctx context.Context, c comm.Comm, a Alloc) (*ZeroOneAdam, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	checkSegments("0/1 Adam", n, segs)
	st, err := newStateBufs(a, n, "exp_avg", "exp_avg_sq")
	if err != nil {
		return nil, err
	}
	o := &ZeroOneAdam{cfg: cfg, n: n, segs: segs, st: st, acc: make([]float32, n), x: newTensorExchange("0/1 Adam", ctx, c, segs),
		errAfter: make([]bool, len(segs))}
	o.resetCounters()
	return o, nil
}

func (o *ZeroOneAdam) resetCounters() {
	o.varInterval, o.varCounter, o.localInterval, o.localCounter, o.lrs, o.lrsFloat = 1, 0, 1, 0, 0, false
}

// ensureErrors gives the tensors without errors zero ones, as the start of
// DeepSpeed's step does for a state without worker_error (resetting that
// tensor's counters and accumulator too: they hold their initial values
// whenever that happens here — after the initialization pass, or after a
// load, which Initialize or SetStepCount has reset).
func (o *ZeroOneAdam) ensureErrors() {
	for i := range o.segs {
		if w, _ := o.x.errors(i); w == nil {
			o.x.ensure(i)
			o.errAfter[i] = o.accKept
		}
	}
	o.accKept = true
}

func (o *ZeroOneAdam) Name() string             { return "ZeroOneAdam" }
func (o *ZeroOneAdam) Len() int                 { return o.n }
func (o *ZeroOneAdam) LR() float64              { return o.cfg.LR }
func (o *ZeroOneAdam) SetLR(lr float64)         { o.cfg.LR = lr }
func (o *ZeroOneAdam) StepCount() int64         { return o.steps }
func (o *ZeroOneAdam) StateNames() []string     { return o.st.names }
func (o *ZeroOneAdam) State(n string) []float32 { return o.st.get(n) }
func (o *ZeroOneAdam) Betas() [2]float64        { return o.cfg.Betas }
func (o *ZeroOneAdam) SetBetas(b [2]float64)    { o.cfg.Betas = b }
func (o *ZeroOneAdam) Free()                    { o.st.free() }

// LocalGradients implements Exchanging.
func (o *ZeroOneAdam) LocalGradients() bool { return o.local }

// Frozen reports whether the variance is frozen (freeze_key).
func (o *ZeroOneAdam) Frozen() bool { return o.frozen }

// SetStepCount restores the step count as DeepSpeed's load_state_dict
// does: the errors and the accumulator are dropped, and the intervals
// restart at the next Step (the initialization pass when it is the first,
// else the start of the step, which finds no worker_error). The gradient
// exchange of the next training step follows the loaded step: local from
// var_freeze_step on, and before it local unless the loaded variance
// interval divides the step after the loaded one (LoadTensorState; 1
// without one).
func (o *ZeroOneAdam) SetStepCount(n int64) {
	o.steps = n
	o.local = n >= o.cfg.VarFreezeStep
	o.reinit = false
	o.x.reset()
	clear(o.acc)
	o.accKept = false
}

// LoadState copies a checkpointed exp_avg or exp_avg_sq.
func (o *ZeroOneAdam) LoadState(name string, v []float32) error { return o.st.load(name, v) }

// ParamGroup is ZeroOneAdam's defaults dict.
func (o *ZeroOneAdam) ParamGroup() map[string]any {
	c := o.cfg
	return map[string]any{"lr": c.LR, "bias_correction": c.BiasCorrection, "betas": []float64{c.Betas[0], c.Betas[1]},
		"eps": c.Eps, "weight_decay": c.WeightDecay, "max_grad_norm": 0.0}
}

// Step is StepExchange; its error is kept for Err.
func (o *ZeroOneAdam) Step(params, grads []float32) { o.errStep = o.StepExchange(params, grads) }

// Err is the error of the last Step.
func (o *ZeroOneAdam) Err() error { return o.errStep }

// Initialize is the initialization pass (see OneBitAdam.Initialize): the
// zero momentum accumulator through the compressed all-reduce, the
// intervals at their start, nothing updated. A collective; a no-op after
// the first call.
func (o *ZeroOneAdam) Initialize() error {
	if o.initialized {
		return nil
	}
	o.steps++
	o.x.reset() // the pass makes every tensor's errors and accumulator anew
	clear(o.acc)
	o.accKept = false
	o.ensureErrors()
	if o.x.c.Size() > 1 {
		for i, s := range o.segs {
			if err := o.x.run(i, o.acc[s.Start:s.Start+s.Len], o.steps); err != nil {
				return err
			}
		}
	}
	// DeepSpeed pops the last tensor's errors only (see OneBitAdam's); the
	// zero accumulator left every error zero.
	o.x.drop(len(o.segs) - 1)
	o.resetCounters()
	clear(o.acc)
	o.initialized, o.frozen = true, false
	return nil
}

// StepExchange implements Exchanging: one ZeroOneAdam.step.
func (o *ZeroOneAdam) StepExchange(params, grads []float32) error {
	checkLens(o.n, params, grads)
	if !o.initialized {
		return o.Initialize()
	}
	o.steps++
	o.ensureErrors()
	multi := o.x.c.Size() > 1
	m, v := o.st.get("exp_avg"), o.st.get("exp_avg_sq")
	b1, b2 := float32(o.cfg.Betas[0]), float32(o.cfg.Betas[1])
	c1, c2 := float32(1-o.cfg.Betas[0]), float32(1-o.cfg.Betas[1])
	eps, wd, nlr := float32(o.cfg.Eps), float32(o.cfg.WeightDecay), float32(-o.cfg.LR)
	sync := o.frozen && o.steps%o.localInterval == 0
	if o.frozen {
		o.lrs += o.cfg.LR // once per step: every tensor's state['lrs'] is the same
		o.lrsFloat = true
	}
	for i, s := range o.segs {
		lo, hi := s.Start, s.Start+s.Len
		mm, vv, g, p, acc := m[lo:hi], v[lo:hi], grads[lo:hi], params[lo:hi], o.acc[lo:hi]
		switch {
		case o.frozen:
			for j, gj := range g {
				mm[j] = float32(mm[j]*b1) + float32(c1*gj)
			}
		case o.steps%o.varInterval == 0:
			for j, gj := range g {
				vv[j] = float32(vv[j]*b2) + float32(c2*float32(gj*gj))
				mm[j] = float32(mm[j]*b1) + float32(c1*gj)
			}
		case multi:
			if err := o.x.run(i, g, o.steps); err != nil {
				return err
			}
			for j, gj := range g {
				mm[j] = float32(mm[j]*b1) + float32(c1*gj)
			}
		}
		for j := range p {
			u := mm[j] / (float32(math.Sqrt(float64(vv[j]))) + eps)
			if wd > 0 {
				u += float32(wd * p[j])
			}
			d := float32(nlr * u)
			p[j] += d
			if o.frozen {
				acc[j] += d
			}
		}
		if sync {
			for j := range p {
				p[j] -= acc[j]
				acc[j] *= float32(math.Sqrt(float64(vv[j]))) + eps
			}
			if multi {
				if err := o.x.run(i, acc, o.steps); err != nil {
					return err
				}
			}
			lrs := float32(o.lrs)
			for j := range p {
				mm[j] = -(acc[j] / lrs)
				p[j] += acc[j] / (float32(math.Sqrt(float64(vv[j]))) + eps)
			}
			clear(acc)
		}
	}
	if sync {
		o.lrs, o.lrsFloat = 0, false
	}
	if !o.frozen {
		if o.steps%o.varInterval == 0 {
			if o.varCounter++; o.varCounter == o.cfg.VarUpdateScaler {
				o.varCounter = 0
				o.varInterval *= 2
			}
		}
		o.local = (o.steps+1)%o.varInterval != 0
	} else if o.localCounter++; o.localCounter == o.cfg.LocalStepScaler {
		o.localCounter = 0
		o.localInterval = min(o.cfg.LocalStepClipper, o.localInterval*2)
	}
	if o.steps > o.cfg.VarFreezeStep {
		o.frozen, o.local = true, true
	}
	if o.frozen && !o.reinit {
		o.x.zero()
		o.reinit = true
	}
	return nil
}
