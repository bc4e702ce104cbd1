package gpt

import (
	"math"

	"github.com/dszero/dszero/internal/seqgemm"
)

// Causal self-attention over qkv (B, T, 3C): for each batch row b and head
// h, with q, k, v the (T, HS) slices at columns h*HS of the three thirds,
//
//	s   = (q · kᵀ) · 1/√HS        (T, T), masked to t2 ≤ t
//	att = softmax(s) per row      kept for backward
//	y   = att · v                 written to out (B, T, C) at columns h*HS
//
// Each (b, h) pair is independent; the pairs are spread over the pool.
// With a 16-bit DType the 16-bit tensors are s (after the scale), att, y and, in
// backward, d(att), d(s) and dq, dk, dv. With bf16 every sum of products
// runs in the order of torch's bf16 bmm (dotPairs). Otherwise each sum of
// products runs in order of its inner index, one float32 rounding per
// product and per sum — the order that reproduces PyTorch's reference runs
// within the conformance tolerances — computed by seqgemm, which keeps
// that order per element while working on eight elements per instruction.
// Its right-hand operands must be rows, so one head's keys (forward) or
// values (backward) are first transposed into scratch (HS, T).

// attnShape is what the forward and backward jobs share: T, C and NH of
// the pass, the transpose scratch and the 16-bit rounding.
type attnShape struct {
	T, C, NH int
	scratch  []float32 // (B, NH, HS, T): one head's keys or values transposed, per (b, h)
	round    func([]float32)
	bf16     bool // torch's bf16 softmax backward: Σ p·g rounded to bf16
}

// dims returns the head size HS, the qkv row stride 3C and the score
// scale 1/√HS.
func (s *attnShape) dims() (HS, C3 int, scale float32) {
	HS = s.C / s.NH
	return HS, 3 * s.C, float32(1 / math.Sqrt(float64(HS)))
}

// attnShape is the shared part of both jobs for sequences of length T.
func (m *Model) attnShape(T int, scratch []float32) attnShape {
	return attnShape{T: T, C: m.cfg.Dim, NH: m.cfg.Heads, scratch: scratch, round: m.rounding, bf16: m.bf16}
}

// causalRows is the height of the row blocks of the triangular products:
// a block computes the columns its last row needs (rounded up to whole
// vectors) and the rows above the diagonal ignore or zero the rest.
const causalRows = 4

// transposeHead writes the first HS columns of the T rows of x (rows
// stride apart: one head's slice of qkv) into dst as (HS, T).
func transposeHead(dst, x []float32, stride, T, HS int) {
	for t := range T {
		row := x[t*stride:][:HS]
		for i, v := range row {
			dst[i*T+t] = v
		}
	}
}

// scoreRows computes the lower triangle (and a few entries beyond it) of
// out (T, T) = a · bt, a's rows (HS) stride apart and bt (HS, T).
func scoreRows(out, a []float32, stride int, bt []float32, T, HS int) {
	for t0 := 0; t0 < T; t0 += causalRows {
		rows := min(causalRows, T-t0)
		n := min(T, (t0+rows+15)&^15)
		seqgemm.Mul(rows, n, HS, a[t0*stride:], stride, 1, bt, T, out[t0*T:], T)
	}
}

// lowerTimes sets out (T, HS) = l · x for l (T, T) zero above the
// diagonal; the rows of x and out (HS) are ldx and ldo apart. Row t's sum
// runs over t2 = 0..t and on to the end of its row block: the extra terms
// are exact zeros at the end of the sum, which leave it as it was.
func lowerTimes(out []float32, ldo int, l, x []float32, ldx, T, HS int) {
	for t0 := 0; t0 < T; t0 += causalRows {
		rows := min(causalRows, T-t0)
		seqgemm.Mul(rows, HS, t0+rows, l[t0*T:], T, 1, x, ldx, out[t0*ldo:], ldo)
	}
}

// lowerTransposeTimes sets out (T, HS) = lᵀ · x for l (T, T) zero above
// the diagonal, strides as lowerTimes. Row t2's sum needs t = t2..T-1;
// its block starts at its first row r0 ≤ t2, and the terms for t < t2
// are exact zeros that leave the sum at +0 until its first real term, as
// if it had started there.
func lowerTransposeTimes(out []float32, ldo int, l, x []float32, ldx, T, HS int) {
	for r0 := 0; r0 < T; r0 += causalRows {
		rows := min(causalRows, T-r0)
		seqgemm.Mul(rows, HS, T-r0, l[r0*T+r0:], 1, T, x[r0*ldx:], ldx, out[r0*ldo:], ldo)
	}
}

// attnJob is the forward over (b, h) pairs [lo, hi).
type attnJob struct {
	out, att, qkv []float32
	attnShape
}

