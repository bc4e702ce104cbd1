package zero

import (
	"context"
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/optim"
)

// newOneBitOptimizer builds DeepSpeed's 1-bit Adam for a ZeRO stage 0
// plan over the whole flat buffer, exchanging on c: in fp32 one tensor per
// parameter of the layout, as DeepSpeed's engine hands OnebitAdam the
// model's parameters; in fp16 one tensor, FP16_Optimizer's flat fp32
// master. The config compiler has refused the rest (ZeRO stages above 0,
// bf16, AMSGrad).
func newOneBitOptimizer(plan dsconfig.Plan, ctx context.Context, c comm.Comm, layout *model.Layout, n int, a optim.Alloc) (optim.Optimizer, error) {
	o := plan.Optimizer
	if o.Impl != "OnebitAdam" && o.Impl != "ZeroOneAdam" && o.Impl != "OnebitLamb" {
		return nil, fmt.Errorf("optimizer %s (%s) is not implemented by dszero", o.Type, o.Impl)
	}
	if n != layout.Numel {
		return nil, fmt.Errorf("1-bit Adam over %d of the model's %d elements: DeepSpeed runs it at ZeRO stage 0 only", n, layout.Numel)
	}
	segs := make([]optim.Segment, len(layout.Specs))
	for i, s := range layout.Specs {
		segs[i] = optim.Segment{Param: i, Start: s.Offset, Len: s.Numel}
	}
	fp16 := plan.Precision.DType == device.F16
	if fp16 {
		// FP16_Optimizer hands it one flat fp32 master: one tensor,
		// compressed (and padded) as a whole.
		segs = []optim.Segment{{Param: 0, Start: 0, Len: n}}
	}
	opt, err := newOneBit(plan, ctx, c, segs, n, a)
	if err != nil || !fp16 {
		return opt, err
	}
	// FP16_Optimizer's constructor steps the optimizer once on zero
	// gradients (initialize_optimizer_states): the 1-bit optimizers'
	// initialization pass happens then, not at the first training step.
	init, ok := opt.(interface{ Initialize() error })
	if !ok {
		opt.Free()
		return nil, fmt.Errorf("optimizer %s under fp16 is not implemented by dszero", o.Impl)
	}
	if err := init.Initialize(); err != nil {
		opt.Free()
		return nil, fmt.Errorf("optimizer %s: FP16_Optimizer's initial step: %w", o.Impl, err)
	}
	return opt, nil
}

func newOneBit(plan dsconfig.Plan, ctx context.Context, c comm.Comm, segs []optim.Segment, n int, a optim.Alloc) (optim.Optimizer, error) {
	o := plan.Optimizer
	if o.Impl == "OnebitLamb" {
		b := o.OneBit
		cfg := optim.OneBitLambConfig{LR: o.LR, Betas: o.Betas, Eps: o.Eps, WeightDecay: o.WeightDecay, FreezeStep: b.FreezeStep,
			MaxCoeff: o.MaxCoeff, MinCoeff: o.MinCoeff, CoeffBeta: b.CoeffBeta, FactorMax: b.FactorMax, FactorMin: b.FactorMin,
			FactorThreshold: b.FactorThreshold, BiasCorrection: o.BiasCorrection, EpsInsideSqrt: b.EpsInsideSqrt}
		opt, err := optim.NewOneBitLamb(cfg, n, segs, ctx, c, a)
		if err != nil {
			return nil, fmt.Errorf("optimizer OnebitLamb: %w", err)
		}
		return opt, nil
	}
	if o.Impl == "ZeroOneAdam" {
		b := o.OneBit
		cfg := optim.ZeroOneAdamConfig{LR: o.LR, Betas: o.Betas, Eps: o.Eps, WeightDecay: o.WeightDecay,
			VarFreezeStep: b.VarFreezeStep, VarUpdateScaler: b.VarUpdateScaler, LocalStepScaler: b.LocalStepScaler,
			LocalStepClipper: b.LocalStepClipper, BiasCorrection: o.BiasCorrection, EpsInsideSqrt: b.EpsInsideSqrt}
		opt, err := optim.NewZeroOneAdam(cfg, n, segs, ctx, c, a)
		if err != nil {
			return nil, fmt.Errorf("optimizer ZeroOneAdam: %w", err)
		}
		return opt, nil
	}
	cfg := optim.OneBitAdamConfig{LR: o.LR, Betas: o.Betas, Eps: o.Eps, WeightDecay: o.WeightDecay,
		FreezeStep: o.OneBit.FreezeStep, BiasCorrection: o.BiasCorrection, EpsInsideSqrt: o.OneBit.EpsInsideSqrt}
	opt, err := optim.NewOneBitAdam(cfg, n, segs, ctx, c, a)
	if err != nil {
		return nil, fmt.Errorf("optimizer OnebitAdam: %w", err)
	}
	return opt, nil
}

// isOneBit reports whether the plan's optimizer exchanges compressed.
func isOneBit(plan dsconfig.Plan) bool {
	switch plan.Optimizer.Impl {
	case "OnebitAdam", "ZeroOneAdam", "OnebitLamb":
		return true
	}
	return false
}
