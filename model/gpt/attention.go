package gpt

import "math"

// Causal self-attention over qkv (B, T, 3C): for each batch row b and head
// h, with q, k, v the (T, HS) slices at columns h*HS of the three thirds
// (row stride 3C),
//
//	s   = (q · kᵀ) · 1/√HS        (T, T), masked to t2 ≤ t
//	att = softmax(s) per row      kept for backward, zero above the diagonal
//	y   = att · v                 written to out (B, T, C) at columns h*HS
//
// As in torch's attention (bmm, mul, masked_fill, softmax, bmm), q · kᵀ
// and att · v are products through the Gemmer, and the scale is a
// separate multiply. They are cut into blocks of rows that leave out the
// keys a block cannot see (att is exactly 0 there); the blocks inside the
// diagonal are computed whole, masked positions included.
//
// The products are called one after the other from the calling goroutine,
// so a Gemmer that parallelises a call (OpenBLAS with several threads,
// gonum) does so undisturbed; calling it from every pool worker at once
// made OpenBLAS with 2 threads ten times slower. The row-wise work
// between the products (scale, softmax and their backward, rounding) is
// spread over the pool by (b, h) pair. With Round the 16-bit tensors are
// s (after the scale), att, y and, in backward, d(att), d(s) and dq, dk,
// dv.

// attnRows is the default row block of the attention products
// (Model.attnRows): a block of query rows r0..r1-1 only sees keys
// 0..r1-1, so the products skip the masked blocks above the diagonal, at
// the cost of smaller GEMMs. 64 is the fastest with OpenBLAS at T = 256,
// HS = 64: the attention of a gpt2s-untied step (12 layers, B = 1) takes
// 119 ms on one thread, against 146 ms unblocked and 850 ms for the
// scalar loops this replaced.
const attnRows = 64

// headViews returns the q, k and v of pair (b, h) in qkv (B, T, 3C): each
// (T, HS) with row stride 3C.
func headViews(qkv []float32, b, h, T, C, HS int) (q, k, v []float32) {
	C3 := 3 * C
	n := (T-1)*C3 + HS
	base := b*T*C3 + h*HS
	return qkv[base:][:n], qkv[base+C:][:n], qkv[base+2*C:][:n]
}

// headRows returns the (T, HS) columns of pair (b, h) in x (B, T, C).
func headRows(x []float32, b, h, T, C, HS int) []float32 {
	return x[b*T*C+h*HS:][:(T-1)*C+HS]
}

// roundRows rounds the rows (T, HS) of a matrix with row stride ld.
func roundRows(round func([]float32), x []float32, T, HS, ld int) {
	for t := range T {
		round(x[t*ld:][:HS])
	}
}

// softmaxJob is the row-wise part of the attention over (b, h) pairs
// [lo, hi): forward, s → att in place; backward, d(att) → d(s) in place.
type softmaxJob struct {
	att, datt []float32 // (B, NH, T, T)
	T, HS     int
	backward  bool
	round     func([]float32)
}

func (j *softmaxJob) runRange(lo, hi int) {
	T := j.T
	scale := float32(1 / math.Sqrt(float64(j.HS)))
	for bh := lo; bh < hi; bh++ {
		att := j.att[bh*T*T:][:T*T]
		if j.backward {
			softmaxBackward(j.datt[bh*T*T:][:T*T], att, T, scale, j.round)
		} else {
			softmaxForward(att, T, scale, j.round)
		}
	}
}

// roundHeadsJob rounds the (T, HS) head columns of pairs [lo, hi) in x:
// y (B, T, C) after the forward, or each third of dqkv (B, T, 3C) after
// the backward (parts = 3).
type roundHeadsJob struct {
	x               []float32
	T, C, NH, parts int
	round           func([]float32)
}

func (j *roundHeadsJob) runRange(lo, hi int) {
	HS, ld := j.C/j.NH, j.parts*j.C
	for bh := lo; bh < hi; bh++ {
		b, h := bh/j.NH, bh%j.NH
		for part := range j.parts {
			roundRows(j.round, j.x[b*j.T*ld+part*j.C+h*HS:], j.T, HS, ld)
		}
	}
}

