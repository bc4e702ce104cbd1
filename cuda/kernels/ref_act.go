package kernels

import "github.com/dszero/dszero/device"

const (
	geluBeta  float32 = 0.7978845608028654
	geluKappa float32 = 0.044715
)

// geluInner is β·(x + κ·x³) in gelu.cu's order.
func geluInner(x float32) float32 {
	cube := float32(float32(x*x) * x)
	return geluBeta * float32(x+float32(geluKappa*cube))
}

func refGeluFwd(dt device.DType) refFunc {
	return func(c *call) {
		n := c.i64(2)
		out, inp := c.vec(0, dt, n), c.vec(1, dt, n)
		gridLoop(n, func(i int) {
			x := inp.ld(i)
			t := tanhf(geluInner(x))
			out.st(i, float32(0.5*x)*float32(1+t))
		})
	}
}

func refGeluBwd(dt device.DType) refFunc {
	return func(c *call) {
		n := c.i64(3)
		dinp, inp, dout := c.vec(0, dt, n), c.vec(1, dt, n), c.vec(2, dt, n)
		gridLoop(n, func(i int) {
			x := inp.ld(i)
			t := tanhf(geluInner(x))
			left := 0.5 * float32(1+t)
			right := float32(float32(float32(float32(0.5*x)*float32(1-float32(t*t)))*geluBeta) *
				float32(1+float32(float32(float32(3*geluKappa)*x)*x)))
			dinp.st(i, dout.ld(i)*float32(left+right))
		})
	}
}

func refSwigluFwd(dt device.DType) refFunc {
	return func(c *call) {
		n := c.i64(3)
		out, gate, up := c.vec(0, dt, n), c.vec(1, dt, n), c.vec(2, dt, n)
		gridLoop(n, func(i int) {
			g := gate.ld(i)
			s := rnd(dt, g/float32(1+expf(-g)))
			out.st(i, s*up.ld(i))
		})
	}
}

func refSwigluBwd(dt device.DType) refFunc {
	return func(c *call) {
		n := c.i64(5)
		dgate, dup := c.vec(0, dt, n), c.vec(1, dt, n)
		gate, up, dout := c.vec(2, dt, n), c.vec(3, dt, n), c.vec(4, dt, n)
		gridLoop(n, func(i int) {
			g, u, dy := gate.ld(i), up.ld(i), dout.ld(i)
			sig := 1 / float32(1+expf(-g))
			s := rnd(dt, g*sig)
			dgate.st(i, float32(dy*u)*float32(sig*float32(1+float32(g*float32(1-sig)))))
			dup.st(i, dy*s)
		})
	}
}

func refRope(dt device.DType) refFunc {
	return func(c *call) {
		BT, T, H, D := c.i32(4), c.i32(5), c.i32(6), c.i32(7)
		interleaved, inverse := c.i32(8) != 0, c.i32(9) != 0
		if D%2 != 0 || T <= 0 {
			c.fail(ErrBadLaunch, "head width %d, T %d", D, T)
		}
		half := D / 2
		n := BT * H * D
		out, inp := c.vec(0, dt, n), c.vec(1, dt, n)
		cosT, sinT := c.f32s(2, T*half), c.f32s(3, T*half)
		for p := range BT * H * half {
			j, head := p%half, p/half
			t := (head / H) % T
			base := head * D
			i1, i2 := base+j, base+j+half
			if interleaved {
				i1, i2 = base+2*j, base+2*j+1
			}
			cs, sn := cosT[t*half+j], sinT[t*half+j]
			if inverse {
				sn = -sn
			}
			x1, x2 := inp.ld(i1), inp.ld(i2)
			out.st(i1, float32(x1*cs)-float32(x2*sn))
			out.st(i2, float32(x2*cs)+float32(x1*sn))
		}
	}
}
