package optim

import "math"

// Gradient clipping, as each reference does it. Every function is pure;
// the all-reduce between the "local" and the "global" value is the
// caller's (see the package doc for the whole recipe of each path).

// clipEps is the 1e-6 every path adds to the norm, as a float32 scalar.
const clipEps = float32(1e-6)

// ClipCoef is the textbook coefficient min(1, maxNorm/(totalNorm+1e-6)) in
// float64. The exact-bits variants below are what the references compute.
func ClipCoef(totalNorm, maxNorm float64) float64 {
	c := maxNorm / (totalNorm + 1e-6)
	if c > 1 {
		return 1
	}
	return c
}

// DSStage0Norm is the rank-local total of DeepSpeed's stage-0 clipping
// (runtime/utils.py clip_grad_norm_, fp32 without ZeRO):
// torch.stack(per-tensor float32 norms).square().sum().float().pow(1/2).
// norms are Norm2F32 of each parameter's gradient; scratch holds len(norms).
func DSStage0Norm(norms, scratch []float32) float32 {
	return sqrt32(SquaredSumF32(norms, scratch))
}

// DSStage0Share is what each rank contributes to the all-reduce (SUM) that
// averages the norm over the data-parallel group: total * 1.0 / world.
func DSStage0Share(total float32, world int) float32 {
	return total / float32(world)
}

// DSStage0Coef is torch.min(tensor([1.0]), tensor([maxNorm]) / (total + 1e-6))
// in float32; DeepSpeed multiplies every gradient by it, even when it is 1.
func DSStage0Coef(total float32, maxNorm float64) float32 {
	c := float32(maxNorm) / (total + clipEps)
	if c > 1 {
		return 1
	}
	return c // NaN propagates, as torch.min does
}

// TorchTotalNorm is torch.nn.utils.clip_grad_norm_'s total (1.13):
// torch.norm(torch.stack(per-tensor norms), 2), all float32.
func TorchTotalNorm(norms []float32) float32 { return Norm2F32(norms) }

// TorchClipCoef is clip_grad_norm_'s torch.clamp(max_norm/(total+1e-6),
// max=1.0). Python's float/tensor is tensor.reciprocal()*float, so the
// coefficient is rounded twice.
func TorchClipCoef(total float32, maxNorm float64) float32 {
	c := float32(float32(1)/(total+clipEps)) * float32(maxNorm)
	if c > 1 {
		return 1
	}
	return c
}

// Zero12LocalSumSq is the rank-local part of ZeRO-1/2's norm
// (stage_1_and_2.get_grad_norm_direct): the float64 norms of the gradient
// fragments this rank owns (Norm2F64), squared and summed in float64, then
// .float(). Ranks all-reduce (SUM) this float32 value.
func Zero12LocalSumSq(norms, scratch []float64) float32 {
	return float32(SquaredSumF64(norms, scratch))
}

// ZeroNorm turns an all-reduced float32 sum of squares into the group norm
// (.pow(1/2)), with DeepSpeed's -1 for an infinite or NaN norm.
func ZeroNorm(sumSq float32) float32 {
	r := sqrt32(sumSq)
	if math.IsInf(float64(r), 0) || r != r {
		return -1
	}
	return r
}

// ZeroGlobalNorm is scaled_global_norm: the 2-norm of the per-group norms
// (torch.linalg.vector_norm of a float32 stack).
func ZeroGlobalNorm(groupNorms []float32) float32 { return Norm2F32(groupNorms) }

// ZeroUnscaleFactor is the factor unscale_and_clip_grads multiplies the fp32
// gradient partition by (ZeRO-1/2, float32 tensors):
//
//	clip = clamp(((total/loss_scale) + 1e-6) / clip_grad, min=1)
//	grad *= 1 / (clip*loss_scale)
//
// With clipGrad ≤ 0 the factor is 1/loss_scale. total is the scaled global
// norm (norm × loss scale); -1 (overflow) yields no clipping.
func ZeroUnscaleFactor(total float32, lossScale, clipGrad float64) float32 {
	if clipGrad <= 0 {
		return float32(1 / lossScale)
	}
	ls := float32(lossScale)
	c := ((total / ls) + clipEps) / float32(clipGrad)
	if c < 1 {
		c = 1
	}
	combined := c * ls
	return float32(1) / combined
}

// Zero3LocalSumSq is ZeRO-3's rank-local part (stage3.get_grad_norm_direct):
// torch.sum(torch.pow(torch.stack(float64 norms), 2)), kept in float64 for
// the all-reduce.
func Zero3LocalSumSq(norms, scratch []float64) float64 { return SquaredSumF64(norms, scratch) }

// Zero3Norm is total**(1/2) of the all-reduced float64 sum, -1 if not finite.
func Zero3Norm(sumSq float64) float64 {
	r := math.Sqrt(sumSq)
	if math.IsInf(r, 0) || r != r {
		return -1
	}
	return r
}

// Zero3UnscaleFactor is stage 3's unscale_and_clip_grads on a float64
// norm; the float64 factor is rounded to float32 when it multiplies the
// float32 gradient partition.
func Zero3UnscaleFactor(total, lossScale, clipGrad float64) float32 {
	combined := lossScale
	if clipGrad > 0 {
		c := ((total / lossScale) + 1e-6) / clipGrad
		if c < 1 {
			c = 1
		}
		combined = c * lossScale
	}
	return float32(1 / combined)
}

// Scale multiplies x by c in place (grad.mul_(coef)) on the pool's
// workers; a nil pool scales on the caller.
func (p *Pool) Scale(x []float32, c float32) { p.each(x, c, scaleChunk) }

// Divide divides x by d in place (torch's div_ by a scalar, float32) on
// the pool's workers; a nil pool divides on the caller. A quotient is not
// a product by 1/d, so this is a division per element (eight per
// instruction where the CPU has AVX).
func (p *Pool) Divide(x []float32, d float32) { p.each(x, d, divideChunk) }

// each runs f(chunk, c) over chunks of x on the pool's workers, or over
// all of x on the caller when p is nil.
func (p *Pool) each(x []float32, c float32, f func([]float32, float32)) {
	if p == nil {
		f(x, c)
		return
	}
	p.smu.Lock()
	defer p.smu.Unlock()
	p.ek = eachKernel{x: x, c: c, f: f}
	p.Run(len(x), &p.ek)
	p.ek = eachKernel{}
}

type eachKernel struct {
	x []float32
	c float32
	f func([]float32, float32)
}

func (k *eachKernel) Chunk(lo, hi int) { k.f(k.x[lo:hi], k.c) }

func scaleChunk(x []float32, c float32) {
	for i := scaleVector(x, c); i < len(x); i++ {
		x[i] *= c
	}
}

func divideChunk(x []float32, d float32) {
	for i := divideVector(x, d); i < len(x); i++ {
		x[i] /= d
	}
}
