package gpt

import (
	"math"
	"math/bits"

	"github.com/dszero/dszero/half"
)

// PyTorch 1.13's CPU bf16 kernels, where they do not compute in float32
// and round once. DeepSpeed's bf16 runs on a CPU use them (the reference
// runs: python3-torch 1.13.1, its own kernels built for AVX2, matrix
// products in oneDNN's avx512_bf16 kernel), and a model that rounds once
// per op drifts from them by several times the bf16 tolerance within 10
// steps. Each rule below was checked against torch 1.13.1 bit for bit
// (TestBF16KernelsMatchTorch, TestBF16GradientsMatchTorch):
//
//   - LayerNorm forward (layer_norm_kernel.cpp with T = BFloat16): the
//     moments are a Welford recurrence in bf16 vectors of 16 lanes,
//     rounding after every operation (moments_utils.h RowwiseMoments);
//     mean, variance, rstd = 1/√(var + eps) and -rstd·mean are bf16
//     scalars, each operation rounded; only y = (x·rstd + bias)·w + b is
//     float32 (two fused multiply-adds), rounded once.
//   - LayerNorm backward: dw and db are bf16 buffers that each row is
//     added into (float32, rounded per row); Σ dy·w·x and Σ dy·w are
//     float32 sums stored as bf16; dx is float32, rounded once. The
//     float32 expressions are contracted into fused multiply-adds as GCC
//     compiled them (fma32).
//   - GELU (tanh), forward and backward (Activation.cpp): every operation
//     in bf16, the constants √(2/π) and 0.044715 rounded to bf16.
//   - softmax: exp as Sleef computes it (expf), the sum in the 8 lanes of
//     a float32 vector (lanes8), times its reciprocal, rounded once; the
//     backward's Σ p·g in float32 stored as bf16, (g − Σ)·p rounded once.
//   - matrix products (Linear, the attention's bmm): float32 sums in
//     oneDNN's order (dotPairs), rounded once, bias included.
//   - the float32 loss on the bf16 logits: log-softmax with Sleef's exp
//     and log and lane sums, the mean in nll_loss's cascade (nllSum).
//
// The adds, the embedding gradients and the bias gradients are float32
// compute rounded once, as in the fp16 emulation. Every float32 product
// below either is exact (a product of bf16 values) or is written with
// fma32, so Go's freedom to fuse a*b+c changes no bit.

// rb rounds one float32 to the nearest bf16 value.
func rb(x float32) float32 { return half.NearestBF16(x) }

// bf16Lanes is the width of torch's Vectorized<BFloat16> with AVX2, the
// reference machine's kernels; kChunk is moments_utils.h's kChunkSize.
const (
	bf16Lanes = 16
	kChunk    = 16
)

// momentStack is one level of RowwiseMoments' cascade: a count and the
// lanes' running mean and sum of squared deviations.
type momentStack struct {
	m0     int
	m1, m2 [bf16Lanes]float32
}

// addMomentsVec merges (m0a, m1a, m2a) into s: AddMomentsVec in bf16.
func (s *momentStack) addMomentsVec(m0a int, m1a, m2a *[bf16Lanes]float32) {
	n := s.m0 + m0a
	var c float32
	if n != 0 {
		c = rb(rb(float32(m0a)) / rb(float32(n)))
	}
	m0 := rb(float32(s.m0))
	for l := range s.m1 {
		delta := rb(m1a[l] - s.m1[l])
		s.m1[l] = rb(s.m1[l] + rb(c*delta))
		s.m2[l] = rb(s.m2[l] + rb(m2a[l]+rb(rb(rb(delta*delta)*c)*m0)))
	}
	s.m0 = n
}

// ceilLog2 is ATen's utils::CeilLog2: 1 for x ≤ 2.
func ceilLog2(x int) int {
	if x <= 2 {
		return 1
	}
	return bits.Len(uint(x - 1))
}

