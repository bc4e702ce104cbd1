package conformance

import (
	"math"

	"github.com/dszero/dszero/dsconfig"
)

// Adam-eps-driven elements. Adam's first update of an element is
// lr₁·ĝ/(|ĝ|+eps): with bias correction m̂₁ = g and v̂₁ = g², so the
// update is lr₁ times a number in (−1, 1) that is ±1 for an ordinary
// gradient and anything between when |g| is within a few eps. A gradient
// that small on a model whose gradients are ~1e-3 is the sum of much larger
// terms that cancel; float32 rounding of those terms is a percent of it,
// and the first update follows the rounding. From the second step on
// Adam's moments are ruled by the element's later, ordinary gradients, so
// two correct runs end at most 2·lr₁ apart there (plus the tolerance),
// while every other weight keeps its tolerance.
//
// Seen on the shipped GPT data, micro-batch 8 on one data-parallel rank
// (the sequence-parallel cases): four elements (wte.weight [35, 21],
// wpe.weight [26, 17], blocks.0.mlp.proj.weight [4, 79],
// blocks.1.attn.qkv.weight [152, 37]) have first gradients of 1.5e-9 to
// 2.9e-8 (eps 1e-8) and end 1–3e-5 apart between dszero and DeepSpeed, and
// 1.4e-5 apart between DeepSpeed's own sequence-parallel and plain runs of
// the same batches, while all other weights agree to 1.4e-6.
//
// The runner finds them from firstGrads, as the noise-driven ones: the
// gradient the optimizer sees on its first step (the mean over the global
// batch, DeepSpeed's stage-3 sequence-parallel averaging over every rank,
// gradient clipping) below epsFactor·eps, neither zero nor noise-driven.
// Only for Adam and AdamW with bias correction, whose first update is the
// one above.

// epsFactor is the first-step gradient, in units of Adam's eps, below
// which an element counts as eps-driven. At 10·eps an update is within 9%
// of ±lr₁ and moves by at most a tenth of the gradient's relative error.
const epsFactor = 10

// epsDriven returns the mask of the elements whose first Adam step sees a
// gradient below epsFactor·eps (grads: firstGrads, summed over gas·dp
// micro-batches; noise: the noise-driven mask, left out). Nil when there
// are none or the optimizer is not a bias-corrected Adam.
func epsDriven(grads []float32, noise []bool, plan dsconfig.Plan) []bool {
	o := plan.Optimizer
	if (o.Type != "adam" && o.Type != "adamw") || !o.BiasCorrection || o.Eps <= 0 {
		return nil
	}
	scale := 1 / float64(plan.Batch.GradientAccumulationSteps*plan.DataParallelSize())
	if plan.SeqParallelZeRO3AveragesOverWorld() {
		scale /= float64(plan.SequenceParallelSize)
	}
	var ss float64
	for _, g := range grads {
		ss += (float64(g) * scale) * (float64(g) * scale)
	}
	if c, norm := plan.GradientClipping, math.Sqrt(ss); c > 0 && norm > c {
		scale *= c / (norm + 1e-6) // DeepSpeed's clip coefficient
	}
	var mask []bool
	for i, g := range grads {
		if g == 0 || (noise != nil && noise[i]) || math.Abs(float64(g)*scale) >= epsFactor*o.Eps {
			continue
		}
		if mask == nil {
			mask = make([]bool, len(grads))
		}
		mask[i] = true
	}
	return mask
}

// epsBand is the eps-driven elements' band: the tolerance plus twice the
// first step's learning rate (for fp16, whose dynamic loss scale may skip
// the first steps, the largest of the run's).
func epsBand(steps []StepRecord, plan dsconfig.Plan, tol Tolerances) float64 {
	var lr float64
	for i, s := range steps {
		if i == 0 || plan.Precision.DType == "fp16" {
			lr = math.Max(lr, s.LRUsed)
		}
	}
	return tol.WeightsAbs + 2*lr
}
