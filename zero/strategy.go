package zero

import (
	"github.com/dszero/dszero/model"
)

// Strategy is how one rank keeps and updates the model state: the ZeRO
// stages implement it.
type Strategy interface {
	// The model calls these at unit boundaries (gather, release, reduce).
	model.UnitHooks
	// ModelBuffers are the working parameters and the gradient buffer the
	// model binds (full length: layout.Numel each).
	ModelBuffers() (params, grads []float32)
	// Step runs at the gradient-accumulation boundary.
	Step(in StepInput) (StepResult, error)
	// MasterParams returns the rank's fp32 master parameters and the
	// offset of that slice in the flat buffer (0 and the whole buffer for
	// stage 0).
	MasterParams() (offset int, master []float32)
	// Close returns every buffer to the accountant.
	Close()
}

// StepInput is what the engine hands the strategy at a step.
type StepInput struct {
	LR        float64
	Betas     *[2]float64 // set when the scheduler cycles momentum
	LossScale float64     // 1 unless fp16
	// CheckOverflow skips the step when a gradient is inf or NaN (fp16, and
	// bf16 with check_grad_overflow).
	CheckOverflow bool
}

// StepResult is what happened at a step.
type StepResult struct {
	GradNorm float64 // global gradient norm before clipping, unscaled (-1 on overflow)
	Overflow bool    // the step was skipped
}
