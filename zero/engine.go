package zero

import (
	"errors"
	"fmt"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/lossscale"
	"github.com/dszero/dszero/zero/lrsched"
	"github.com/dszero/dszero/zero/optim"
)

// Version selects the DeepSpeed release whose semantics are reproduced
// where releases differ (the first step's lr, loss-scale growth).
type Version = lrsched.Version

// Options are an Engine's dependencies.
type Options struct {
	Acct   *mem.Accountant
	Layout *model.Layout
	Init   []float32 // initial fp32 parameters, layout.Numel of them
	// InitFunc, instead of Init, writes the initial parameters into the
	// rank's master buffer (random initialization without a second copy).
	InitFunc func(master []float32)
	// Workers bounds the optimizer's goroutines; 0 means GOMAXPROCS.
	Workers int
	// Version is the DeepSpeed release to follow (default 0.19.5).
	Version Version
}

// Engine is one rank's training state: strategy, optimizer, scheduler and
// loss scaler, configured by a dsconfig.Plan.
type Engine struct {
	plan     dsconfig.Plan
	strategy Strategy
	stage0   *Stage0
	sched    lrsched.Scheduler // nil without a scheduler block
	scaler   lossscale.Scaler
	pool     *optim.Pool
	baseLR   float64

	globalSteps  int64 // optimizer steps taken, skipped ones included
	skippedSteps int64
}

// StepStats describe one optimizer step.
type StepStats struct {
	Step      int64   // 1-based global step
	LR        float64 // the lr the step used
	LossScale float64 // the loss scale the step's gradients carried
	GradNorm  float64 // unscaled global norm before clipping; -1 when skipped
	Skipped   bool    // overflow: no update
}

// NewEngine builds a rank's engine from a plan. Features the plan asks for
// that dszero does not run are errors here, by name.
func NewEngine(plan dsconfig.Plan, o Options) (*Engine, error) {
	if unsup := plan.Unsupported(); len(unsup) > 0 {
		var errs []error
		for _, d := range unsup {
			errs = append(errs, errors.New(d.String()))
		}
		return nil, fmt.Errorf("the config asks for features dszero does not run yet:\n%w", errors.Join(errs...))
	}
	if plan.Zero.Stage != 0 {
		return nil, fmt.Errorf("%s: zero_optimization.stage %d: this build of dszero runs ZeRO stage 0 only; use \"stage\": 0", plan.File, plan.Zero.Stage)
	}
	if plan.Optimizer.Type == "" {
		return nil, fmt.Errorf("%s: no optimizer: add an optimizer block or pass HF training flags", plan.File)
	}
	e := &Engine{plan: plan, pool: optim.NewPool(o.Workers), baseLR: plan.Optimizer.LR}
	var err error
	if e.scaler, err = newScaler(plan); err != nil {
		e.pool.Close()
		return nil, err
	}
	if e.sched, err = newScheduler(plan, o.Version); err != nil {
		e.pool.Close()
		return nil, err
	}
	var round func([]float32)
	switch plan.Precision.DType {
	case "bf16":
		round = half.RoundBF16
	case "fp16":
		round = half.RoundF16
	}
	alloc := optim.Alloc{Acct: o.Acct, Tier: mem.Device}
	s0, err := NewStage0(Stage0Options{Acct: o.Acct, Layout: o.Layout, Init: o.Init, InitFunc: o.InitFunc, Round: round, Clip: plan.GradientClipping, Pool: e.pool,
		World: plan.WorldSize, Prescale: plan.PrescaleGradients, Predivide: plan.GradientPredivideFactor,
		NewOptimizer: func(n int) (optim.Optimizer, error) { return newOptimizer(plan, n, alloc, e.pool) }})
	if err != nil {
		e.pool.Close()
		return nil, err
	}
	e.stage0, e.strategy = s0, s0
	return e, nil
}

// Round is the working precision's rounding (nil for fp32), for the model.
func (e *Engine) Round() func([]float32) {
	switch e.plan.Precision.DType {
	case "bf16":
		return half.RoundBF16
	case "fp16":
		return half.RoundF16
	}
	return nil
}

// Strategy is the rank's strategy (the model's unit hooks).
func (e *Engine) Strategy() Strategy { return e.strategy }

// ModelBuffers are the buffers the model binds.
func (e *Engine) ModelBuffers() (params, grads []float32) { return e.strategy.ModelBuffers() }

// GradScale is the factor on dloss for each micro-step's backward:
// loss_scale / gradient_accumulation_steps.
func (e *Engine) GradScale() float32 {
	return float32(e.scaler.Scale() / float64(e.plan.Batch.GradientAccumulationSteps))
}

// LR is the lr the next step will use.
func (e *Engine) LR() float64 {
	if e.sched != nil {
		return e.sched.LR()
	}
	return e.baseLR
}

// GlobalSteps and SkippedSteps count optimizer steps.
func (e *Engine) GlobalSteps() int64  { return e.globalSteps }
func (e *Engine) SkippedSteps() int64 { return e.skippedSteps }

// Step takes the optimizer step at the gradient-accumulation boundary.
func (e *Engine) Step() (StepStats, error) {
	e.globalSteps++
	st := StepStats{Step: e.globalSteps, LR: e.LR(), LossScale: e.scaler.Scale()}
	in := StepInput{LR: st.LR, LossScale: st.LossScale,
		CheckOverflow: e.plan.Precision.DType == "fp16" || e.plan.Precision.DType == "bf16" && e.plan.Precision.BF16CheckGradOverflow}
	if e.sched != nil {
		if b, ok := e.sched.Betas(); ok {
			in.Betas = &b
		}
	}
	res, err := e.strategy.Step(in)
	if err != nil {
		return st, fmt.Errorf("step %d: %w", st.Step, err)
	}
	st.GradNorm, st.Skipped = res.GradNorm, res.Overflow
	if e.plan.Precision.DType == "fp16" {
		if err := e.scaler.Update(res.Overflow); err != nil {
			return st, fmt.Errorf("step %d: %w", st.Step, err)
		}
	}
	if res.Overflow {
		e.skippedSteps++
		return st, nil
	}
	if e.sched != nil {
		e.sched.Step()
	}
	return st, nil
}

// MasterParams returns the fp32 master parameters (stage 0: all of them).
func (e *Engine) MasterParams() []float32 {
	_, m := e.strategy.MasterParams()
	return m
}

// Optimizer is the rank's optimizer.
func (e *Engine) Optimizer() optim.Optimizer { return e.stage0.Optimizer() }

// Close frees the rank's buffers and workers.
func (e *Engine) Close() {
	e.strategy.Close()
	e.pool.Close()
}