// momentsBF16 is torch's RowwiseMoments of one bf16 row x (values held in
// float32): its mean and biased variance, each a bf16 value. stk is
// scratch of at least ceilLog2 of the row's chunk count levels.
func momentsBF16(x []float32, stk []momentStack) (mean, variance float32) {
	N := len(x)
	n := N / bf16Lanes
	chunks := (n + kChunk - 1) / kChunk
	depth := ceilLog2(chunks)
	stk = stk[:depth]
	for i := range stk {
		stk[i] = momentStack{}
	}
	var cv [kChunk]float32
	for j := range cv {
		cv[j] = rb(1 / rb(float32(j+1)))
	}
	for i := range chunks {
		xs := x[i*kChunk*bf16Lanes:]
		m0 := min(kChunk, n-i*kChunk)
		var m1, m2 [bf16Lanes]float32
		for j := range m0 {
			xv := xs[j*bf16Lanes:][:bf16Lanes]
			for l, v := range xv {
				delta := rb(v - m1[l])
				m1[l] = rb(m1[l] + rb(delta*cv[j]))
				m2[l] = rb(m2[l] + rb(delta*rb(v-m1[l])))
			}
		}
		stk[0].addMomentsVec(m0, &m1, &m2)
		mask := i + 1
		for j := 1; j < depth && mask&1 == 0; j++ {
			stk[j].addMomentsVec(stk[j-1].m0, &stk[j-1].m1, &stk[j-1].m2)
			stk[j-1] = momentStack{}
			mask >>= 1
		}
	}
	for i := 1; i < depth; i++ {
		stk[0].addMomentsVec(stk[i].m0, &stk[i].m1, &stk[i].m2)
	}
	// The tail that fills no vector, then the lanes, in scalar bf16.
	m0, m1, m2 := 0, float32(0), float32(0)
	for _, v := range x[n*bf16Lanes:] {
		delta := rb(v - m1)
		m0++
		m1 = rb(m1 + rb(delta/rb(float32(m0))))
		m2 = rb(m2 + rb(delta*rb(v-m1)))
	}
	for l := range bf16Lanes {
		nn := m0 + n
		var c float32
		if nn != 0 {
			c = rb(rb(float32(n)) / rb(float32(nn)))
		}
		delta := rb(stk[0].m1[l] - m1)
		m1 = rb(m1 + rb(c*delta))
		m2 = rb(m2 + rb(stk[0].m2[l]+rb(rb(rb(delta*delta)*c)*rb(float32(m0)))))
		m0 = nn
	}
	return m1, rb(m2 / rb(float32(N)))
}

// layernormForwardBF16 is layernormForward with torch's bf16 kernel: the
// moments, rstd and shift are bf16 scalars (see the top of this file).
func (m *Model) layernormForwardBF16(out, mean, rstd, inp, w, b []float32, N int) {
	C := m.cfg.Dim
	eps := rb(m.cfg.Eps)
	for r := range N {
		x := inp[r*C:][:C]
		mu, variance := momentsBF16(x, m.moments)
		rs := rb(1 / rb(float32(math.Sqrt(float64(rb(variance+eps))))))
		shift := rb(-rs * mu)
		o := out[r*C:][:C]
		for i := range o {
			o[i] = rb(fma32(fma32(x[i], rs, shift), w[i], b[i]))
		}
		mean[r], rstd[r] = mu, rs
	}
}

// layernormBackwardBF16 is layernormBackward with torch's bf16 kernel:
// dw and db are summed row by row in bf16, Σ dy·w·x and Σ dy·w are
// rounded to bf16 before they enter dinp (see the top of this file).
func (m *Model) layernormBackwardBF16(dinp, dw, db, dout, inp, w, mean, rstd []float32, N int) {
	C := m.cfg.Dim
	invC := 1 / float32(C)
	for r := range N {
		x, dy, dx := inp[r*C:][:C], dout[r*C:][:C], dinp[r*C:][:C]
		var ds, dbs [16]float32
		for i := range dy {
			ds[i%16] += dy[i] * x[i] * w[i]
			dbs[i%16] += dy[i] * w[i]
		}
		ds32, db32 := rb(lanes16(&ds)), rb(lanes16(&dbs))
		a := rstd[r]
		k1 := (db32*mean[r] - ds32) * a * a * a * invC
		k2 := fma32(-k1, mean[r], -(db32 * a * invC))
		for i := range dx {
			dx[i] = rb(fma32(k1, x[i], a*dy[i]*w[i]) + k2)
		}
	}
	// dw, db: bf16 buffers each row is added into.
	accW, accB := m.gradOut(dw), m.lnAccB
	clear(accW)
	clear(accB)
	for r := range N {
		x, dy := inp[r*C:][:C], dout[r*C:][:C]
		a := rstd[r]
		shift := -a * mean[r]
		for i := range dy {
			accW[i] = rb(fma32(dy[i], fma32(a, x[i], shift), accW[i]))
			accB[i] = rb(accB[i] + dy[i])
		}
	}
	m.gradCommit(dw, accW)
	dst := m.gradOut(db)
	copy(dst, accB)
	m.gradCommit(db, dst)
}

