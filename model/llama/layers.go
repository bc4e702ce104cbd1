package llama

import (
	"math"

	"github.com/dszero/dszero/model"
)

// The decoder layer, forward and its mirror-image backward, and the
// model's wrappers around the ops: each rounds its output with
// Options.Round and commits parameter gradients. Shapes: N = B·T rows, H
// hidden, Q = nH·D, KV = nKV·D, I intermediate, V vocabulary.
//
// A parameter gradient of one Backward is computed whole (gradOut),
// rounded with Round, and then added to the gradient buffer (gradCommit),
// like PyTorch's AccumulateGrad and like a 16-bit .grad added into fp32
// accumulators. After OverwriteGrads it is computed straight into the
// gradient buffer instead, and nothing is added.

func (m *Model) round(s []float32) {
	if m.opt.Round != nil {
		m.opt.Round(s)
	}
}

// gradOut and gradCommit are the model.GradSink protocol: a parameter
// gradient is computed whole in gradOut's slice, then rounded and added
// (or, after OverwriteGrads, written in place).
func (m *Model) gradOut(grad []float32) []float32 { return m.sink.Out(grad) }
func (m *Model) gradCommit(grad, dst []float32)   { m.sink.Commit(grad, dst) }

// commitSums commits float64 column sums as a parameter gradient.
func (m *Model) commitSums(grad []float32, sums []float64) {
	dst := m.gradOut(grad)
	for i, s := range sums {
		dst[i] = float32(s)
	}
	m.gradCommit(grad, dst)
}

// layerForward runs decoder layer l on x (N, H) into out:
//
//	h1  = x + o_proj(attention(rope(norm_qk(q_proj(xn1))), rope(norm_qk(k_proj(xn1))), v_proj(xn1)))
//	out = h1 + down_proj(silu(gate_proj(xn2)) ⊙ up_proj(xn2))
//
// with xn1 = input_layernorm(x), xn2 = post_attention_layernorm(h1) and
// norm_qk Qwen3's per-head q_norm/k_norm (identity otherwise). With out
// == nil it stops after the SwiGLU: what a recompute needs.
func (m *Model) layerForward(l int, x []float32, la *layerActs, out []float32) {
	c, p, a := &m.cfg, &m.p.layers[l], &m.a
	N, H, Q, KV, I, D := a.B*a.T, c.Hidden, c.qDim(), c.kvDim(), c.Intermediate, c.HeadDim
	m.rmsnorm(la.xn1, la.rstd1, x, p.ln1, N, H)
	if c.qkNorm() {
		m.matmulForward(la.qpre, la.xn1, p.qw, p.qb, N, H, Q)
		m.matmulForward(la.kpre, la.xn1, p.kw, p.kb, N, H, KV)
		m.rmsnorm(la.q, la.qrstd, la.qpre, p.qn, N*c.Heads, D)
		m.rmsnorm(la.k, la.krstd, la.kpre, p.kn, N*c.KVHeads, D)
	} else {
		m.matmulForward(la.q, la.xn1, p.qw, p.qb, N, H, Q)
		m.matmulForward(la.k, la.xn1, p.kw, p.kb, N, H, KV)
	}
	m.matmulForward(la.v, la.xn1, p.vw, p.vb, N, H, KV)
	ropeForward(la.q, N, c.Heads, D, Q, a.cos, a.sin)
	ropeForward(la.k, N, c.KVHeads, D, KV, a.cos, a.sin)
	m.round(la.q)
	m.round(la.k)
	m.attention(l, la, true)
	m.matmulForward(la.h1, la.y, p.ow, p.ob, N, Q, H)
	residualForward(la.h1, x, la.h1)
	m.round(la.h1)
	m.rmsnorm(la.xn2, la.rstd2, la.h1, p.ln2, N, H)
	m.matmulForward(la.gate, la.xn2, p.gw, p.gb, N, H, I)
	m.matmulForward(la.up, la.xn2, p.uw, p.ub, N, H, I)
	m.jobs.swiglu = swigluJob{out: la.act, gate: la.gate, up: la.up}
	m.pool.Run(N*I, 4096, &m.jobs.swiglu)
	m.jobs.swiglu = swigluJob{}
	m.round(la.act)
	if out != nil {
		m.matmulForward(out, la.act, p.dw, p.db, N, I, H)
		residualForward(out, la.h1, out)
		m.round(out)
	}
}

