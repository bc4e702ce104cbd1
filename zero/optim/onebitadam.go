package optim

import (
	"context"
	"fmt"
	"math"

	"github.com/dszero/dszero/comm"
)

// Exchanging is an optimizer whose step communicates: it wants the rank's
// own gradients at some steps and averages something else itself (1-bit
// Adam averages its momentum through comm's compressed all-reduce). A
// stage that holds one asks LocalGradients before it reduces the
// gradients, and steps it with StepExchange, a collective.
type Exchanging interface {
	Optimizer
	// LocalGradients reports whether the next step wants the rank's own,
	// unreduced gradients (DeepSpeed's engine.enable_backward_allreduce
	// set to False by the optimizer).
	LocalGradients() bool
	// StepExchange is Step, returning the error of its communication.
	StepExchange(params, grads []float32) error
}

// OneBitAdamConfig is DeepSpeed's OnebitAdam (runtime/fp16/onebit/adam.py)
// as its ds_config params give it.
type OneBitAdamConfig struct {
	LR          float64
	Betas       [2]float64
	Eps         float64
	WeightDecay float64
	// FreezeStep is freeze_step (default 100000): the step count after
	// which the variance is frozen and the momentum is exchanged
	// compressed.
	FreezeStep int64
	// BiasCorrection and EpsInsideSqrt are stored and written to the
	// param group as DeepSpeed does; its update uses neither.
	BiasCorrection bool
	EpsInsideSqrt  bool
}

// DefaultOneBitAdamConfig is OnebitAdam's constructor defaults.
func DefaultOneBitAdamConfig() OneBitAdamConfig {
	return OneBitAdamConfig{LR: 1e-3, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, FreezeStep: 100000, BiasCorrection: true}
}

// OneBitAdam is DeepSpeed 0.14.5's OnebitAdam over the tensors of one
// flat buffer (each Segment one parameter, as DeepSpeed's fp32 engine
// hands it the model's parameters), on one rank's communicator:
//
//   - The first Step is DeepSpeed's initialization pass: each tensor's step
//     count rises, the zero momentum goes through the compressed all-reduce
//     (world > 1; it stays zero) and nothing is updated.
//   - Warm-up, while the step count is below FreezeStep: the gradients are
//     the ranks' average (LocalGradients false) and, for each tensor,
//     m = β₁m + (1−β₁)g, v = β₂v + (1−β₂)g², u = m/(√v + ε) (+ wd·p),
//     p = p − lr·u, without bias correction. After the step whose count
//     reaches FreezeStep, the exchange switches.
//   - Compressed: the gradients are the rank's own (LocalGradients true);
//     m = β₁m + (1−β₁)g, then m becomes the compressed average of the
//     ranks' m (comm.Compressor, world > 1), v stays frozen, and the update
//     is the warm-up's.
//
// Each tensor of n elements is compressed as DeepSpeed pads it: to a
// multiple of world·lcm(world, 8) elements, zeros appended, with its own
// worker and server errors of the padded size (starting at zero, and
// reset by loading a checkpoint, as DeepSpeed's load_state_dict does).
// Loading a step count sets the phase as load_state_dict does (warm-up
// below FreezeStep, compressed from it); a new optimizer's first Step is
// always the initialization pass, a resumed one's too.
type OneBitAdam struct {
	cfg  OneBitAdamConfig
	n    int
	segs []Segment
	st   *stateBufs // exp_avg, exp_avg_sq
	x    *tensorExchange

	steps       int64
	initialized bool // DeepSpeed's self.initialize
	frozen      bool // adam_freeze_key
	local       bool // not engine.enable_backward_allreduce

	errStep error // Step's error, for StepExchange's callers that call Step
}

// tensorExchange is the compressed all-reduce of the 1-bit optimizers over
// the tensors (segments) of a flat buffer, each padded as DeepSpeed pads
// it, with its own error feedback.
type tensorExchange struct {
	name   string // the optimizer, for errors
	ctx    context.Context
	c      comm.Comm
	z      *comm.Compressor
	segs   []Segment
	ef     []comm.ErrorFeedback // per segment; zero until used
	padded []float32            // the compressed all-reduce's buffer
}

func newTensorExchange(name string, ctx context.Context, c comm.Comm, segs []Segment) *tensorExchange {
	if ctx == nil {
		ctx = context.Background()
	}
	return &tensorExchange{name: name, ctx: ctx, c: c, z: comm.NewCompressor(c), segs: segs}
}

// reset zeroes the errors (DeepSpeed pops or zeroes worker_error and
// server_error).
func (x *tensorExchange) reset() { x.ef = nil }

