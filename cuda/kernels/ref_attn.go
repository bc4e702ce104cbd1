package kernels

import (
	"math"

	"github.com/dszero/dszero/device"
)

func refPermute0213(dt device.DType) refFunc {
	return func(c *call) {
		A, B, C, D := c.i32(2), c.i32(3), c.i32(4), c.i32(5)
		n := A * B * C * D
		out, inp := c.vec(0, dt, n), c.vec(1, dt, n)
		for a := range A {
			for b := range B {
				for cc := range C {
					for d := range D {
						out.copyElem(((a*C+cc)*B+b)*D+d, inp, ((a*B+b)*C+cc)*D+d)
					}
				}
			}
		}
	}
}

// refQKV is qkv_split (merge false) and qkv_merge (merge true); the
// parameter order differs: split (q, k, v, qkv), merge (qkv, q, k, v).
func refQKV(dt device.DType, merge bool) refFunc {
	return func(c *call) {
		B, T, NH, NKV, HD := c.i32(4), c.i32(5), c.i32(6), c.i32(7), c.i32(8)
		W := (NH + 2*NKV) * HD
		iq, ik, iv, iqkv := 0, 1, 2, 3
		if merge {
			iqkv, iq, ik, iv = 0, 1, 2, 3
		}
		qkv := c.vec(iqkv, dt, B*T*W)
		q, k, v := c.vec(iq, dt, B*NH*T*HD), c.vec(ik, dt, B*NKV*T*HD), c.vec(iv, dt, B*NKV*T*HD)
		for b := range B {
			for t := range T {
				for col := range W {
					i := (b*T+t)*W + col
					head, d := col/HD, col%HD
					var dst vec
					var j int
					switch {
					case head < NH:
						dst, j = q, ((b*NH+head)*T+t)*HD+d
					case head < NH+NKV:
						dst, j = k, ((b*NKV+head-NH)*T+t)*HD+d
					default:
						dst, j = v, ((b*NKV+head-NH-NKV)*T+t)*HD+d
					}
					if merge {
						qkv.copyElem(i, dst, j)
					} else {
						dst.copyElem(j, qkv, i)
					}
				}
			}
		}
	}
}

func refRepeatKV(dt device.DType) refFunc {
	return func(c *call) {
		B, NKV, rep, THD := c.i32(2), c.i32(3), c.i32(4), c.i32(5)
		out, inp := c.vec(0, dt, B*NKV*rep*THD), c.vec(1, dt, B*NKV*THD)
		for b := range B {
			for h := range NKV * rep {
				for e := range THD {
					out.copyElem((b*NKV*rep+h)*THD+e, inp, (b*NKV+h/rep)*THD+e)
				}
			}
		}
	}
}

func refRepeatKVBwd(dt device.DType) refFunc {
	return func(c *call) {
		B, NKV, rep, THD := c.i32(2), c.i32(3), c.i32(4), c.i32(5)
		dinp, dout := c.vec(0, dt, B*NKV*THD), c.vec(1, dt, B*NKV*rep*THD)
		for bg := range B * NKV {
			for e := range THD {
				var s float32
				for r := range rep {
					s = s + dout.ld((bg*rep+r)*THD+e)
				}
				dinp.st(bg*THD+e, s)
			}
		}
	}
}

func refSoftmaxFwd(dt device.DType) refFunc {
	return func(c *call) {
		BH, T, scale := c.i32(2), c.i32(3), c.f32(4)
		att, pre := c.vec(0, dt, BH*T*T), c.vec(1, dt, BH*T*T)
		acc := make([]float32, c.blockThreads())
		row := make([]float32, T)
		for r := range BH * T {
			t, o := r%T, r*T
			for j := range t + 1 {
				row[j] = float32(scale * pre.ld(o+j))
			}
			m := rowMax32(acc, t+1, func(j int) float32 { return row[j] })
			sum := rowSum32(acc, t+1, func(j int) float32 { return expf(row[j] - m) })
			for j := range T {
				if j <= t {
					att.st(o+j, expf(row[j]-m)/sum)
				} else {
					att.st(o+j, 0)
				}
			}
		}
	}
}

func refSoftmaxBwd(dt device.DType) refFunc {
	return func(c *call) {
		BH, T, scale := c.i32(3), c.i32(4), c.f32(5)
		dpre, datt, att := c.vec(0, dt, BH*T*T), c.vec(1, dt, BH*T*T), c.vec(2, dt, BH*T*T)
		acc := make([]float32, c.blockThreads())
		for r := range BH * T {
			t, o := r%T, r*T
			dot := rowSum32(acc, t+1, func(j int) float32 { return float32(att.ld(o+j) * datt.ld(o+j)) })
			for j := range T {
				if j <= t {
					dpre.st(o+j, scale*float32(att.ld(o+j)*float32(datt.ld(o+j)-dot)))
				} else {
					dpre.st(o+j, 0)
				}
			}
		}
	}
}

func refXent(dt device.DType) refFunc {
	return func(c *call) {
		N, V, Vp, dloss, ignore := c.i32(4), c.i32(5), c.i32(6), c.f32(7), c.i32(8)
		if V > Vp || V <= 0 {
			c.fail(ErrBadLaunch, "V %d, Vp %d", V, Vp)
		}
		dl, logits := c.vec(0, dt, N*Vp), c.vec(2, dt, N*Vp)
		losses, targets := c.f32s(1, N), c.i32s(3, N)
		acc := make([]float32, c.blockThreads())
		row := make([]float32, V)
		for r := range N {
			o, t := r*Vp, int(targets[r])
			if t == ignore {
				losses[r] = 0
				if !c.null(0) {
					for j := range Vp {
						dl.st(o+j, 0)
					}
				}
				continue
			}
			for j := range V {
				row[j] = logits.ld(o + j)
			}
			m := rowMax32(acc, V, func(j int) float32 { return row[j] })
			lg := logf(rowSum32(acc, V, func(j int) float32 { return expf(row[j] - m) }))
			if t >= 0 && t < V {
				losses[r] = -(float32(row[t]-m) - lg)
			} else {
				losses[r] = float32(math.NaN())
			}
			if c.null(0) {
				continue
			}
			for j := range Vp {
				var g float32
				if j < V {
					g = float32(expf(float32(row[j]-m)-lg) * dloss)
					if j == t {
						g = g - dloss
					}
				}
				dl.st(o+j, g)
			}
		}
	}
}
