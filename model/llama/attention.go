package llama

import (
	"math"

	"github.com/dszero/dszero/model"
)

// Grouped-query causal self-attention (eager_attention_forward). The
// projections are row-major: q (B·T, nH·D) with head j at columns j·D,
// k and v (B·T, nKV·D) with kv head g at columns g·D. Query head j reads
// kv head g = j / rep, rep = nH/nKV (repeat_kv). For each batch row b and
// head j:
//
//	s   = (q_j · k_gᵀ) · D^-½               (T, T)
//	att = softmax(s) over the visible keys  kept for backward
//	y_j = att · v_g                          written to y (B·T, nH·D) at columns j·D
//
// Key t2 is visible to query t when blockStart(t) ≤ t2 ≤ t and, with a
// sliding window W, t2 > t − W (masking_utils: causal, packed sequences
// from position_ids, sliding_window_overlay). The visible keys of a query
// are always one contiguous run [lo(t), t], so the mask is a start index
// per query, not a (T, T) tensor.
//
// The products run through the Gemmer, one GEMM per (b, head) and
// operand, reading q, k, v, y and their gradients in place through their
// row strides. The (b, kv head) pairs are independent and spread over
// the worker pool; a pair's rep query heads run in order, so the key and
// value gradients of the group accumulate without races. With Round the
// 16-bit tensors are s (after the scale), att and y, and in backward
// d(att), d(s), dq, dk and dv.

// attnShape is what the forward and backward jobs share.
type attnShape struct {
	gemm              model.Gemmer
	T, nH, nKV, D     int
	window            int     // 0: full causal
	blk               []int32 // (B·T) index within its row of each token's block start
	scale             float32
	round             func([]float32)
	attSize           int // T·T: one head's att in (B, nH, T, T)
	qStride, kvStride int // nH·D and nKV·D
	rep               int
	q, k, v, att      []float32
	y                 []float32 // forward output, backward input dy
	dq, dk, dv, datt  []float32 // backward
	forward           bool
}

// visible returns the first key query t of row b may see.
func (s *attnShape) visible(b, t int) int {
	lo := int(s.blk[b*s.T+t])
	if s.window > 0 {
		lo = max(lo, t-s.window+1)
	}
	return lo
}

func (s *attnShape) RunRange(lo, hi int) {
	for bg := lo; bg < hi; bg++ {
		b, g := bg/s.nKV, bg%s.nKV
		if s.forward {
			s.forwardGroup(b, g)
		} else {
			s.backwardGroup(b, g)
		}
	}
}

// forwardGroup runs the rep query heads of kv head g in batch row b.
func (s *attnShape) forwardGroup(b, g int) {
	T, D := s.T, s.D
	kg := s.k[b*T*s.kvStride+g*D:]
	vg := s.v[b*T*s.kvStride+g*D:]
	for r := range s.rep {
		j := g*s.rep + r
		qj := s.q[b*T*s.qStride+j*D:]
		att := s.att[(b*s.nH+j)*s.attSize:][:s.attSize]
		s.gemm.Sgemm(false, true, T, T, D, s.scale, qj, s.qStride, kg, s.kvStride, 0, att, T)
		for t := range T {
			row := att[t*T:][:T]
			a := s.visible(b, t)
			p := row[a : t+1]
			if s.round != nil {
				s.round(p)
			}
			mx := p[0]
			for _, v := range p[1:] {
				mx = max(mx, v)
			}
			var sum float64
			for i, v := range p {
				e := float32(math.Exp(float64(v - mx)))
				p[i] = e
				sum += float64(e)
			}
			inv := 1 / float32(sum)
			for i := range p {
				p[i] *= inv
			}
			if s.round != nil {
				s.round(p)
			}
			clear(row[:a])
			clear(row[t+1:])
		}
		yj := s.y[b*T*s.qStride+j*D:]
		s.gemm.Sgemm(false, false, T, D, T, 1, att, T, vg, s.kvStride, 0, yj, s.qStride)
		s.roundRows(yj, s.qStride)
	}
}

// backwardGroup is forwardGroup's mirror:
//
//	datt = dy · vᵀ                          dv += attᵀ · dy
//	ds   = att ⊙ (datt − Σ_row att⊙datt)    (softmax backward)
//	dq   = D^-½ · ds · k                    dk += D^-½ · dsᵀ · q
func (s *attnShape) backwardGroup(b, g int) {
	T, D := s.T, s.D
	kg := s.k[b*T*s.kvStride+g*D:]
	vg := s.v[b*T*s.kvStride+g*D:]
	dkg := s.dk[b*T*s.kvStride+g*D:]
	dvg := s.dv[b*T*s.kvStride+g*D:]
	for r := range s.rep {
		j := g*s.rep + r
		var beta float32
		if r > 0 {
			beta = 1
		}
		qj := s.q[b*T*s.qStride+j*D:]
		dyj := s.y[b*T*s.qStride+j*D:]
		att := s.att[(b*s.nH+j)*s.attSize:][:s.attSize]
		datt := s.datt[(b*s.nH+j)*s.attSize:][:s.attSize]
		s.gemm.Sgemm(false, true, T, T, D, 1, dyj, s.qStride, vg, s.kvStride, 0, datt, T)
		s.gemm.Sgemm(true, false, T, D, T, 1, att, T, dyj, s.qStride, beta, dvg, s.kvStride)
		for t := range T {
			row := datt[t*T:][:T]
			a := s.visible(b, t)
			ds, p := row[a:t+1], att[t*T+a:][:t+1-a]
			if s.round != nil {
				s.round(ds)
			}
			var dot float64
			for i, gv := range ds {
				dot += float64(p[i] * gv)
			}
			d := float32(dot)
			for i, gv := range ds {
				ds[i] = p[i] * (gv - d)
			}
			if s.round != nil {
				s.round(ds)
			}
			clear(row[:a])
			clear(row[t+1:])
		}
		dqj := s.dq[b*T*s.qStride+j*D:]
		s.gemm.Sgemm(false, false, T, D, T, s.scale, datt, T, kg, s.kvStride, 0, dqj, s.qStride)
		s.roundRows(dqj, s.qStride)
		s.gemm.Sgemm(true, false, T, D, T, s.scale, datt, T, qj, s.qStride, beta, dkg, s.kvStride)
	}
	s.roundRows(dkg, s.kvStride)
	s.roundRows(dvg, s.kvStride)
}

// roundRows rounds the T rows of D values, stride apart, that start x.
func (s *attnShape) roundRows(x []float32, stride int) {
	if s.round == nil {
		return
	}
	for t := range s.T {
		s.round(x[t*stride:][:s.D])
	}
}

// blockStarts fills blk (B·T) with the index, within its row, of each
// token's packed sequence: a sequence starts at t = 0 and wherever the
// position id does not continue the previous one by one
// (find_packed_sequence_indices).
func blockStarts(blk, positions []int32, B, T int) {
	for b := range B {
		pos, out := positions[b*T:][:T], blk[b*T:][:T]
		for t := range T {
			if t == 0 || pos[t] != pos[t-1]+1 {
				out[t] = int32(t)
			} else {
				out[t] = out[t-1]
			}
		}
	}
}