func (j *attnJob) RunRange(lo, hi int) {
	if j.bf16 {
		j.runRangeBF16(lo, hi)
		return
	}
	T, C, NH := j.T, j.C, j.NH
	HS, C3, scale := j.dims()
	for bh := lo; bh < hi; bh++ {
		b, h := bh/NH, bh%NH
		base := b * T * C3
		q := j.qkv[base+h*HS:]
		v := j.qkv[base+2*C+h*HS:]
		kt := j.scratch[bh*HS*T:][:HS*T]
		transposeHead(kt, j.qkv[base+C+h*HS:], C3, T, HS)
		att := j.att[bh*T*T:][:T*T]
		scoreRows(att, q, C3, kt, T, HS) // s = q · kᵀ
		for t := range T {
			row := att[t*T:][:T]
			s := row[:t+1]
			for t2 := range s {
				s[t2] *= scale
			}
			if j.round != nil {
				j.round(s)
			}
			mx := s[0]
			for _, v := range s[1:] {
				mx = max(mx, v)
			}
			var sum float64
			for t2, v := range s {
				e := float32(math.Exp(float64(v - mx)))
				s[t2] = e
				sum += float64(e)
			}
			inv := 1 / float32(sum)
			for t2 := range s {
				s[t2] *= inv
			}
			clear(row[t+1:])
			if j.round != nil {
				j.round(s)
			}
		}
		y := j.out[b*T*C+h*HS:]
		lowerTimes(y, C, att, v, C3, T, HS) // y = att · v
		if j.round != nil {
			for t := range T {
				j.round(y[t*C:][:HS])
			}
		}
	}
}

// runRangeBF16 is the forward in the order of torch's bf16 kernels.
func (j *attnJob) runRangeBF16(lo, hi int) {
	T, C, NH := j.T, j.C, j.NH
	HS, C3, scale := j.dims()
	for bh := lo; bh < hi; bh++ {
		b, h := bh/NH, bh%NH
		base := b * T * C3
		for t := range T {
			q := j.qkv[base+t*C3+h*HS:][:HS]
			row := j.att[(bh*T+t)*T:][:T]
			s := row[:t+1]
			for t2 := range s {
				k := j.qkv[base+t2*C3+C+h*HS:][:HS]
				s[t2] = dotPairs(q, k) * scale
			}
			if j.round != nil {
				j.round(s)
			}
			mx := s[0]
			for _, v := range s[1:] {
				mx = max(mx, v)
			}
			inv := 1 / softmaxSumBF16(s, mx)
			for t2 := range s {
				s[t2] *= inv
			}
			clear(row[t+1:])
			if j.round != nil {
				j.round(s)
			}
			y := j.out[(b*T+t)*C+h*HS:][:HS]
			clear(y)
			for t2 := range s {
				t2 = pairSwap(t2, len(s))
				p := s[t2]
				v := j.qkv[base+t2*C3+2*C+h*HS:][:HS]
				for i := range y {
					y[i] += p * v[i]
				}
			}
			if j.round != nil {
				j.round(y)
			}
		}
	}
}

// attentionForward fills out (B, T, C) and att (B, NH, T, T) from qkv,
// using scratch (B, T, C) (any free buffer; its contents are lost).
func (m *Model) attentionForward(out, att, qkv, scratch []float32, B, T int) {
	if m.sp != nil {
		m.spAttentionForward(m.blockOf(qkv), out, qkv) // ulysses.go
		return
	}
	m.jobs.attn = attnJob{out: out, att: att, qkv: qkv, attnShape: m.attnShape(T, scratch)}
	m.pool.Run(B*m.cfg.Heads, 1, &m.jobs.attn)
	m.jobs.attn = attnJob{}
}

// attnBackJob is the backward over (b, h) pairs [lo, hi):
//
//	datt = dy · vᵀ                     dv = attᵀ · dy
//	ds   = att ⊙ (datt - Σ_row att⊙datt)   (softmax backward), then · 1/√HS
//	dq   = ds · k                      dk = dsᵀ · q
type attnBackJob struct {
	dqkv, datt, dout, qkv, att []float32
	attnShape
}

