package kernels

import (
	"math"

	"github.com/dszero/dszero/device"
)

// refFamilies maps each kernel family to its Go reference, instantiated
// per dtype as the CUDA templates are.
var refFamilies = map[string]func(dt device.DType) refFunc{
	"fill_*":           refFill,
	"cast_f32_*":       func(dt device.DType) refFunc { return refCast(device.F32, dt) },
	"cast_*_f32":       func(dt device.DType) refFunc { return refCast(dt, device.F32) },
	"scale_*":          refScale,
	"scale_dev_*":      refScaleDev,
	"div_*":            refDiv,
	"add_*":            refAdd,
	"accumulate_*":     func(dt device.DType) refFunc { return refAccumulate(dt, dt) },
	"accumulate_*_f32": func(dt device.DType) refFunc { return refAccumulate(dt, device.F32) },
	"reduce_sum_*":     refReduceSum,
	"sum_f64":          func(device.DType) refFunc { return refSumF64 },
	"all_finite_*":     refAllFinite,
	"reduce_n_*":       refReduceN,
	"adam_f32":         func(device.DType) refFunc { return refAdam },
	"sgd_f32":          func(device.DType) refFunc { return refSGD },

	"layernorm_fwd_*":         refLayerNormFwd,
	"layernorm_bwd_*":         refLayerNormBwd,
	"layernorm_bwd_partial_*": refLayerNormBwdPartial,
	"bias_grad_partial_*":     refBiasGradPartial,
	"colsum_finish_*":         refColsumFinish,
	"rmsnorm_fwd_*":           refRMSNormFwd,
	"rmsnorm_bwd_*":           refRMSNormBwd,
	"rmsnorm_bwd_partial_*":   refRMSNormBwdPartial,

	"gelu_fwd_*":   refGeluFwd,
	"gelu_bwd_*":   refGeluBwd,
	"swiglu_fwd_*": refSwigluFwd,
	"swiglu_bwd_*": refSwigluBwd,
	"rope_*":       refRope,

	"permute_0213_*":       refPermute0213,
	"qkv_split_*":          func(dt device.DType) refFunc { return refQKV(dt, false) },
	"qkv_merge_*":          func(dt device.DType) refFunc { return refQKV(dt, true) },
	"repeat_kv_*":          refRepeatKV,
	"repeat_kv_bwd_*":      refRepeatKVBwd,
	"softmax_causal_fwd_*": refSoftmaxFwd,
	"softmax_causal_bwd_*": refSoftmaxBwd,

	"xent_fwd_bwd_*": refXent,

	"embedding_fwd_*":     refEmbeddingFwd,
	"embedding_bwd_tok_*": refEmbeddingBwdTok,
	"embedding_bwd_pos_*": refEmbeddingBwdPos,
}

func refFill(dt device.DType) refFunc {
	return func(c *call) {
		n := c.i64(1)
		x, v := c.vec(0, dt, n), c.f32(2)
		gridLoop(n, func(i int) { x.st(i, v) })
	}
}

func refCast(from, to device.DType) refFunc {
	return func(c *call) {
		n := c.i64(2)
		dst, src := c.vec(0, to, n), c.vec(1, from, n)
		gridLoop(n, func(i int) { dst.st(i, src.ld(i)) })
	}
}

func refScale(dt device.DType) refFunc {
	return func(c *call) {
		n := c.i64(1)
		x, s := c.vec(0, dt, n), c.f32(2)
		gridLoop(n, func(i int) { x.st(i, x.ld(i)*s) })
	}
}

func refScaleDev(dt device.DType) refFunc {
	return func(c *call) {
		n := c.i64(1)
		x := c.vec(0, dt, n)
		s := c.f32s(2, 1)[0]
		gridLoop(n, func(i int) { x.st(i, x.ld(i)*s) })
	}
}

func refDiv(dt device.DType) refFunc {
	return func(c *call) {
		n := c.i64(1)
		x, d := c.vec(0, dt, n), c.f32(2)
		gridLoop(n, func(i int) { x.st(i, x.ld(i)/d) })
	}
}

func refAdd(dt device.DType) refFunc {
	return func(c *call) {
		n := c.i64(3)
		out, a, b := c.vec(0, dt, n), c.vec(1, dt, n), c.vec(2, dt, n)
		gridLoop(n, func(i int) { out.st(i, a.ld(i)+b.ld(i)) })
	}
}

func refAccumulate(src, dst device.DType) refFunc {
	return func(c *call) {
		n := c.i64(2)
		d, s := c.vec(0, dst, n), c.vec(1, src, n)
		gridLoop(n, func(i int) { d.st(i, d.ld(i)+s.ld(i)) })
	}
}

// refReduceSum folds as reduce_sum: thread g = b·B + t takes g, g+G, ….
func refReduceSum(dt device.DType) refFunc {
	return func(c *call) {
		n, square := c.i64(2), c.i32(3) != 0
		x := c.vec(1, dt, n)
		B, nb := c.blockThreads(), int(c.grid.X)
		partial := c.f64s(0, nb)
		G := nb * B
		acc := make([]float64, B)
		for b := range nb {
			for t := range B {
				a := 0.0
				for i := b*B + t; i < n; i += G {
					v := float64(x.ld(i))
					if square {
						v = float64(v * v)
					}
					a = a + v
				}
				acc[t] = a
			}
			partial[b] = blockSum64(acc)
		}
	}
}

func refSumF64(c *call) {
	n := c.i32(2)
	out, partial := c.f64s(0, 1), c.f64s(1, n)
	B := c.blockThreads()
	acc := make([]float64, B)
	for t := range B {
		a := 0.0
		for i := t; i < n; i += B {
			a = a + partial[i]
		}
		acc[t] = a
	}
	out[0] = blockSum64(acc)
}

func refAllFinite(dt device.DType) refFunc {
	return func(c *call) {
		n := c.i64(2)
		flag, x := c.u32s(0, 1), c.vec(1, dt, n)
		for i := range n {
			if math.Float32bits(x.ld(i))&0x7F800000 == 0x7F800000 {
				flag[0] |= 1
				return
			}
		}
	}
}

// refReduceN is comm.Reduce's contract; see reduce_n in elementwise.cu.
func refReduceN(dt device.DType) refFunc {
	return func(c *call) {
		nsrc, n, op := c.i32(2), c.i64(3), c.i32(4)
		if nsrc < 1 || op < 0 || op > 2 {
			c.fail(ErrBadLaunch, "nsrc %d, op %d", nsrc, op)
		}
		dst := c.vec(0, dt, n)
		addrs := c.u64s(1, nsrc)
		srcs := make([]vec, nsrc)
		for k, a := range addrs {
			srcs[k] = c.vecAt(a, dt, n, "srcs[k]")
		}
		div := float32(nsrc)
		gridLoop(n, func(i int) {
			if nsrc == 1 {
				dst.copyElem(i, srcs[0], i)
				return
			}
			s := srcs[0].ld(i)
			if op == 2 {
				s = rnd(dt, s/div)
			}
			for k := 1; k < nsrc; k++ {
				x := srcs[k].ld(i)
				if op == 2 {
					x = rnd(dt, x/div)
				}
				s = rnd(dt, s+x)
			}
			if op == 1 {
				s = s / div
			}
			dst.st(i, s)
		})
	}
}
