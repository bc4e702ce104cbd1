package comm

import (
	"fmt"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
)

// reduceBlock is how many elements Reduce accumulates at a time: 4 KiB of
// float32, so the accumulator stays in L1 while each source streams past.
const reduceBlock = 1024

// Reduce writes the element-wise reduction of srcs into every buffer of
// dsts. It is the arithmetic every backend's reductions must reproduce bit
// for bit. With n = len(srcs) sources, for each element i, where x_k is
// srcs[k][i] widened exactly to float32:
//
//	x_k = x_k / float32(n) for PreAvg only (one float32 division each;
//	                       fp16/bf16: the quotient rounded to nearest even)
//	s = x_0
//	s = s + x_k            for k = 1, …, n−1, in this order (float32 adds;
//	                       fp16/bf16: s rounded to nearest even after each)
//	s = s / float32(n)     for Avg only (one float32 division)
//	dst[i] = s             fp32; fp16/bf16: s rounded to nearest even
//
// PreAvg is therefore bit for bit the division of every source in place
// (tensor.div_ in its dtype) followed by Sum, without touching the sources.
//
// So a 16-bit reduction adds in the buffers' dtype, as torch's backends do
// for a 16-bit tensor: gloo's sum<c10::BFloat16> and NCCL's ring add two
// 16-bit values in float32 and round the result at every hop (their order
// of ranks is the ring's; here it is the order of srcs: rank order, or
// gloo's ring order where an all-reduce passes them through ReduceRing). For two ranks that is
// one correctly rounded a+b, the same as adding in float32 and rounding
// once. NaN results of a 16-bit reduction are package half's canonical
// NaN. With one source, every dst becomes a copy of it, bit for bit, for
// both ops.
//
// A dst may be one of the srcs, or alias one element for element (the same
// start); other overlaps give unspecified results. All buffers must have one
// dtype and one length, and there must be at least one source; anything else
// is a programmer error and panics.
func Reduce(dsts, srcs []Buffer, op Op) {
	if len(srcs) == 0 {
		panic("comm: Reduce without sources")
	}
	if !op.Valid() {
		panic(fmt.Sprintf("comm: Reduce with invalid %v", op))
	}
	dt, n := srcs[0].dtype, srcs[0].Len()
	for _, group := range [][]Buffer{srcs, dsts} {
		for _, b := range group {
			if b.dtype != dt || b.Len() != n {
				panic(fmt.Sprintf("comm: Reduce of %v with %v: dtypes and lengths must agree", srcs[0], b))
			}
		}
	}
	if len(srcs) == 1 { // x/1 is x: every op copies
		for _, d := range dsts {
			Copy(d, srcs[0])
		}
		return
	}
	switch dt {
	case device.F32:
		reduceF32(dsts, srcs, op)
	case device.F16:
		reduce16(dsts, srcs, op, half.F16ToF32, half.F32ToF16, half.RoundF16)
	case device.BF16:
		reduce16(dsts, srcs, op, half.BF16ToF32, half.F32ToBF16, half.RoundBF16)
	default:
		panic(fmt.Sprintf("comm: Reduce of invalid dtype %v", dt))
	}
}

func reduceF32(dsts, srcs []Buffer, op Op) {
	var acc [reduceBlock]float32
	n := srcs[0].Len()
	div := float32(len(srcs))
	for lo := 0; lo < n; lo += reduceBlock {
		hi := min(lo+reduceBlock, n)
		a := acc[:hi-lo]
		if op == PreAvg {
			preAvgBlock(a, srcs, lo, hi, div)
			for _, d := range dsts {
				copy(d.f32[lo:hi], a)
			}
			continue
		}
		// Two sources per pass over a where possible: a = (a + x) + y keeps
		// the order and halves the loads and stores of a.
		rest := srcs[2:]
		if len(rest) > 0 {
			add3(a, srcs[0].f32[lo:hi], srcs[1].f32[lo:hi], rest[0].f32[lo:hi])
			rest = rest[1:]
		} else {
			add2(a, srcs[0].f32[lo:hi], srcs[1].f32[lo:hi])
		}
		for ; len(rest) >= 2; rest = rest[2:] {
			addTo2(a, rest[0].f32[lo:hi], rest[1].f32[lo:hi])
		}
		if len(rest) == 1 {
			addTo(a, rest[0].f32[lo:hi])
		}
		if op == Avg {
			divide(a, div)
		}
		for _, d := range dsts {
			copy(d.f32[lo:hi], a)
		}
	}
}