func (j *attnBackJob) RunRange(lo, hi int) {
	if j.bf16 {
		j.runRangeBF16(lo, hi)
		return
	}
	T, C, NH := j.T, j.C, j.NH
	HS, C3, scale := j.dims()
	for bh := lo; bh < hi; bh++ {
		b, h := bh/NH, bh%NH
		base := b * T * C3
		q, k := j.qkv[base+h*HS:], j.qkv[base+C+h*HS:]
		dq, dk, dv := j.dqkv[base+h*HS:], j.dqkv[base+C+h*HS:], j.dqkv[base+2*C+h*HS:]
		dy := j.dout[b*T*C+h*HS:]
		att := j.att[bh*T*T:][:T*T]
		datt := j.datt[bh*T*T:][:T*T]
		vt := j.scratch[bh*HS*T:][:HS*T]
		transposeHead(vt, j.qkv[base+2*C+h*HS:], C3, T, HS)
		scoreRows(datt, dy, C, vt, T, HS)              // datt = dy · vᵀ
		lowerTransposeTimes(dv, C3, att, dy, C, T, HS) // dv = attᵀ · dy
		// The softmax and scale backward in place, row by row.
		for t := range T {
			p := att[t*T:][:t+1]
			row := datt[t*T:][:T]
			ds := row[:t+1]
			if j.round != nil {
				j.round(ds)
			}
			var sum float64
			for t2, g := range ds {
				sum += float64(p[t2] * g)
			}
			s := float32(sum)
			for t2, g := range ds {
				ds[t2] = p[t2] * (g - s)
			}
			if j.round != nil {
				j.round(ds)
			}
			for t2 := range ds {
				ds[t2] *= scale
			}
			clear(row[t+1:]) // ds is zero above the diagonal, as att
		}
		lowerTimes(dq, C3, datt, k, C3, T, HS)          // dq = ds · k
		lowerTransposeTimes(dk, C3, datt, q, C3, T, HS) // dk = dsᵀ · q
		if j.round != nil {
			for t := range T {
				for part := range 3 {
					j.round(j.dqkv[base+t*C3+part*C+h*HS:][:HS])
				}
			}
		}
	}
}

// runRangeBF16 is the backward in the order of torch's bf16 kernels.
func (j *attnBackJob) runRangeBF16(lo, hi int) {
	T, C, NH := j.T, j.C, j.NH
	HS, C3, scale := j.dims()
	for bh := lo; bh < hi; bh++ {
		b, h := bh/NH, bh%NH
		base := b * T * C3
		for t := range T {
			for part := range 3 {
				clear(j.dqkv[base+t*C3+part*C+h*HS:][:HS])
			}
		}
		// datt and dv from dy; then the softmax and scale backward in place.
		for t := range T {
			t = pairSwap(t, T) // dv sums over t in the bf16 GEMM's order
			dy := j.dout[(b*T+t)*C+h*HS:][:HS]
			p := j.att[(bh*T+t)*T:][:t+1]
			ds := j.datt[(bh*T+t)*T:][:t+1]
			for t2 := range ds {
				v := j.qkv[base+t2*C3+2*C+h*HS:][:HS]
				dv := j.dqkv[base+t2*C3+2*C+h*HS:][:HS]
				ds[t2] = dotPairs(dy, v)
				for i, g := range dy {
					dv[i] += p[t2] * g
				}
			}
			if j.round != nil {
				j.round(ds)
			}
			s := rb(softmaxBackSumBF16(p, ds))
			for t2, g := range ds {
				ds[t2] = p[t2] * (g - s)
			}
			if j.round != nil {
				j.round(ds)
			}
			for t2 := range ds {
				ds[t2] *= scale
			}
		}
		// dq, dk from ds.
		for t := range T {
			t = pairSwap(t, T) // dk sums over t in the bf16 GEMM's order
			ds := j.datt[(bh*T+t)*T:][:t+1]
			q := j.qkv[base+t*C3+h*HS:][:HS]
			dq := j.dqkv[base+t*C3+h*HS:][:HS]
			for t2 := range ds {
				t2 = pairSwap(t2, len(ds)) // and dq over t2
				g := ds[t2]
				k := j.qkv[base+t2*C3+C+h*HS:][:HS]
				dk := j.dqkv[base+t2*C3+C+h*HS:][:HS]
				for i := range dq {
					dq[i] += g * k[i]
					dk[i] += g * q[i]
				}
			}
		}
		if j.round != nil {
			for t := range T {
				for part := range 3 {
					j.round(j.dqkv[base+t*C3+part*C+h*HS:][:HS])
				}
			}
		}
	}
}

// attentionBackward writes dqkv (B, T, 3C) from dout (B, T, C), using
// datt (B, NH, T, T) and scratch (B, T, C) as scratch.
func (m *Model) attentionBackward(dqkv, datt, dout, qkv, att, scratch []float32, B, T int) {
	if m.sp != nil {
		m.spAttentionBackward(m.blockOf(qkv), dqkv, dout) // ulysses.go
		return
	}
	m.jobs.attnB = attnBackJob{dqkv: dqkv, datt: datt, dout: dout, qkv: qkv, att: att, attnShape: m.attnShape(T, scratch)}
	m.pool.Run(B*m.cfg.Heads, 1, &m.jobs.attnB)
	m.jobs.attnB = attnBackJob{}
}
