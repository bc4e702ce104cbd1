package kernels

import (
	"math"

	"github.com/dszero/dszero/device"
)

// rowSum64 folds f(i) for i in [0, C) the way a block of B threads does:
// thread t takes t, t+B, …, then block_sum.
func rowSum64(acc []float64, C int, f func(i int) float64) float64 {
	B := len(acc)
	for t := range B {
		a := 0.0
		for i := t; i < C; i += B {
			a = a + f(i)
		}
		acc[t] = a
	}
	return blockSum64(acc)
}

func rowSum32(acc []float32, C int, f func(i int) float32) float32 {
	B := len(acc)
	for t := range B {
		var a float32
		for i := t; i < C; i += B {
			a = a + f(i)
		}
		acc[t] = a
	}
	return blockSum32(acc)
}

func rowMax32(acc []float32, C int, f func(i int) float32) float32 {
	B := len(acc)
	for t := range B {
		m := float32(math.Inf(-1))
		for i := t; i < C; i += B {
			if v := f(i); v > m {
				m = v
			}
		}
		acc[t] = m
	}
	return blockMax32(acc)
}

func refLayerNormFwd(dt device.DType) refFunc {
	return func(c *call) {
		N, C, eps := c.i32(6), c.i32(7), c.f32(8)
		out, inp := c.vec(0, dt, N*C), c.vec(3, dt, N*C)
		mean, rstd := c.f32s(1, N), c.f32s(2, N)
		w, b := c.vec(4, dt, C), c.vec(5, dt, C)
		acc := make([]float64, c.blockThreads())
		for r := range N {
			o := r * C
			mu := rowSum64(acc, C, func(i int) float64 { return float64(inp.ld(o + i)) }) / float64(C)
			ss := rowSum64(acc, C, func(i int) float64 {
				d := float64(inp.ld(o+i)) - mu
				return float64(d * d)
			})
			mu32, var32 := float32(mu), float32(ss/float64(C))
			rs := 1 / sqrt32(var32+eps)
			shift := float32(-rs * mu32)
			for i := range C {
				y := float32(float32(inp.ld(o+i)*rs)+shift) * w.ld(i)
				if !c.null(5) {
					y = y + b.ld(i)
				}
				out.st(o+i, y)
			}
			if mean != nil {
				mean[r] = mu32
			}
			if rstd != nil {
				rstd[r] = rs
			}
		}
	}
}

func refLayerNormBwd(dt device.DType) refFunc {
	return func(c *call) {
		N, C := c.i32(6), c.i32(7)
		dinp, dout, inp := c.vec(0, dt, N*C), c.vec(1, dt, N*C), c.vec(2, dt, N*C)
		w := c.vec(3, dt, C)
		mean, rstd := c.f32s(4, N), c.f32s(5, N)
		acc := make([]float64, c.blockThreads())
		invC := 1 / float32(C)
		for r := range N {
			o := r * C
			sds := float32(rowSum64(acc, C, func(i int) float64 {
				return float64(float32(dout.ld(o+i)*w.ld(i))) * float64(inp.ld(o+i))
			}))
			sdb := float32(rowSum64(acc, C, func(i int) float64 { return float64(float32(dout.ld(o+i) * w.ld(i))) }))
			a, mu := rstd[r], mean[r]
			k1 := float32(float32(float32(float32(float32(sdb*mu)-sds)*a)*a)*a) * invC
			k2 := float32(-k1*mu) - float32(float32(sdb*a)*invC)
			for i := range C {
				t := float32(float32(a*dout.ld(o+i)) * w.ld(i))
				dinp.st(o+i, float32(t+float32(k1*inp.ld(o+i)))+k2)
			}
		}
	}
}

// chunks is the column-partial geometry: rows [k*rpc, min(N,(k+1)*rpc)).
func (c *call) chunks(N, rpc int) int {
	if rpc <= 0 {
		c.fail(ErrBadLaunch, "rows per chunk %d", rpc)
	}
	return (N + rpc - 1) / rpc
}

