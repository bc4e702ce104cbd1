package zero

import (
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/stage1"
	"github.com/dszero/dszero/stage2"
	"github.com/dszero/dszero/stage3"
	"github.com/dszero/dszero/zero/optim"
)

// Every strategy is a Strategy and has its rank's optimizer (the stage
// packages cannot name this package's interface: it imports them).
var (
	_ Strategy       = (*stage1.Strategy)(nil)
	_ Strategy       = (*stage2.Strategy)(nil)
	_ Strategy       = (*stage3.Strategy)(nil)
	_ withOptimizer  = (*Stage0)(nil)
	_ withOptimizer  = (*stage1.Strategy)(nil)
	_ withOptimizer  = (*stage2.Strategy)(nil)
	_ withOptimizer  = (*stage3.Strategy)(nil)
	_ GradOverwriter = (*stage2.Strategy)(nil)
	_ GradOverwriter = (*stage3.Strategy)(nil)
	_                = [...]StatefulStrategy{(*Stage0)(nil), (*stage1.Strategy)(nil), (*stage2.Strategy)(nil), (*stage3.Strategy)(nil)}
)

type withOptimizer interface{ Optimizer() optim.Optimizer }

// Strategy is how one rank keeps and updates the model state: the ZeRO
// stages implement it (Stage0 here, stage1.Strategy and stage2.Strategy in
// their packages). NewEngine picks one from the plan.
type Strategy interface {
	// The model calls these at unit boundaries (gather, release, reduce).
	model.UnitHooks
	// ModelBuffers are the working parameters and the gradient buffer the
	// model binds (full length: layout.Numel each).
	ModelBuffers() (params, grads []float32)
	// Step runs at the gradient-accumulation boundary. With more than one
	// rank it is a collective: every rank calls it.
	Step(in StepInput) (StepResult, error)
	// MasterParams returns the rank's fp32 master parameters and the
	// offset of that slice in the flat buffer (0 and the whole buffer for
	// stage 0, the rank's partition without padding for stages 1 and 2,
	// its partitions at stage 3). A stage that keeps them in swap files
	// reads them back, and says so when that fails.
	MasterParams() (offset int, master []float32, err error)
	// GatherMaster writes the full fp32 master parameters (layout.Numel)
	// into dst. It is a collective: every rank calls it.
	GatherMaster(dst []float32) error
	// Close returns every buffer to the accountant.
	Close()
}

// StepInput is what the engine hands the strategy at a step.
type StepInput = zcore.StepInput

// StepResult is what happened at a step.
type StepResult = zcore.StepResult

// StrategyOptions are a strategy's dependencies; NewEngine builds them from
// the plan (see zcore.Options for each field).
type StrategyOptions = zcore.Options

// GradOverwriter is a strategy that can leave its gradient buffer dirty
// after a step because the model will overwrite it (rather than add to it)
// on the next step's first backward: the model's OverwriteGrads, which
// PyTorch's AccumulateGrad does after zero_grad(set_to_none=True). It
// saves clearing the buffer and one pass of adds per step.
type GradOverwriter interface {
	LeaveGradsDirty()
}
