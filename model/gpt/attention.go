package gpt

import "math"

// Causal self-attention over qkv (B, T, 3C): for each batch row b and head
// h, with q, k, v the (T, HS) slices at columns h*HS of the three thirds,
//
//	s   = (q · kᵀ) · 1/√HS        (T, T), masked to t2 ≤ t
//	att = softmax(s) per row      kept for backward
//	y   = att · v                 written to out (B, T, C) at columns h*HS
//
// Each (b, h) pair is independent; the pairs are spread over the pool.
// With Round the 16-bit tensors are s (after the scale), att, y and, in
// backward, d(att), d(s) and dq, dk, dv. With bf16 every sum of products
// runs in the order of torch's bf16 bmm (dotPairs).

// attnShape is what the forward and backward jobs share: T, C and NH of
// the pass and the 16-bit rounding.
type attnShape struct {
	T, C, NH int
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
func (m *Model) attnShape(T int) attnShape {
	return attnShape{T: T, C: m.cfg.Dim, NH: m.cfg.Heads, round: m.opt.Round, bf16: m.bf16}
}

// attnJob is the forward over (b, h) pairs [lo, hi).
type attnJob struct {
	out, att, qkv []float32
	attnShape
}

func (j *attnJob) runRange(lo, hi int) {
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
				var dot float32
				if j.bf16 {
					dot = dotPairs(q, k)
				} else {
					for i, qi := range q {
						dot += qi * k[i]
					}
				}
				s[t2] = dot * scale
			}
			if j.round != nil {
				j.round(s)
			}
			mx := s[0]
			for _, v := range s[1:] {
				mx = max(mx, v)
			}
			var inv float32
			if j.bf16 {
				inv = 1 / softmaxSumBF16(s, mx)
			} else {
				var sum float64
				for t2, v := range s {
					e := float32(math.Exp(float64(v - mx)))
					s[t2] = e
					sum += float64(e)
				}
				inv = 1 / float32(sum)
			}
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
				if j.bf16 {
					t2 = pairSwap(t2, len(s))
				}
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

// attentionForward fills out (B, T, C) and att (B, NH, T, T) from qkv.
func (m *Model) attentionForward(out, att, qkv []float32, B, T int) {
	m.jobs.attn = attnJob{out: out, att: att, qkv: qkv, attnShape: m.attnShape(T)}
	m.pool.run(B*m.cfg.Heads, 1, &m.jobs.attn)
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

func (j *attnBackJob) runRange(lo, hi int) {
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
			if j.bf16 {
				t = pairSwap(t, T) // dv sums over t in the bf16 GEMM's order
			}
			dy := j.dout[(b*T+t)*C+h*HS:][:HS]
			p := j.att[(bh*T+t)*T:][:t+1]
			ds := j.datt[(bh*T+t)*T:][:t+1]
			for t2 := range ds {
				v := j.qkv[base+t2*C3+2*C+h*HS:][:HS]
				dv := j.dqkv[base+t2*C3+2*C+h*HS:][:HS]
				var dot float32
				if j.bf16 {
					dot = dotPairs(dy, v)
					for i, g := range dy {
						dv[i] += p[t2] * g
					}
				} else {
					for i, g := range dy {
						dot += g * v[i]
						dv[i] += p[t2] * g
					}
				}
				ds[t2] = dot
			}
			if j.round != nil {
				j.round(ds)
			}
			var s float32
			if j.bf16 {
				s = rb(softmaxBackSumBF16(p, ds))
			} else {
				var sum float64
				for t2, g := range ds {
					sum += float64(p[t2] * g)
				}
				s = float32(sum)
			}
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
			if j.bf16 {
				t = pairSwap(t, T) // dk sums over t in the bf16 GEMM's order
			}
			ds := j.datt[(bh*T+t)*T:][:t+1]
			q := j.qkv[base+t*C3+h*HS:][:HS]
			dq := j.dqkv[base+t*C3+h*HS:][:HS]
			for t2 := range ds {
				if j.bf16 {
					t2 = pairSwap(t2, len(ds)) // and dq over t2
				}
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
// datt (B, NH, T, T) as scratch.
func (m *Model) attentionBackward(dqkv, datt, dout, qkv, att []float32, B, T int) {
	m.jobs.attnB = attnBackJob{dqkv: dqkv, datt: datt, dout: dout, qkv: qkv, att: att, attnShape: m.attnShape(T)}
	m.pool.run(B*m.cfg.Heads, 1, &m.jobs.attnB)
	m.jobs.attnB = attnBackJob{}
}