// add2 is a = x + y, element-wise; unrolled by 4 (Go does not vectorise).
func add2(a, x, y []float32) {
	x, y = x[:len(a)], y[:len(a)]
	i := 0
	for ; i+4 <= len(a); i += 4 {
		aa, xx, yy := a[i:i+4:i+4], x[i:i+4:i+4], y[i:i+4:i+4]
		aa[0] = xx[0] + yy[0]
		aa[1] = xx[1] + yy[1]
		aa[2] = xx[2] + yy[2]
		aa[3] = xx[3] + yy[3]
	}
	for ; i < len(a); i++ {
		a[i] = x[i] + y[i]
	}
}

// add3 is a = (x + y) + z, element-wise.
func add3(a, x, y, z []float32) {
	x, y, z = x[:len(a)], y[:len(a)], z[:len(a)]
	i := 0
	for ; i+4 <= len(a); i += 4 {
		aa, xx, yy, zz := a[i:i+4:i+4], x[i:i+4:i+4], y[i:i+4:i+4], z[i:i+4:i+4]
		aa[0] = xx[0] + yy[0] + zz[0]
		aa[1] = xx[1] + yy[1] + zz[1]
		aa[2] = xx[2] + yy[2] + zz[2]
		aa[3] = xx[3] + yy[3] + zz[3]
	}
	for ; i < len(a); i++ {
		a[i] = x[i] + y[i] + z[i]
	}
}

// addTo2 is a = (a + x) + y, element-wise.
func addTo2(a, x, y []float32) {
	x, y = x[:len(a)], y[:len(a)]
	i := 0
	for ; i+4 <= len(a); i += 4 {
		aa, xx, yy := a[i:i+4:i+4], x[i:i+4:i+4], y[i:i+4:i+4]
		aa[0] = aa[0] + xx[0] + yy[0]
		aa[1] = aa[1] + xx[1] + yy[1]
		aa[2] = aa[2] + xx[2] + yy[2]
		aa[3] = aa[3] + xx[3] + yy[3]
	}
	for ; i < len(a); i++ {
		a[i] = a[i] + x[i] + y[i]
	}
}

// addTo is a += x, element-wise.
func addTo(a, x []float32) {
	x = x[:len(a)]
	i := 0
	for ; i+4 <= len(a); i += 4 {
		aa, xx := a[i:i+4:i+4], x[i:i+4:i+4]
		aa[0] += xx[0]
		aa[1] += xx[1]
		aa[2] += xx[2]
		aa[3] += xx[3]
	}
	for ; i < len(a); i++ {
		a[i] += x[i]
	}
}

// divide is a /= d, element-wise. For a power of two d it multiplies by
// 1/d, which is exact and gives the same bits as the division (both are the
// correctly rounded x/d); for other d it divides, since x·RN(1/d) can differ
// from x/d in the last bit.
func divide(a []float32, d float32) {
	if isPow2(d) {
		inv := 1 / d
		i := 0
		for ; i+4 <= len(a); i += 4 {
			aa := a[i : i+4 : i+4]
			aa[0] *= inv
			aa[1] *= inv
			aa[2] *= inv
			aa[3] *= inv
		}
		for ; i < len(a); i++ {
			a[i] *= inv
		}
		return
	}
	for i := range a {
		a[i] /= d
	}
}

// preAvgBlock is a = x_0/d + x_1/d + … over srcs[k][lo:hi], in order,
// for two sources or more. For a power of two d each quotient is x·(1/d),
// exactly, and two sources share a pass over a: (a + x/d) + y/d keeps the
// order and halves the loads and stores of a.
func preAvgBlock(a []float32, srcs []Buffer, lo, hi int, d float32) {
	if !isPow2(d) {
		quotient(a, srcs[0].f32[lo:hi], d)
		for _, s := range srcs[1:] {
			addQuotient(a, s.f32[lo:hi], d)
		}
		return
	}
	inv := 1 / d
	scaled2(a, srcs[0].f32[lo:hi], srcs[1].f32[lo:hi], inv)
	rest := srcs[2:]
	for ; len(rest) >= 2; rest = rest[2:] {
		addScaled2(a, rest[0].f32[lo:hi], rest[1].f32[lo:hi], inv)
	}
	if len(rest) == 1 {
		addQuotient(a, rest[0].f32[lo:hi], d)
	}
}