// ensure gives segment i zero errors where it has none (DeepSpeed creates
// worker_error and server_error where the state lacks them, on one rank
// too).
func (x *tensorExchange) ensure(i int) {
	if x.ef == nil {
		x.ef = make([]comm.ErrorFeedback, len(x.segs))
	}
	if x.ef[i].Worker == nil {
		x.ef[i] = comm.NewErrorFeedback(OneBitPadded(x.segs[i].Len, x.c.Size()), x.c.Size(), x.c.Rank())
	}
}

// drop removes segment i's errors (DeepSpeed's state.pop).
func (x *tensorExchange) drop(i int) {
	if x.ef != nil && i >= 0 {
		x.ef[i] = comm.ErrorFeedback{}
	}
}

// zero zeroes the errors the segments have (DeepSpeed's zero_()).
func (x *tensorExchange) zero() {
	for _, e := range x.ef {
		clear(e.Worker)
		clear(e.Server)
	}
}

// errors is segment i's errors; nil when it has none.
func (x *tensorExchange) errors(i int) (worker, server []float32) {
	if x.ef == nil {
		return nil, nil
	}
	return x.ef[i].Worker, x.ef[i].Server
}

// run replaces v, segment i's values, by their compressed average over
// the ranks, padded with zeros to OneBitPadded.
func (x *tensorExchange) run(i int, v []float32, step int64) error {
	size, rank := x.c.Size(), x.c.Rank()
	if x.ef == nil {
		x.ef = make([]comm.ErrorFeedback, len(x.segs))
	}
	N := OneBitPadded(len(v), size)
	if x.ef[i].Worker == nil {
		x.ef[i] = comm.NewErrorFeedback(N, size, rank)
	}
	if cap(x.padded) < N {
		x.padded = make([]float32, N)
	}
	buf := x.padded[:N]
	copy(buf, v)
	clear(buf[len(v):])
	if err := x.z.AllReduce(x.ctx, buf, &x.ef[i]); err != nil {
		return fmt.Errorf("%s, step %d, parameter %d: %w", x.name, step, x.segs[i].Param, err)
	}
	copy(v, buf)
	return nil
}

func checkSegments(what string, n int, segs []Segment) {
	end := 0
	for _, s := range segs {
		if s.Start != end || s.Len < 0 {
			panic(fmt.Sprintf("optim: %s segments must tile the buffer in order; %+v starts at %d", what, s, end))
		}
		end += s.Len
	}
	if end != n {
		panic(fmt.Sprintf("optim: %s segments cover %d of %d elements", what, end, n))
	}
}

var _ Exchanging = (*OneBitAdam)(nil)

// Validate checks what OnebitAdam's constructor and step would fail on.
func (c OneBitAdamConfig) Validate() error {
	if err := torchHyperErr(c.LR, c.Eps, &c.Betas, c.WeightDecay); err != nil {
		return err
	}
	if c.FreezeStep < 0 {
		return fmt.Errorf("freeze_step must be ≥ 0, got %d", c.FreezeStep)
	}
	return nil
}

// NewOneBitAdam is 1-bit Adam over n elements cut into segs (one per
// parameter, in order, covering [0, n)), exchanging on c under ctx.
func NewOneBitAdam(cfg OneBitAdamConfig, n int, segs []Segment, ctx context.Context, c comm.Comm, a Alloc) (*OneBitAdam, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	checkSegments("1-bit Adam", n, segs)
	st, err := newStateBufs(a, n, "exp_avg", "exp_avg_sq")
	if err != nil {
		return nil, err
	}
	return &OneBitAdam{cfg: cfg, n: n, segs: segs, st: st, x: newTensorExchange("1-bit Adam", ctx, c, segs)}, nil
}

