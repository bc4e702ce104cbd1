package zcore

import (
	"github.com/dszero/dszero/zero/optim"
)

// Averaging is how DeepSpeed turns the ranks' gradients into their mean
// around a reduction that SUMs them. There are two rules, and which one a
// run follows depends on the stage, not on the backend:
//
//   - the engine's (stage 0, and stages 1/2 with reduce_scatter false):
//     engine.allreduce_bucket / gradient_reduction_w_predivide. With
//     prescale_gradients, g ← g·(1/world) before the sum. Otherwise
//     g ← g·(1/predivide) before it when predivide ≠ 1, and
//     g ← g·(predivide/world) after it when predivide ≠ world.
//   - ZeRO-1/2 with reduce_scatter (the default): average_tensor divides,
//     g ← g / world (tensor.div_), before the sum and nothing after;
//     prescale_gradients and gradient_predivide_factor play no part.
//
// Multipliers are the Python double rounded to float32 (tensor.mul_ of a
// float); the ZeRO division is a float32 division. For a power-of-two
// world every rule is exact, so the average is the same bits whichever
// rule and whichever place the reduction happens in.
type Averaging struct {
	World int
	pre   float32 // multiply before the sum; 0: none
	div   float32 // divide before the sum; 0: none
	post  float32 // multiply after the sum; 0: none
}

// EngineAveraging is the engine's rule (see Averaging).
func EngineAveraging(world int, prescale bool, predivide float64) Averaging {
	a := Averaging{World: world}
	w := float64(world)
	if prescale {
		if world != 1 {
			a.pre = float32(1 / w)
		}
		return a
	}
	if predivide == 0 {
		predivide = 1
	}
	if predivide != 1 {
		a.pre = float32(1 / predivide)
	}
	if predivide != w {
		a.post = float32(predivide / w)
	}
	return a
}

// ZeroAveraging is ZeRO-1/2's rule with reduce_scatter (see Averaging).
func ZeroAveraging(world int) Averaging {
	a := Averaging{World: world}
	if world != 1 {
		a.div = float32(world)
	}
	return a
}

// Before applies the rule's part before the sum to x, in place.
func (a Averaging) Before(p *optim.Pool, x []float32) {
	if a.pre != 0 {
		p.Scale(x, a.pre)
	}
	if a.div != 0 {
		divide(x, a.div)
	}
}

// After applies the rule's part after the sum to x, in place.
func (a Averaging) After(p *optim.Pool, x []float32) {
	if a.post != 0 {
		p.Scale(x, a.post)
	}
}

// divide is x[i] /= d (torch's div_ by a scalar, float32).
func divide(x []float32, d float32) {
	for i := range x {
		x[i] /= d
	}
}
