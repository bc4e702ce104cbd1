package kernels

import (
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
)

// store16 writes p to the optional 16-bit copy: kind 1 bf16, 2 fp16.
func store16(p16 []uint16, i, kind int, p float32) {
	switch kind {
	case 1:
		p16[i] = half.BF16FromF32(p)
	case 2:
		p16[i] = half.F16FromF32(p)
	}
}

// refAdam is adam_f32; see optim.cu for the modes.
func refAdam(c *call) {
	n := c.i64(5)
	p, g, m, v := c.f32s(0, n), c.f32s(1, n), c.f32s(2, n), c.f32s(3, n)
	mode, kind := c.i32(6), c.i32(7)
	if mode < 0 || mode > 5 || kind < 0 || kind > 2 {
		c.fail(ErrBadLaunch, "mode %d, p16kind %d", mode, kind)
	}
	var p16 []uint16
	if kind != 0 {
		p16 = unsafeU16(c, 4, n)
	}
	b1, omb1, b2, omb2 := c.f32(8), c.f32(9), c.f32(10), c.f32(11)
	bc2, eps, ss, decay, wd := c.f32(12), c.f32(13), c.f32(14), c.f32(15), c.f32(16)
	for i := range n {
		gi, pi := g[i], p[i]
		var mi, vi float32
		if mode <= 2 {
			if mode == 1 {
				gi = fma32(pi, wd, gi)
			}
			if mode == 2 {
				pi = float32(pi * decay)
			}
			mi = fma32(gi, omb1, float32(m[i]*b1))
			vi = fma32(float32(omb2*gi), gi, float32(v[i]*b2))
			d := float32(sqrt32(vi)/bc2) + eps
			pi = pi + float32(float32(ss*mi)/d)
		} else {
			if mode == 4 {
				gi = fma32(pi, wd, gi)
			}
			mi = fma32(gi, omb1, float32(m[i]*b1))
			vi = fma32(float32(gi*gi), omb2, float32(v[i]*b2))
			u := mi / fma32(sqrt32(vi), bc2, eps)
			if mode == 5 {
				pi = fma32(pi, decay, pi)
			}
			pi = fma32(u, ss, pi)
		}
		p[i], m[i], v[i] = pi, mi, vi
		store16(p16, i, kind, pi)
	}
}

// refSGD is sgd_f32.
func refSGD(c *call) {
	n := c.i64(4)
	kind := c.i32(5)
	useWD, useBuf, nesterov, first := c.i32(6) != 0, c.i32(7) != 0, c.i32(8) != 0, c.i32(9) != 0
	wd, mom, omd, nlr := c.f32(10), c.f32(11), c.f32(12), c.f32(13)
	p, g := c.f32s(0, n), c.f32s(1, n)
	var buf []float32
	if useBuf {
		buf = c.f32s(2, n)
	}
	var p16 []uint16
	if kind != 0 {
		p16 = unsafeU16(c, 3, n)
	}
	for i := range n {
		d := g[i]
		if useWD {
			d = fma32(p[i], wd, d)
		}
		if useBuf {
			b := d
			if !first {
				b = fma32(d, omd, float32(buf[i]*mom))
			}
			buf[i] = b
			if nesterov {
				d = fma32(b, mom, d)
			} else {
				d = b
			}
		}
		pi := fma32(d, nlr, p[i])
		p[i] = pi
		store16(p16, i, kind, pi)
	}
}

func unsafeU16(c *call, i, n int) []uint16 {
	v := c.vec(i, device.BF16, n) // any 16-bit dtype: only the bits are used
	if v.h == nil && n > 0 {
		c.fail(ErrFault, "%s is null", c.spec.Params[i].Name)
	}
	return v.h
}
