package zero

import (
	"fmt"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/zero/lossscale"
	"github.com/dszero/dszero/zero/lrsched"
	"github.com/dszero/dszero/zero/optim"
)

// newOptimizer builds the optimizer DeepSpeed would build for the plan,
// over n elements.
func newOptimizer(plan dsconfig.Plan, n int, a optim.Alloc, pool *optim.Pool) (optim.Optimizer, error) {
	o := plan.Optimizer
	switch o.Impl {
	case "torch.optim.Adam", "torch.optim.AdamW", "FusedAdam", "DeepSpeedCPUAdam":
		var c optim.AdamConfig
		switch o.Impl {
		case "torch.optim.Adam":
			c = optim.DefaultAdamConfig(optim.TorchAdam)
		case "torch.optim.AdamW":
			c = optim.DefaultAdamConfig(optim.TorchAdamW)
		default:
			c = optim.DefaultAdamConfig(optim.DeepSpeedAdam)
			c.AdamWMode, c.BiasCorrection = o.AdamWMode, o.BiasCorrection
			if o.Impl == "DeepSpeedCPUAdam" {
				c.Op = optim.CPUAdamOp
			}
		}
		c.LR, c.Betas, c.Eps, c.WeightDecay, c.AMSGrad = o.LR, o.Betas, o.Eps, o.WeightDecay, o.AMSGrad
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("optimizer %s: %w", o.Impl, err)
		}
		return optim.NewAdam(c, n, a, pool)
	case "torch.optim.SGD":
		c := optim.SGDConfig{LR: o.LR, Momentum: o.Momentum, Dampening: o.Dampening, WeightDecay: o.WeightDecay, Nesterov: o.Nesterov}
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("optimizer SGD: %w", err)
		}
		return optim.NewSGD(c, n, a, pool)
	case "FusedLamb":
		c := optim.DefaultLambConfig()
		c.LR, c.Betas, c.Eps, c.WeightDecay, c.BiasCorrection = o.LR, o.Betas, o.Eps, o.WeightDecay, o.BiasCorrection
		c.MaxCoeff, c.MinCoeff = o.MaxCoeff, o.MinCoeff
		// DeepSpeed hands FusedLamb one flat buffer: one segment.
		return optim.NewLamb(c, n, []optim.Segment{{Param: 0, Start: 0, Len: n}}, nil, a, pool)
	}
	return nil, fmt.Errorf("optimizer %s (%s) is not implemented by dszero", o.Type, o.Impl)
}

// NewLossScaler is the loss scaler of the plan's precision, as DeepSpeed
// release v builds it: static for fp32, bf16 and a fixed loss_scale;
// FP16_Optimizer's own rule at stage 0; DynamicLossScaler under ZeRO —
// before 0.18 with its constructor's defaults (initial scale 2^32,
// hysteresis 1, window 1000, minimum 1) when the fp16 block sets none of
// the dynamic-scaling keys (dsconfig.Precision.DynamicArgsGiven), and
// before 0.17.1 with the legacy growth rule (lossscale.Legacy).
func NewLossScaler(plan dsconfig.Plan, v Version) (lossscale.Scaler, error) {
	p := plan.Precision
	if p.DType != device.F16 {
		return lossscale.NewStatic(1), nil
	}
	if !p.DynamicLossScale() {
		return lossscale.NewStatic(p.LossScale), nil
	}
	b := lossscale.FP16Block{InitialScalePower: int(p.InitialScalePower), LossScaleWindow: int(p.LossScaleWindow),
		Hysteresis: int(p.Hysteresis), ConsecutiveHysteresis: p.ConsecutiveHysteresis, MinLossScale: float64(p.MinLossScale)}
	if plan.Zero.Stage == 0 {
		// Without ZeRO, DeepSpeed's FP16_Optimizer runs its own rule.
		return lossscale.NewFP16Optimizer(b.Config())
	}
	c := b.Config()
	if v == lrsched.DeepSpeed0145 {
		if !p.DynamicArgsGiven {
			c = lossscale.DynamicLossScalerDefaults()
		}
		c.Growth = lossscale.Legacy
	}
	return lossscale.NewDynamic(c)
}

// NewScheduler builds the plan's scheduler following release v (nil
// without one).
func NewScheduler(plan dsconfig.Plan, v Version) (lrsched.Scheduler, error) {
	s := plan.Scheduler
	if s.Type == "" {
		return nil, nil
	}
	var p lrsched.Params
	switch s.Type {
	case lrsched.KindLRRangeTest:
		p = lrsched.LRRangeTestParams{MinLR: s.LRRangeTestMinLR, StepSize: int(s.LRRangeTestStepSize), StepRate: s.LRRangeTestStepRate, Staircase: s.LRRangeTestStaircase}
	case lrsched.KindOneCycle:
		q := lrsched.DefaultOneCycle()
		q.CycleMinLR, q.CycleMaxLR = lrsched.Float(s.CycleMinLR), lrsched.Float(s.CycleMaxLR)
		q.DecayLRRate, q.CycleFirstStepSize = s.DecayLRRate, s.CycleFirstStepSize
		q.CycleSecondStepSize = lrsched.Float(s.CycleSecondStepSize)
		q.CycleFirstStairCount, q.CycleSecondStairCount = int(s.CycleFirstStairCount), lrsched.Int(int(s.CycleSecondStairCount))
		q.DecayStepSize = float64(s.DecayStepSize)
		q.CycleMomentum, q.CycleMinMom, q.CycleMaxMom, q.DecayMomRate = s.CycleMomentum, s.CycleMinMom, s.CycleMaxMom, s.DecayMomRate
		p = q
	case lrsched.KindWarmupLR:
		q := lrsched.WarmupLRParams{MinLR: s.WarmupMinLR, NumSteps: int(s.WarmupNumSteps), Type: s.WarmupType}
		if s.WarmupMaxLRSet {
			q.MaxLR = lrsched.Float(s.WarmupMaxLR)
		}
		p = q
	case lrsched.KindWarmupDecayLR:
		p = lrsched.WarmupDecayLRParams{TotalNumSteps: lrsched.Int(int(s.TotalNumSteps)), MinLR: s.WarmupMinLR, MaxLR: s.WarmupMaxLR,
			NumSteps: int(s.WarmupNumSteps), Type: s.WarmupType}
	case lrsched.KindWarmupCosineLR:
		p = lrsched.WarmupCosineLRParams{TotalNumSteps: lrsched.Int(int(s.TotalNumSteps)), WarmupMinRatio: s.WarmupMinRatio,
			NumSteps: int(s.WarmupNumSteps), CosMinRatio: s.CosMinRatio, Type: s.WarmupType}
	case dsconfig.SchedulerHFLinear:
		p = lrsched.HFLinearParams{WarmupSteps: int(s.WarmupNumSteps), TrainingSteps: int(s.TotalNumSteps)}
		return lrsched.NewVersion(lrsched.KindHFLinear, p, plan.Optimizer.LR, v)
	default:
		return nil, fmt.Errorf("scheduler %s is not implemented by dszero", s.Type)
	}
	return lrsched.NewVersion(s.Type, p, plan.Optimizer.LR, v)
}