// geluBF16 is torch's bf16 GELU (tanh) of one value, every operation
// rounded.
func geluBF16(x float32) float32 {
	x3 := rb(rb(x*x) * x)
	inner := rb(geluBetaBF16 * rb(x+rb(geluKappaBF16*x3)))
	th := rb(float32(math.Tanh(float64(inner))))
	return rb(rb(0.5*x) * rb(1+th))
}

// geluBackwardBF16 is torch's bf16 GELU (tanh) backward of one value.
func geluBackwardBF16(dy, x float32) float32 {
	xsq := rb(x * x)
	x3 := rb(xsq * x)
	inner := rb(geluBetaBF16 * rb(x+rb(geluKappaBF16*x3)))
	th := rb(float32(math.Tanh(float64(inner))))
	left := rb(0.5 * x)
	right := rb(1 + th)
	leftD := rb(0.5 * right)
	tanhD := rb(1 - rb(th*th))
	innerD := rb(geluBetaBF16 * rb(1+rb(gelu3KappaBF16*xsq)))
	rightD := rb(rb(left*tanhD) * innerD)
	return rb(dy * rb(leftD+rightD))
}

// The GELU constants as torch's bf16 kernel holds them.
var (
	geluBetaBF16   = rb(geluBeta)
	geluKappaBF16  = rb(geluKappa)
	gelu3KappaBF16 = rb(3 * geluKappaBF16)
)

// The bf16 matrix products (Linear layers and the attention's bmm) run in
// oneDNN's avx512_bf16 kernel on the reference machine (torch 1.13's
// mkldnn_matmul): each output is one float32 sum over k in order, the
// products of a pair (k, k+1) added odd element first (vdpbf16ps: two
// fused multiply-adds per pair; products of bf16 values are exact in
// float32), then rounded to bf16 once, bias included. Checked bit for bit
// for sums of up to 512 terms; oneDNN blocks longer ones differently.

// dotPairs is Σ a[k]·b[k] in that order.
func dotPairs(a, b []float32) float32 {
	b = b[:len(a)]
	var acc float32
	k := 0
	for ; k+1 < len(a); k += 2 {
		acc += a[k+1] * b[k+1]
		acc += a[k] * b[k]
	}
	if k < len(a) {
		acc += a[k] * b[k]
	}
	return acc
}

// pairSwap is the k-th index of that order over n terms: 1, 0, 3, 2, …
// (n-1 last when n is odd).
func pairSwap(k, n int) int {
	if j := k ^ 1; j < n {
		return j
	}
	return k
}

// mmJob is a bf16 Linear layer, forward or backward, over rows [lo, hi)
// of its output.
type mmJob struct {
	out, inp, w, bias, dout []float32
	N, IC, OC               int
	kind                    int // mmForward, mmInput, mmWeight
}

const (
	mmForward = iota // out (N, OC) = inp (N, IC) · wᵀ + bias
	mmInput          // out (N, IC) = dout (N, OC) · w
	mmWeight         // out (OC, IC) = doutᵀ · inp, summed over the N rows
)

func (j *mmJob) RunRange(lo, hi int) {
	IC, OC := j.IC, j.OC
	switch j.kind {
	case mmForward:
		for n := lo; n < hi; n++ {
			x, o := j.inp[n*IC:][:IC], j.out[n*OC:][:OC]
			for c := range o {
				acc := dotPairs(x, j.w[c*IC:][:IC])
				if j.bias != nil {
					acc += j.bias[c]
				}
				o[c] = rb(acc)
			}
		}
	case mmInput:
		for n := lo; n < hi; n++ {
			dy, dx := j.dout[n*OC:][:OC], j.out[n*IC:][:IC]
			clear(dx)
			for k := range OC {
				k = pairSwap(k, OC)
				g, w := dy[k], j.w[k*IC:][:IC]
				for i := range dx {
					dx[i] += g * w[i]
				}
			}
			half.RoundBF16(dx)
		}
	case mmWeight:
		for c := lo; c < hi; c++ {
			dw := j.out[c*IC:][:IC]
			clear(dw)
			for k := range j.N {
				k = pairSwap(k, j.N)
				g, x := j.dout[k*OC+c], j.inp[k*IC:][:IC]
				for i := range dw {
					dw[i] += g * x[i]
				}
			}
			half.RoundBF16(dw)
		}
	}
}