// layerBackward is layerForward's mirror: dres holds d(out) on entry and
// d(x) on return; layer l's parameter gradients are accumulated.
func (m *Model) layerBackward(l int, x []float32, la *layerActs, dres []float32) {
	c, p, g, a := &m.cfg, &m.p.layers[l], &m.g.layers[l], &m.a
	N, H, Q, KV, I, D := a.B*a.T, c.Hidden, c.qDim(), c.kvDim(), c.Intermediate, c.HeadDim
	// MLP.
	m.matmulBackward(a.dfc, g.dw, g.db, dres, la.act, p.dw, N, I, H)
	m.jobs.swiglu = swigluJob{out: a.dfc, dgate: a.dfc2, da: a.dfc, gate: la.gate, up: la.up, backward: true}
	m.pool.Run(N*I, 4096, &m.jobs.swiglu)
	m.jobs.swiglu = swigluJob{}
	m.round(a.dfc2) // d(gate)
	m.round(a.dfc)  // d(up)
	m.matmulBackward(a.dln, g.gw, g.gb, a.dfc2, la.xn2, p.gw, N, H, I)
	m.matmulBackward(a.dx, g.uw, g.ub, a.dfc, la.xn2, p.uw, N, H, I)
	m.sumGrads(a.dln, a.dx)
	m.rmsnormBackward(a.dx, g.ln2, a.dln, la.h1, p.ln2, la.rstd2, N, H)
	m.sumGrads(dres, a.dx) // dres = d(h1)
	// Attention.
	m.matmulBackward(a.dy, g.ow, g.ob, dres, la.y, p.ow, N, Q, H)
	m.attention(l, la, false)
	ropeBackward(a.dq, N, c.Heads, D, Q, a.cos, a.sin)
	ropeBackward(a.dk, N, c.KVHeads, D, KV, a.cos, a.sin)
	m.round(a.dq)
	m.round(a.dk)
	if c.qkNorm() {
		m.rmsnormBackward(a.dq, g.qn, a.dq, la.qpre, p.qn, la.qrstd, N*c.Heads, D)
		m.rmsnormBackward(a.dk, g.kn, a.dk, la.kpre, p.kn, la.krstd, N*c.KVHeads, D)
	}
	m.matmulBackward(a.dln, g.qw, g.qb, a.dq, la.xn1, p.qw, N, H, Q)
	m.matmulBackward(a.dx, g.kw, g.kb, a.dk, la.xn1, p.kw, N, H, KV)
	m.sumGrads(a.dln, a.dx)
	m.matmulBackward(a.dx, g.vw, g.vb, a.dv, la.xn1, p.vw, N, H, KV)
	m.sumGrads(a.dln, a.dx)
	m.rmsnormBackward(a.dx, g.ln1, a.dln, x, p.ln1, la.rstd1, N, H)
	m.sumGrads(dres, a.dx) // dres = d(x)
}

// sumGrads adds a second gradient path into dst: dst += src, rounded.
func (m *Model) sumGrads(dst, src []float32) {
	addInto(dst, src)
	m.round(dst)
}

// rmsnorm is rmsnormForward, rounded.
func (m *Model) rmsnorm(out, rstd, x, w []float32, rows, cols int) {
	rmsnormForward(out, rstd, x, w, rows, cols, float32(m.cfg.Eps))
	m.round(out[:rows*cols])
}

// rmsnormBackward writes dx (dx may alias dy) and commits the weight
// gradient dw.
func (m *Model) rmsnormBackward(dx, dw, dy, x, w, rstd []float32, rows, cols int) {
	acc := m.colAcc[:cols]
	clear(acc)
	rmsnormBackward(dx, acc, dy, x, w, rstd, rows, cols)
	m.round(dx[:rows*cols])
	m.commitSums(dw, acc)
}

// matmulForward is a Linear layer: out (N, OC) = inp (N, IC) · wᵀ + bias,
// w (OC, IC) in PyTorch layout, bias (OC) or nil. Like torch's addmm the
// bias is copied into out first and the product added with beta = 1.
func (m *Model) matmulForward(out, inp, w, bias []float32, N, IC, OC int) {
	var beta float32
	if bias != nil {
		for r := range N {
			copy(out[r*OC:][:OC], bias)
		}
		beta = 1
	}
	m.opt.Gemm.Sgemm(false, true, N, OC, IC, 1, inp, IC, w, IC, beta, out, OC)
	m.round(out[:N*OC])
}

// matmulBackward: dinp (N, IC) = dout (N, OC) · w; dw (OC, IC) += doutᵀ · inp;
// dbias (OC) += Σ_rows dout (dbias nil: no bias).
func (m *Model) matmulBackward(dinp, dw, dbias, dout, inp, w []float32, N, IC, OC int) {
	m.linearInputGrad(dinp, dout, w, N, IC, OC)
	dst := m.gradOut(dw)
	m.opt.Gemm.Sgemm(true, false, OC, IC, N, 1, dout, OC, inp, IC, 0, dst, IC)
	m.gradCommit(dw, dst)
	if dbias != nil {
		acc := m.colAcc[:OC]
		clear(acc)
		for r := range N {
			for i, v := range dout[r*OC:][:OC] {
				acc[i] += float64(v)
			}
		}
		m.commitSums(dbias, acc)
	}
}

// linearInputGrad: dinp (N, IC) = dout (N, OC) · w.
func (m *Model) linearInputGrad(dinp, dout, w []float32, N, IC, OC int) {
	m.opt.Gemm.Sgemm(false, false, N, IC, OC, 1, dout, OC, w, IC, 0, dinp, IC)
	m.round(dinp[:N*IC])
}