// softmaxForward turns the scores q·kᵀ of one pair, (T, T) of which the
// lower triangle is valid, into the masked softmax of their scaled values.
func softmaxForward(att []float32, T int, scale float32, round func([]float32)) {
	for t := range T {
		row := att[t*T:][:T]
		s := row[:t+1]
		for t2 := range s {
			s[t2] *= scale
		}
		if round != nil {
			round(s)
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
		if round != nil {
			round(s)
		}
	}
}

// softmaxBackward turns d(att) of one pair, (T, T) of which the lower
// triangle is valid, into d(s) = att ⊙ (d(att) - Σ_row att⊙d(att)) · scale,
// zero above the diagonal.
func softmaxBackward(ds, att []float32, T int, scale float32, round func([]float32)) {
	for t := range T {
		p := att[t*T:][:t+1]
		row := ds[t*T:][:T]
		d := row[:t+1]
		if round != nil {
			round(d)
		}
		var sum float64
		for t2, g := range d {
			sum += float64(p[t2] * g)
		}
		s := float32(sum)
		for t2, g := range d {
			d[t2] = p[t2] * (g - s)
		}
		if round != nil {
			round(d)
		}
		for t2 := range d {
			d[t2] *= scale
		}
		clear(row[t+1:])
	}
}

// attentionForward fills out (B, T, C) and att (B, NH, T, T) from qkv.
func (m *Model) attentionForward(out, att, qkv []float32, B, T int) {
	C, NH := m.cfg.Dim, m.cfg.Heads
	HS, C3 := C/NH, 3*C
	for bh := range B * NH {
		q, k, _ := headViews(qkv, bh/NH, bh%NH, T, C, HS)
		a := att[bh*T*T:][:T*T]
		for r0 := 0; r0 < T; r0 += m.attnRows {
			r1 := min(T, r0+m.attnRows)
			m.gemm.Sgemm(false, true, r1-r0, r1, HS, 1, q[r0*C3:], C3, k, C3, 0, a[r0*T:], T)
		}
	}
	m.runSoftmax(softmaxJob{att: att, T: T, HS: HS}, B)
	for bh := range B * NH {
		_, _, v := headViews(qkv, bh/NH, bh%NH, T, C, HS)
		a := att[bh*T*T:][:T*T]
		y := headRows(out, bh/NH, bh%NH, T, C, HS)
		for r0 := 0; r0 < T; r0 += m.attnRows {
			r1 := min(T, r0+m.attnRows)
			m.gemm.Sgemm(false, false, r1-r0, HS, r1, 1, a[r0*T:], T, v, C3, 0, y[r0*C:], C)
		}
	}
	m.roundHeads(out, B, T, 1)
}

// attentionBackward writes dqkv (B, T, 3C) from dout (B, T, C), using
// datt (B, NH, T, T) as scratch:
//
//	datt = dy · vᵀ                     dv = attᵀ · dy
//	ds   = softmax and scale backward of datt (softmaxBackward)
//	dq   = ds · k                      dk = dsᵀ · q
func (m *Model) attentionBackward(dqkv, datt, dout, qkv, att []float32, B, T int) {
	C, NH := m.cfg.Dim, m.cfg.Heads
	HS, C3 := C/NH, 3*C
	for bh := range B * NH {
		b, h := bh/NH, bh%NH
		_, _, v := headViews(qkv, b, h, T, C, HS)
		_, _, dv := headViews(dqkv, b, h, T, C, HS)
		dy := headRows(dout, b, h, T, C, HS)
		a, ds := att[bh*T*T:][:T*T], datt[bh*T*T:][:T*T]
		for r0 := 0; r0 < T; r0 += m.attnRows {
			r1 := min(T, r0+m.attnRows)
			m.gemm.Sgemm(false, true, r1-r0, r1, HS, 1, dy[r0*C:], C, v, C3, 0, ds[r0*T:], T)
			// Rows above r0 of att are zero in columns r0..r1-1.
			m.gemm.Sgemm(true, false, r1-r0, HS, T-r0, 1, a[r0*T+r0:], T, dy[r0*C:], C, 0, dv[r0*C3:], C3)
		}
	}
	m.runSoftmax(softmaxJob{att: att, datt: datt, T: T, HS: HS, backward: true}, B)
	for bh := range B * NH {
		b, h := bh/NH, bh%NH
		q, k, _ := headViews(qkv, b, h, T, C, HS)
		dq, dk, _ := headViews(dqkv, b, h, T, C, HS)
		ds := datt[bh*T*T:][:T*T]
		for r0 := 0; r0 < T; r0 += m.attnRows {
			r1 := min(T, r0+m.attnRows)
			m.gemm.Sgemm(false, false, r1-r0, HS, r1, 1, ds[r0*T:], T, k, C3, 0, dq[r0*C3:], C3)
			m.gemm.Sgemm(true, false, r1-r0, HS, T-r0, 1, ds[r0*T+r0:], T, q[r0*C3:], C3, 0, dk[r0*C3:], C3)
		}
	}
	m.roundHeads(dqkv, B, T, 3)
}

// runSoftmax runs j over the B*NH pairs on the pool.
func (m *Model) runSoftmax(j softmaxJob, B int) {
	j.round = m.opt.Round
	m.jobs.softmax = j
	m.pool.run(B*m.cfg.Heads, 1, &m.jobs.softmax)
	m.jobs.softmax = softmaxJob{}
}

// roundHeads rounds the attention output (parts = 1) or dqkv (parts = 3)
// with Round, if set, spread over the pool by pair.
func (m *Model) roundHeads(x []float32, B, T, parts int) {
	if m.opt.Round == nil {
		return
	}
	m.jobs.roundHeads = roundHeadsJob{x: x, T: T, C: m.cfg.Dim, NH: m.cfg.Heads, parts: parts, round: m.opt.Round}
	m.pool.run(B*m.cfg.Heads, 1, &m.jobs.roundHeads)
	m.jobs.roundHeads = roundHeadsJob{}
}