// OneBitPadded is the length DeepSpeed pads a tensor of n elements to for
// the compressed all-reduce on size ranks: a multiple of size·divider,
// divider = lcm(size, 8) (onebit/adam.py corrected_tensor_size).
func OneBitPadded(n, size int) int {
	g := gcd(size, 8)
	div := size * 8 / g
	q := size * div
	if n%q == 0 {
		return n
	}
	return n + q - n%q
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func (o *OneBitAdam) Name() string             { return "OnebitAdam" }
func (o *OneBitAdam) Len() int                 { return o.n }
func (o *OneBitAdam) LR() float64              { return o.cfg.LR }
func (o *OneBitAdam) SetLR(lr float64)         { o.cfg.LR = lr }
func (o *OneBitAdam) StepCount() int64         { return o.steps }
func (o *OneBitAdam) StateNames() []string     { return o.st.names }
func (o *OneBitAdam) State(n string) []float32 { return o.st.get(n) }
func (o *OneBitAdam) Betas() [2]float64        { return o.cfg.Betas }
func (o *OneBitAdam) SetBetas(b [2]float64)    { o.cfg.Betas = b }
func (o *OneBitAdam) Free()                    { o.st.free() }

// LocalGradients implements Exchanging.
func (o *OneBitAdam) LocalGradients() bool { return o.local }

// Frozen reports whether the momentum is exchanged compressed (DeepSpeed's
// adam_freeze_key).
func (o *OneBitAdam) Frozen() bool { return o.frozen }

// SetStepCount restores the step count and, as DeepSpeed's load_state_dict
// does, the phase, and resets the compression errors.
func (o *OneBitAdam) SetStepCount(n int64) {
	o.steps = n
	o.frozen = n >= o.cfg.FreezeStep
	o.local = o.frozen
	o.x.reset()
}

// LoadState copies a checkpointed exp_avg or exp_avg_sq.
func (o *OneBitAdam) LoadState(name string, v []float32) error { return o.st.load(name, v) }

// ParamGroup is OnebitAdam's defaults dict.
func (o *OneBitAdam) ParamGroup() map[string]any {
	c := o.cfg
	return map[string]any{"lr": c.LR, "bias_correction": c.BiasCorrection, "betas": []float64{c.Betas[0], c.Betas[1]},
		"eps": c.Eps, "weight_decay": c.WeightDecay, "max_grad_norm": 0.0}
}

// Step is StepExchange; its error is kept for Err.
func (o *OneBitAdam) Step(params, grads []float32) { o.errStep = o.StepExchange(params, grads) }

// Err is the error of the last Step.
func (o *OneBitAdam) Err() error { return o.errStep }

// StepExchange implements Exchanging: one OnebitAdam.step.
func (o *OneBitAdam) StepExchange(params, grads []float32) error {
	checkLens(o.n, params, grads)
	if !o.initialized {
		return o.Initialize()
	}
	o.steps++
	m, v := o.st.get("exp_avg"), o.st.get("exp_avg_sq")
	b1, b2 := float32(o.cfg.Betas[0]), float32(o.cfg.Betas[1])
	c1, c2 := float32(1-o.cfg.Betas[0]), float32(1-o.cfg.Betas[1])
	for i, s := range o.segs {
		lo, hi := s.Start, s.Start+s.Len
		mm, vv, g := m[lo:hi], v[lo:hi], grads[lo:hi]
		for j, gj := range g {
			mm[j] = float32(mm[j]*b1) + float32(c1*gj)
		}
		if !o.frozen {
			for j, gj := range g {
				vv[j] = float32(vv[j]*b2) + float32(c2*float32(gj*gj))
			}
		} else if o.x.ensure(i); o.x.c.Size() > 1 {
			if err := o.x.run(i, mm, o.steps); err != nil {
				return err
			}
		}
		o.update(params[lo:hi], mm, vv)
	}
	if !o.frozen && o.steps >= o.cfg.FreezeStep {
		o.frozen, o.local = true, true
	}
	return nil
}

// Initialize is DeepSpeed's initialization pass, the first call of
// OnebitAdam.step: the step count rises, the zero momentum goes through
// the compressed all-reduce (world > 1; it stays zero), nothing is
// updated. The first Step runs it; FP16_Optimizer runs it when it is built
// (initialize_optimizer_states steps the optimizer once on zero
// gradients), and so does dszero's fp16 engine. It is a collective; after
// the first call it does nothing.
func (o *OneBitAdam) Initialize() error {
	if o.initialized {
		return nil
	}
	o.steps++
	m := o.st.get("exp_avg")
	o.x.reset() // DeepSpeed's pass makes every tensor's errors anew
	for i, s := range o.segs {
		o.x.ensure(i)
		if o.x.c.Size() > 1 {
			if err := o.x.run(i, m[s.Start:s.Start+s.Len], o.steps); err != nil {
				return err
			}
		}
	}
	// DeepSpeed pops the errors of the group's last tensor only (the pop
	// follows the loop over the tensors). On a fresh run every error is
	// zero here (the momentum is); a resumed run (its first Step) has
	// compressed the loaded momentum, and the other tensors keep those
	// errors into the compressed phase.
	o.x.drop(len(o.segs) - 1)
	o.initialized, o.frozen = true, false
	return nil
}

// update is u = m/(√v + ε), u += wd·p when wd > 0, p += (−lr)·u, in float32.
func (o *OneBitAdam) update(p, m, v []float32) {
	eps, wd, nlr := float32(o.cfg.Eps), float32(o.cfg.WeightDecay), float32(-o.cfg.LR)
	for j := range p {
		u := m[j] / (float32(math.Sqrt(float64(v[j]))) + eps)
		if wd > 0 {
			u += float32(wd * p[j])
		}
		p[j] += float32(nlr * u)
	}
}