// attention runs the grouped-query attention of layer l forward (la.q,
// la.k, la.v into la.att and la.y) or backward (a.dy into a.dq, a.dk,
// a.dv), spread over the pool by (batch row, kv head).
func (m *Model) attention(l int, la *layerActs, forward bool) {
	if m.sp != nil {
		m.spAttention(l, la, forward)
		return
	}
	c, a := &m.cfg, &m.a
	s := &m.jobs.attn
	*s = attnShape{
		gemm: m.opt.Gemm, T: a.T, nH: c.Heads, nKV: c.KVHeads, D: c.HeadDim,
		window: c.Window(l), blk: a.blk, scale: float32(1 / math.Sqrt(float64(c.HeadDim))), round: m.opt.Round,
		attSize: a.T * a.T, qStride: c.qDim(), kvStride: c.kvDim(), rep: c.Heads / c.KVHeads,
		q: la.q, k: la.k, v: la.v, att: la.att, forward: forward,
	}
	if forward {
		s.y = la.y
	} else {
		s.y, s.dq, s.dk, s.dv, s.datt = a.dy, a.dq, a.dk, a.dv, a.datt
	}
	m.pool.Run(a.B*c.KVHeads, 1, s)
	*s = attnShape{}
}

// crossentropyForward computes the per-position losses of the logits
// against a.targets and returns their sum over the counted positions
// divided by lossDenom (> 0) or by their count.
func (m *Model) crossentropyForward(lossDenom float64, N int) float32 {
	a := &m.a
	m.jobs.ce = ceRows{logits: a.logits, lseMax: a.lseMax, lseLog: a.lseLog, losses: a.losses, targets: a.targets, V: m.cfg.Vocab}
	m.pool.Run(N, 1, &m.jobs.ce)
	m.jobs.ce = ceRows{}
	var sum float64
	a.counted = 0
	for r, t := range a.targets[:N] {
		if t != model.IgnoreIndex {
			sum += float64(a.losses[r])
			a.counted++
		}
	}
	a.denom = float64(a.counted)
	if lossDenom > 0 {
		a.denom = lossDenom
	}
	if a.denom == 0 {
		return 0
	}
	return float32(sum / a.denom)
}

// crossentropyBackward turns the logits into dlogits in place, for a loss
// gradient of d per counted position.
func (m *Model) crossentropyBackward(d float32, N int) {
	a := &m.a
	m.jobs.ce = ceRows{logits: a.logits, lseMax: a.lseMax, lseLog: a.lseLog, targets: a.targets, V: m.cfg.Vocab, d: d, backward: true}
	m.pool.Run(N, 1, &m.jobs.ce)
	m.jobs.ce = ceRows{}
	m.round(a.logits[:N*m.cfg.Vocab])
}

// embeddingBackward adds dout's rows into embed_tokens' gradient at the
// tokens' rows (the padding token's row excepted: nn.Embedding's
// padding_idx gets no gradient), rounding a row after each add as a
// 16-bit index_add does. Tied, the lookup's gradient is first added to
// the head's (each row rounded: one 16-bit gradient of two uses), and
// that sum is what is accumulated, as autograd sums the two before
// AccumulateGrad. Rows no token touches keep their value, or are zeroed
// after OverwriteGrads.
func (m *Model) embeddingBackward(dembed, dout []float32, tokens []int32) {
	H, tied := m.cfg.Hidden, m.cfg.Tied
	pad := -1
	if m.cfg.PadTokenID != nil {
		pad = *m.cfg.PadTokenID
	}
	scatter := func(dst []float32) {
		for n, tok := range tokens {
			if int(tok) == pad {
				continue
			}
			d, o := dst[int(tok)*H:][:H], dout[n*H:][:H]
			addInto(d, o)
			m.round(d)
		}
	}
	if m.sink.Overwriting() && !tied {
		// The whole of dembed is this Backward's: the tokens' rows, zero
		// elsewhere (embedding_dense_backward).
		clear(dembed)
		scatter(dembed)
		return
	}
	// The lookup's gradient is zero outside the tokens' rows, so only those
	// rows are computed in the scratch and added, each once: into the
	// accumulated gradient (untied), into the head's gradient that
	// OverwriteGrads let the head write in place, or into tiedGrad.
	dst := m.sink.Scratch[:len(dembed)]
	for _, tok := range tokens {
		clear(dst[int(tok)*H:][:H])
	}
	scatter(dst)
	into := dembed
	if tied && !m.sink.Overwriting() {
		into = m.tiedGrad
	}
	seen := m.rowSeen
	clear(seen)
	for _, tok := range tokens {
		r := int(tok)
		if r == pad || seen[r/64]&(1<<(r%64)) != 0 {
			continue
		}
		seen[r/64] |= 1 << (r % 64)
		row := into[r*H:][:H]
		addInto(row, dst[r*H:][:H])
		if tied {
			m.round(row)
		}
	}
	if tied && !m.sink.Overwriting() {
		addInto(dembed, m.tiedGrad)
	}
}
