//go:build !purego

package gpt

import (
	"golang.org/x/sys/cpu"

	"github.com/dszero/dszero/internal/vecloop"
)

// The fast path's softmax cross-entropy evaluates e^x over every logit
// twice a step (the forward's Σ e^(x−max), the backward's softmax): on
// amd64 with AVX2 and FMA, eight lanes at a time (expvec_amd64.s, Cephes's
// expf: within 2 ulp of e^x, TestExpVec), elsewhere fastExp one by one.
// Two differences from fastExp, harmless where they are used, whose
// arguments are shifted logits ≤ 0: results below 2⁻¹²⁶ (arguments below
// −87.34) are 0 rather than subnormal — an absolute error below 1.2e-38
// in a sum that holds e^0 = 1 — and the forward adds the exps in eight
// float32 lanes, each in order, where fastExp's loop adds them in one
// float64 sum.

// haveExpVec: the CPU runs expvec_amd64.s (AVX2 and FMA).
var haveExpVec = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// expSubSumAVX2 adds e^((x[i]−a)−b) into sums[i mod 8] for i < n, in
// order; n is a positive multiple of 8.
//
//go:noescape
func expSubSumAVX2(x *float32, n int, a, b float32, sums *[8]float32)

// expSubScaleAVX2 sets x[i] = e^((x[i]−a)−b)·d for i < n; n is a positive
// multiple of 8.
//
//go:noescape
func expSubScaleAVX2(x *float32, n int, a, b, d float32)

// expSubSum is Σ e^((x[i]−a)−b) over x, in float64 (see above).
func expSubSum(x []float32, a, b float32) float64 {
	var lanes [8]float32
	n := vecloop.Prefix(haveExpVec, len(x), func(i, n int) { expSubSumAVX2(&x[i], n, a, b, &lanes) })
	var sum float64
	for _, l := range lanes {
		sum += float64(l)
	}
	for _, v := range x[n:] {
		sum += float64(fastExp((v - a) - b))
	}
	return sum
}

// expSubScale sets x[i] = e^((x[i]−a)−b)·d (see above).
func expSubScale(x []float32, a, b, d float32) {
	n := vecloop.Prefix(haveExpVec, len(x), func(i, n int) { expSubScaleAVX2(&x[i], n, a, b, d) })
	for i, v := range x[n:] {
		x[n+i] = fastExp((v-a)-b) * d
	}
}

func haveVec() bool { return haveExpVec }

// The fast path's GELU runs eight lanes at a time as well (TANH8 in
// expvec_amd64.s: fastTanh's algorithm in float32 with EXP8, within 2 ulp
// of tanh, TestTanhVec), forward and backward over whole rows.

// tanhAVX2 sets out[i] = tanh(in[i]) for i < n; n a positive multiple of 8.
//
//go:noescape
func tanhAVX2(out, in *float32, n int)

// geluAVX2 sets out[i] = gelu(in[i]) for i < n (n a positive multiple of
// 8; out may be in).
//
//go:noescape
func geluAVX2(out, in *float32, n int)

// geluBackAVX2 sets dinp[i] = dout[i]·gelu'(in[i]) for i < n (n a
// positive multiple of 8; dinp may be dout).
//
//go:noescape
func geluBackAVX2(dinp, in, dout *float32, n int)

// geluRange sets out[i] = geluFast-like gelu(in[i]) over the slices
// (len(out) elements).
func geluRange(out, in []float32) {
	in = in[:len(out)]
	n := vecloop.Prefix(haveExpVec, len(out), func(i, n int) { geluAVX2(&out[i], &in[i], n) })
	for i := n; i < len(out); i++ {
		out[i] = geluFast(in[i])
	}
}

// geluBackRange sets dinp[i] = dout[i]·gelu'(in[i]) (len(dinp) elements).
func geluBackRange(dinp, in, dout []float32) {
	in, dout = in[:len(dinp)], dout[:len(dinp)]
	n := vecloop.Prefix(haveExpVec, len(dinp), func(i, n int) { geluBackAVX2(&dinp[i], &in[i], &dout[i], n) })
	for i := n; i < len(dinp); i++ {
		dinp[i] = geluBackFast(dout[i], in[i])
	}
}

// tanhRange sets out[i] = tanh(in[i]) (len(out) elements).
func tanhRange(out, in []float32) {
	in = in[:len(out)]
	n := vecloop.Prefix(haveExpVec, len(out), func(i, n int) { tanhAVX2(&out[i], &in[i], n) })
	for i := n; i < len(out); i++ {
		out[i] = fastTanh(in[i])
	}
}