// scaled2 is a = x·m + y·m, element-wise.
func scaled2(a, x, y []float32, m float32) {
	x, y = x[:len(a)], y[:len(a)]
	i := 0
	for ; i+4 <= len(a); i += 4 {
		aa, xx, yy := a[i:i+4:i+4], x[i:i+4:i+4], y[i:i+4:i+4]
		aa[0] = float32(xx[0]*m) + float32(yy[0]*m)
		aa[1] = float32(xx[1]*m) + float32(yy[1]*m)
		aa[2] = float32(xx[2]*m) + float32(yy[2]*m)
		aa[3] = float32(xx[3]*m) + float32(yy[3]*m)
	}
	for ; i < len(a); i++ {
		a[i] = float32(x[i]*m) + float32(y[i]*m)
	}
}

// addScaled2 is a = (a + x·m) + y·m, element-wise.
func addScaled2(a, x, y []float32, m float32) {
	x, y = x[:len(a)], y[:len(a)]
	i := 0
	for ; i+4 <= len(a); i += 4 {
		aa, xx, yy := a[i:i+4:i+4], x[i:i+4:i+4], y[i:i+4:i+4]
		aa[0] = aa[0] + float32(xx[0]*m) + float32(yy[0]*m)
		aa[1] = aa[1] + float32(xx[1]*m) + float32(yy[1]*m)
		aa[2] = aa[2] + float32(xx[2]*m) + float32(yy[2]*m)
		aa[3] = aa[3] + float32(xx[3]*m) + float32(yy[3]*m)
	}
	for ; i < len(a); i++ {
		a[i] = a[i] + float32(x[i]*m) + float32(y[i]*m)
	}
}

// quotient is a = x / d, element-wise, with divide's arithmetic. The
// conversions in these kernels round each product on its own: Go may
// otherwise fuse a multiply and an add (arm64's FMA), which rounds once
// and differs from x/d + y/d where a product underflows.
func quotient(a, x []float32, d float32) {
	x = x[:len(a)]
	if !isPow2(d) {
		for i := range a {
			a[i] = x[i] / d
		}
		return
	}
	inv := 1 / d
	i := 0
	for ; i+4 <= len(a); i += 4 {
		aa, xx := a[i:i+4:i+4], x[i:i+4:i+4]
		aa[0] = float32(xx[0] * inv)
		aa[1] = float32(xx[1] * inv)
		aa[2] = float32(xx[2] * inv)
		aa[3] = float32(xx[3] * inv)
	}
	for ; i < len(a); i++ {
		a[i] = float32(x[i] * inv)
	}
}

// addQuotient is a += x / d, element-wise, with divide's arithmetic.
func addQuotient(a, x []float32, d float32) {
	x = x[:len(a)]
	if !isPow2(d) {
		for i := range a {
			a[i] += x[i] / d
		}
		return
	}
	inv := 1 / d
	i := 0
	for ; i+4 <= len(a); i += 4 {
		aa, xx := a[i:i+4:i+4], x[i:i+4:i+4]
		aa[0] += float32(xx[0] * inv)
		aa[1] += float32(xx[1] * inv)
		aa[2] += float32(xx[2] * inv)
		aa[3] += float32(xx[3] * inv)
	}
	for ; i < len(a); i++ {
		a[i] += float32(x[i] * inv)
	}
}

func isPow2(d float32) bool {
	n := int(d)
	return float32(n) == d && n > 0 && n&(n-1) == 0
}

func reduce16(dsts, srcs []Buffer, op Op, widen func([]float32, []uint16), narrow func([]uint16, []float32), round func([]float32)) {
	var acc, tmp [reduceBlock]float32
	n := srcs[0].Len()
	div := float32(len(srcs))
	for lo := 0; lo < n; lo += reduceBlock {
		hi := min(lo+reduceBlock, n)
		a, t := acc[:hi-lo], tmp[:hi-lo]
		widen(a, srcs[0].bits[lo:hi])
		if op == PreAvg {
			divide(a, div)
			round(a)
		}
		for _, s := range srcs[1:] {
			widen(t, s.bits[lo:hi])
			if op == PreAvg {
				divide(t, div)
				round(t)
			}
			addTo(a, t)
			round(a)
		}
		if op == Avg {
			divide(a, div)
		}
		if len(dsts) == 0 {
			continue
		}
		first := dsts[0].bits[lo:hi]
		narrow(first, a)
		for _, d := range dsts[1:] {
			copy(d.bits[lo:hi], first)
		}
	}
}
