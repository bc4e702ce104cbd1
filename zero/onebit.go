package zero

import (
	"context"
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/optim"
)

// newOneBitOptimizer builds DeepSpeed's 1-bit Adam for a ZeRO stage 0
// plan over the whole flat buffer: one tensor per parameter of the
// layout, as DeepSpeed's fp32 engine hands OnebitAdam the model's
// parameters, exchanging on c. The config compiler has refused the rest
// (ZeRO stages above 0, 16-bit precision, AMSGrad).
func newOneBitOptimizer(plan dsconfig.Plan, ctx context.Context, c comm.Comm, layout *model.Layout, n int, a optim.Alloc) (optim.Optimizer, error) {
	o := plan.Optimizer
	if o.Impl != "OnebitAdam" {
		return nil, fmt.Errorf("optimizer %s (%s) is not implemented by dszero", o.Type, o.Impl)
	}
	if n != layout.Numel {
		return nil, fmt.Errorf("1-bit Adam over %d of the model's %d elements: DeepSpeed runs it at ZeRO stage 0 only", n, layout.Numel)
	}
	segs := make([]optim.Segment, len(layout.Specs))
	for i, s := range layout.Specs {
		segs[i] = optim.Segment{Param: i, Start: s.Offset, Len: s.Numel}
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
func isOneBit(plan dsconfig.Plan) bool { return plan.Optimizer.Impl == "OnebitAdam" }