// matmulForwardBF16 is matmulForward in the bf16 kernel's order.
func (m *Model) matmulForwardBF16(out, inp, w, bias []float32, N, IC, OC int) {
	m.jobs.mm = mmJob{out: out, inp: inp, w: w, bias: bias, N: N, IC: IC, OC: OC, kind: mmForward}
	m.pool.Run(N, 8, &m.jobs.mm)
	m.jobs.mm = mmJob{}
}

// matmulBackwardBF16 is matmulBackward in the bf16 kernel's order.
func (m *Model) matmulBackwardBF16(dinp, dw, dbias, dout, inp, w []float32, N, IC, OC int) {
	m.jobs.mm = mmJob{out: dinp, dout: dout, w: w, N: N, IC: IC, OC: OC, kind: mmInput}
	m.pool.Run(N, 8, &m.jobs.mm)
	dst := m.gradOut(dw)
	m.jobs.mm = mmJob{out: dst, dout: dout, inp: inp, N: N, IC: IC, OC: OC, kind: mmWeight}
	m.pool.Run(OC, 8, &m.jobs.mm)
	m.jobs.mm = mmJob{}
	m.gradCommit(dw, dst)
	if dbias != nil {
		m.biasGrad(dbias, dout, N, OC)
	}
}

// expf is torch's float32 exp on the reference machine: Sleef_expf8_u10
// (Vectorized<float>::exp with AVX2; FMA for every multiply-add), within
// 1 ulp of e^d but not always the correctly rounded value that
// float32(math.Exp) is.
func expf(d float32) float32 {
	const (
		rln2f = float32(1.442695040888963407359924681001892137426645954152985934135449406931)
		l2uf  = float32(0.693145751953125)
		l2lf  = float32(1.428606765330187045e-06)
	)
	if d != d {
		return d
	}
	q := int32(math.RoundToEven(float64(d * rln2f)))
	qf := float32(q)
	s := fma32(qf, -l2uf, d)
	s = fma32(qf, -l2lf, s)
	u := float32(0.000198527617612853646278381)
	u = fma32(u, s, 0.00139304355252534151077271)
	u = fma32(u, s, 0.00833336077630519866943359)
	u = fma32(u, s, 0.0416664853692054748535156)
	u = fma32(u, s, 0.166666671633720397949219)
	u = fma32(u, s, 0.5)
	u = 1 + fma32(s*s, u, s)
	u = u * pow2f(q>>1) * pow2f(q-q>>1) // vldexp2
	switch {
	case d < -104:
		return 0
	case d > 100:
		return float32(math.Inf(1))
	}
	return u
}

// fma32 is a·b + c rounded once to float32: the float32 product is exact
// in float64, so only the float64 sum rounds before the float32 rounding
// (a double rounding that differs from one only at float32 midpoints).
func fma32(a, b, c float32) float32 { return float32(float64(a)*float64(b) + float64(c)) }

// pow2f is 2^q for q in the exponent range, as Sleef's vpow2i.
func pow2f(q int32) float32 { return math.Float32frombits(uint32(q+127) << 23) }

// softmaxSumBF16 replaces s by exp(s - mx) and returns their sum as
// torch's bf16 softmax computes it (SoftMaxKernel.cpp, float32): expf,
// summed in the 8 lanes of a Vectorized<float> (lanes8). The caller
// multiplies by the reciprocal of the sum.
func softmaxSumBF16(s []float32, mx float32) float32 {
	var lanes [8]float32
	for i, v := range s {
		e := expf(v - mx)
		s[i] = e
		lanes[i%8] += e
	}
	return lanes8(&lanes)
}

// sumExpLanes is Σ exp(x - mx) as torch's float32 log_softmax sums it
// (map_reduce_all over Vectorized<float>).
func sumExpLanes(x []float32, mx float32) float32 {
	var lanes [8]float32
	for i, v := range x {
		lanes[i%8] += expf(v - mx)
	}
	return lanes8(&lanes)
}

// lanes16 adds the two 8-lane float32 accumulators that torch's
// map_reduce_all of a bf16 row keeps (element i in lane i mod 16: the
// low and high halves of each 16-element bf16 vector), then their lanes.
func lanes16(l *[16]float32) float32 {
	var h [8]float32
	for i := range h {
		h[i] = l[i] + l[i+8]
	}
	return lanes8(&h)
}