func refLayerNormBwdPartial(dt device.DType) refFunc {
	return func(c *call) {
		N, C, rpc := c.i32(5), c.i32(6), c.i32(7)
		nk := c.chunks(N, rpc)
		partial := c.f64s(0, nk*2*C)
		dout, inp := c.vec(1, dt, N*C), c.vec(2, dt, N*C)
		mean, rstd := c.f32s(3, N), c.f32s(4, N)
		for k := range nk {
			for col := range C {
				aw, ab := 0.0, 0.0
				for r := k * rpc; r < min(N, (k+1)*rpc); r++ {
					a := rstd[r]
					shift := float32(-a * mean[r])
					dy := dout.ld(r*C + col)
					aw = aw + float64(float32(dy*float32(float32(inp.ld(r*C+col)*a)+shift)))
					ab = ab + float64(dy)
				}
				partial[k*2*C+col] = aw
				partial[k*2*C+C+col] = ab
			}
		}
	}
}

func refBiasGradPartial(dt device.DType) refFunc {
	return func(c *call) {
		N, OC, rpc := c.i32(2), c.i32(3), c.i32(4)
		nk := c.chunks(N, rpc)
		partial, dout := c.f64s(0, nk*OC), c.vec(1, dt, N*OC)
		for k := range nk {
			for col := range OC {
				acc := 0.0
				for r := k * rpc; r < min(N, (k+1)*rpc); r++ {
					acc = acc + float64(dout.ld(r*OC+col))
				}
				partial[k*OC+col] = acc
			}
		}
	}
}

func refColsumFinish(dt device.DType) refFunc {
	return func(c *call) {
		nk, width, stride, accum := c.i32(2), c.i32(3), c.i32(4), c.i32(5) != 0
		if nk > 0 && stride < width {
			c.fail(ErrBadLaunch, "stride %d below width %d", stride, width)
		}
		dst := c.vec(0, dt, width)
		partial := c.f64s(1, max(0, (nk-1)*stride+width))
		for col := range width {
			s := 0.0
			for k := range nk {
				s = s + partial[k*stride+col]
			}
			f := float32(s)
			if accum {
				dst.st(col, dst.ld(col)+rnd(dt, f))
			} else {
				dst.st(col, f)
			}
		}
	}
}

func refRMSNormFwd(dt device.DType) refFunc {
	return func(c *call) {
		N, C, eps := c.i32(4), c.i32(5), c.f32(6)
		out, inp := c.vec(0, dt, N*C), c.vec(2, dt, N*C)
		rrms, w := c.f32s(1, N), c.vec(3, dt, C)
		acc := make([]float64, c.blockThreads())
		for r := range N {
			o := r * C
			ss := rowSum64(acc, C, func(i int) float64 {
				v := float64(inp.ld(o + i))
				return float64(v * v)
			})
			ms := float32(ss / float64(C))
			rr := 1 / sqrt32(ms+eps)
			for i := range C {
				out.st(o+i, float32(rnd(dt, float32(inp.ld(o+i)*rr))*w.ld(i)))
			}
			if rrms != nil {
				rrms[r] = rr
			}
		}
	}
}

func refRMSNormBwd(dt device.DType) refFunc {
	return func(c *call) {
		N, C := c.i32(5), c.i32(6)
		dinp, dout, inp := c.vec(0, dt, N*C), c.vec(1, dt, N*C), c.vec(2, dt, N*C)
		w, rrms := c.vec(3, dt, C), c.f32s(4, N)
		acc := make([]float64, c.blockThreads())
		invC := 1 / float32(C)
		for r := range N {
			o := r * C
			sd := float32(rowSum64(acc, C, func(i int) float64 {
				return float64(float32(dout.ld(o+i)*w.ld(i))) * float64(inp.ld(o+i))
			}))
			rr := rrms[r]
			k := float32(float32(float32(float32(sd*rr)*rr)*rr) * invC)
			for i := range C {
				dinp.st(o+i, float32(rr*float32(dout.ld(o+i)*w.ld(i)))-float32(k*inp.ld(o+i)))
			}
		}
	}
}

func refRMSNormBwdPartial(dt device.DType) refFunc {
	return func(c *call) {
		N, C, rpc := c.i32(4), c.i32(5), c.i32(6)
		nk := c.chunks(N, rpc)
		partial := c.f64s(0, nk*C)
		dout, inp, rrms := c.vec(1, dt, N*C), c.vec(2, dt, N*C), c.f32s(3, N)
		for k := range nk {
			for col := range C {
				acc := 0.0
				for r := k * rpc; r < min(N, (k+1)*rpc); r++ {
					j := r*C + col
					acc = acc + float64(float32(dout.ld(j)*rnd(dt, float32(inp.ld(j)*rrms[r]))))
				}
				partial[k*C+col] = acc
			}
		}
	}
}
