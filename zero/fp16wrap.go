package zero

import (
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig"
)

// FP16Wrapper is the optimizer wrapper DeepSpeed 0.14.5's engine builds
// for fp16 without ZeRO (engine.py _configure_fp16_optimizer): one of two
// apex-derived classes, which differ in their master copy, in the norm
// they report and in their checkpoint.
type FP16Wrapper int

const (
	// NoFP16Wrapper: not fp16, or a ZeRO stage (whose optimizers scale
	// themselves).
	NoFP16Wrapper FP16Wrapper = iota
	// FP16Fused is FP16_Optimizer (runtime/fp16/fused_optimizer.py), for
	// FusedAdam and the 1-bit Adams: one flat fp32 master
	// (fp32_groups_flat); it reports the unscaled norm.
	FP16Fused
	// FP16Unfused is FP16_UnfusedOptimizer (unfused_optimizer.py), for
	// every other optimizer (torch.optim's, FusedLamb): an fp32 copy per
	// parameter (fp32_groups); it reports the norm of the scaled
	// gradients.
	FP16Unfused
)

func (w FP16Wrapper) String() string {
	switch w {
	case FP16Fused:
		return "FP16_Optimizer"
	case FP16Unfused:
		return "FP16_UnfusedOptimizer"
	}
	return "none"
}

// FP16WrapperOf is the wrapper DeepSpeed builds for plan.
func FP16WrapperOf(plan dsconfig.Plan) FP16Wrapper {
	if plan.Precision.DType != device.F16 || plan.Zero.Stage != 0 {
		return NoFP16Wrapper
	}
	switch plan.Optimizer.Impl {
	case "FusedAdam", "OnebitAdam", "ZeroOneAdam":
		return FP16Fused
	}
	return FP16Unfused
}

// Both wrappers' constructors step the optimizer once on zero gradients
// (initialize_optimizer_states), with the optimizer's own lr (the
// scheduler comes later): the step count starts at 1, and weight decay
// moves the fp32 master once — not the fp16 weights, which the first
// real step overwrites from the master (Stage0.InitializeOptimizerStates).
//
// Every fp16 step of DeepSpeed, with a wrapper or under ZeRO, updates the
// loss scale before it unscales: on a clean step after which the scale
// grows, the gradients (and the clipping threshold's norm) are divided by
// the grown scale, lossscale.CleanScale. What the step reports as the
// gradient norm differs: FP16_Optimizer and ZeRO-3 divide the scaled norm
// by the grown scale, ZeRO 1 and 2 by the scale the gradients carry,
// FP16_UnfusedOptimizer not at all (reportedNorm).

// reportedNorm is the gradient norm DeepSpeed reports for a clean step
// whose scaled norm divided by unscale is norm, the gradients having
// carried scale.
func (e *Engine) reportedNorm(norm, scale, unscale float64) float64 {
	switch {
	case FP16WrapperOf(e.plan) == FP16Unfused:
		return norm * unscale
	case e.plan.Zero.Stage == 1 || e.plan.Zero.Stage == 2:
		return norm * unscale / scale
	}
	return norm
}