// lanes8 adds the 8 lanes of a Vectorized<float> accumulator (element i
// of a row in lane i mod 8, in order) as vec_reduce_all's shuffles do
// with AVX2.
func lanes8(l *[8]float32) float32 {
	return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

// logf is torch's float32 log (Vectorized<float>::log: Sleef_logf8_u10,
// Sleef 3.5.1's xlogf_u1 with AVX2 and FMA) for the log-softmax of the
// bf16 model's fp32 loss.
func logf(d float32) float32 {
	switch {
	case d != d || d < 0:
		return float32(math.NaN())
	case d == 0:
		return float32(math.Inf(-1))
	case math.IsInf(float64(d), 1):
		return d
	}
	tiny := d < math.SmallestNonzeroFloat32*(1<<23) // FLT_MIN
	if tiny {
		d *= (1 << 32) * (1 << 32)
	}
	e := int32(math.Float32bits(d*(1.0/0.75))>>23&0xff) - 0x7f
	m := math.Float32frombits(uint32(int32(math.Float32bits(d)) + (-e << 23)))
	if tiny {
		e -= 64
	}
	fe := float32(e)
	// s = (ln 2 as two floats) · e
	sx := float32(0.69314718246459960938) * fe
	s := df{sx, fma32(-1.904654323148236017e-09, fe, fma32(0.69314718246459960938, fe, -sx))}
	x := dfdiv(dfadd2(-1, m), dfadd2(1, m))
	x2 := x.x * x.x
	t := fma32(0.3027294874, x2, 0.3996108174)
	t = fma32(t, x2, 0.6666694880)
	s = dfaddDD(s, df{x.x * 2, x.y * 2})
	s = dfaddDF(s, float32(x2*x.x*t)) // rounded: no fusion into the add
	return s.x + s.y
}

// df is Sleef's double-float: an unevaluated sum x + y of float32s.
type df struct{ x, y float32 }

// dfadd2 is dfadd2_vf2_vf_vf: x + y exactly, in either order of size.
func dfadd2(x, y float32) df {
	s := x + y
	v := s - x
	return df{s, (x - (s - v)) + (y - v)}
}

// dfaddDD is dfadd_vf2_vf2_vf2 (|x| ≥ |y|).
func dfaddDD(x, y df) df {
	s := x.x + y.x
	return df{s, (((x.x - s) + y.x) + x.y) + y.y}
}

// dfaddDF is dfadd_vf2_vf2_vf.
func dfaddDF(x df, y float32) df {
	s := x.x + y
	return df{s, ((x.x - s) + y) + x.y}
}

// dfdiv is dfdiv_vf2_vf2_vf2 with FMA.
func dfdiv(n, d df) df {
	t := 1 / d.x
	s := n.x * t
	u := fma32(t, n.x, -s)
	v := fma32(-d.y, t, fma32(-d.x, t, 1))
	return df{s, fma32(s, v, fma32(n.y, t, u))}
}

// softmaxBackSumBF16 is Σ p·g over a row as torch's bf16 softmax backward
// sums it (map2_reduce_all in float32, lanes16); the caller rounds it to
// bf16.
func softmaxBackSumBF16(p, g []float32) float32 {
	var l [16]float32
	for i, v := range g {
		l[i%16] += p[i] * v
	}
	return lanes16(&l)
}

// nllSum is the sum in torch 1.13's nll_loss "mean" of the per-position
// losses, as the bf16 model's fp32 loss reports it (LossNLL.cpp
// nll_loss_out_frame): a float32 cascade of 8 partial sums, level j
// flushed into level j+1 whenever the position's bits j·p … (j+1)·p−1 are
// zero (p = max(4, CeilLog2(N)/8)), the partial sums added in order. The
// mean divides it by N (ignored positions add 0).
func nllSum(losses []float32) float32 {
	const levels = 8
	power := max(4, ceilLog2(len(losses))/levels)
	mask := 1<<power - 1
	var part [levels]float32
	for b, l := range losses {
		part[0] += l
		for j := 0; j+1 < levels && b&(mask<<(j*power)) == 0; j++ {
			part[j+1] += part[j]
			part[j] = 0
		}
	}
	var sum float32
	for _, p := range part {
		sum += p
	}
	return sum
}
