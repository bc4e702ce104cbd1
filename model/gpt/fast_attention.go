package gpt

import "math"

// Causal self-attention on the fast path (see fast.go): the products are
// GEMMs through the Gemmer, called from the model's goroutine (the Gemmer
// parallelises each call), and the softmax rows of every (b, h) run on the
// pool in between. With q, k, v the (T, HS) slices of one head, rows 3C
// apart in qkv, and row blocks [t0, t1) of m.attnBlock rows:
//
//	s[t0:t1, :t1]   = q[t0:t1] · k[:t1]ᵀ · 1/√HS
//	att             = softmax(s) per row, zero above the diagonal
//	y[t0:t1]        = att[t0:t1, :t1] · v[:t1]
//
// and in backward, with column blocks [s0, s1) for the transposed ones:
//
//	datt[t0:t1, :t1] = dy[t0:t1] · v[:t1]ᵀ
//	dv[s0:s1]        = att[s0:, s0:s1]ᵀ · dy[s0:]
//	ds               = att ⊙ (datt − Σ_row att⊙datt) · 1/√HS, zero above the diagonal
//	dq[t0:t1]        = ds[t0:t1, :t1] · k[:t1]
//	dk[s0:s1]        = ds[s0:, s0:s1]ᵀ · q[s0:]
//
// Only the entries of a block above the diagonal are computed beyond
// what the triangle needs; the softmax and its backward zero them.

// attentionForwardFast fills out (B, T, C) and att (B, NH, T, T) from qkv.
func (m *Model) attentionForwardFast(out, att, qkv []float32, B, T int) {
	C, NH := m.cfg.Dim, m.cfg.Heads
	HS, C3 := C/NH, 3*C
	scale := float32(1 / math.Sqrt(float64(HS)))
	g, bs := m.opt.Gemm, m.attnBlock
	for bh := range B * NH {
		b, h := bh/NH, bh%NH
		q, k := qkv[b*T*C3+h*HS:], qkv[b*T*C3+C+h*HS:]
		s := att[bh*T*T:][:T*T]
		for t0 := 0; t0 < T; t0 += bs {
			t1 := min(T, t0+bs)
			g.Sgemm(false, true, t1-t0, t1, HS, scale, q[t0*C3:], C3, k, C3, 0, s[t0*T:], T)
		}
	}
	m.jobs.fast.softmax = softmaxJob{att: att, T: T, round: m.rounding}
	m.pool.Run(B*NH*T, max(1, 4096/T), &m.jobs.fast.softmax)
	m.jobs.fast.softmax = softmaxJob{}
	for bh := range B * NH {
		b, h := bh/NH, bh%NH
		v := qkv[b*T*C3+2*C+h*HS:]
		y := out[b*T*C+h*HS:]
		s := att[bh*T*T:][:T*T]
		for t0 := 0; t0 < T; t0 += bs {
			t1 := min(T, t0+bs)
			g.Sgemm(false, false, t1-t0, HS, t1, 1, s[t0*T:], T, v, C3, 0, y[t0*C:], C)
		}
	}
	m.round(out[:B*T*C])
}

// softmaxJob turns rows [lo, hi) of the (B·NH·T, T) scores into
// probabilities over their first t+1 entries (row t of its head) and
// zeroes the rest. With a 16-bit DType (round) the scores and the
// probabilities are each rounded.
type softmaxJob struct {
	att   []float32
	T     int
	round func([]float32)
}

func (j *softmaxJob) RunRange(lo, hi int) {
	T := j.T
	for r := lo; r < hi; r++ {
		row := j.att[r*T:][:T]
		s := row[:r%T+1]
		if j.round != nil {
			j.round(s)
		}
		mx := s[0]
		for _, v := range s[1:] {
			mx = max(mx, v)
		}
		var sum float64
		for i, v := range s {
			e := fastExp(v - mx)
			s[i] = e
			sum += float64(e)
		}
		inv := 1 / float32(sum)
		for i := range s {
			s[i] *= inv
		}
		if j.round != nil {
			j.round(s)
		}
		clear(row[len(s):])
	}
}

// attentionBackwardFast writes dqkv (B, T, 3C) from dout (B, T, C), using
// datt (B, NH, T, T) as scratch.
func (m *Model) attentionBackwardFast(dqkv, datt, dout, qkv, att []float32, B, T int) {
	C, NH := m.cfg.Dim, m.cfg.Heads
	HS, C3 := C/NH, 3*C
	scale := float32(1 / math.Sqrt(float64(HS)))
	g, bs := m.opt.Gemm, m.attnBlock
	for bh := range B * NH {
		b, h := bh/NH, bh%NH
		base := b * T * C3
		v, dv := qkv[base+2*C+h*HS:], dqkv[base+2*C+h*HS:]
		dy := dout[b*T*C+h*HS:]
		p, d := att[bh*T*T:][:T*T], datt[bh*T*T:][:T*T]
		for t0 := 0; t0 < T; t0 += bs {
			t1 := min(T, t0+bs)
			g.Sgemm(false, true, t1-t0, t1, HS, 1, dy[t0*C:], C, v, C3, 0, d[t0*T:], T)               // datt
			g.Sgemm(true, false, t1-t0, HS, T-t0, 1, p[t0*T+t0:], T, dy[t0*C:], C, 0, dv[t0*C3:], C3) // dv
		}
	}
	m.jobs.fast.smBack = softmaxBackJob{att: att, datt: datt, T: T, scale: scale, round: m.rounding}
	m.pool.Run(B*NH*T, max(1, 4096/T), &m.jobs.fast.smBack)
	m.jobs.fast.smBack = softmaxBackJob{}
	for bh := range B * NH {
		b, h := bh/NH, bh%NH
		base := b * T * C3
		q, k := qkv[base+h*HS:], qkv[base+C+h*HS:]
		dq, dk := dqkv[base+h*HS:], dqkv[base+C+h*HS:]
		d := datt[bh*T*T:][:T*T]
		for t0 := 0; t0 < T; t0 += bs {
			t1 := min(T, t0+bs)
			g.Sgemm(false, false, t1-t0, HS, t1, 1, d[t0*T:], T, k, C3, 0, dq[t0*C3:], C3)             // dq
			g.Sgemm(true, false, t1-t0, HS, T-t0, 1, d[t0*T+t0:], T, q[t0*C3:], C3, 0, dk[t0*C3:], C3) // dk
		}
	}
	m.round(dqkv[:B*T*C3])
}

// softmaxBackJob is the softmax and scale backward of rows [lo, hi), in
// place in datt: ds = p ⊙ (g − Σ p⊙g) · scale over the row's first t+1
// entries, zero after them. With a 16-bit DType (round) d(att) and
// p ⊙ (g − Σ p⊙g) are each rounded, before the scale.
type softmaxBackJob struct {
	att, datt []float32
	T         int
	scale     float32
	round     func([]float32)
}

func (j *softmaxBackJob) RunRange(lo, hi int) {
	T := j.T
	for r := lo; r < hi; r++ {
		n := r%T + 1
		p := j.att[r*T:][:n]
		row := j.datt[r*T:][:T]
		ds := row[:n]
		if j.round != nil {
			j.round(ds)
		}
		var sum float64
		for i, g := range ds {
			sum += float64(p[i] * g)
		}
		s := float32(sum)
		for i, g := range ds {
			ds[i] = p[i] * (g - s)
		}
		if j.round != nil {
			j.round(ds)
		}
		for i := range ds {
			ds[i] *= j.scale
		}
		clear(row[n:])
	}
}
