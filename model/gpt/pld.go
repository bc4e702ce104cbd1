package gpt

import "fmt"

// Progressive layer drop (DeepSpeed's progressive_layer_drop, the PLD of
// Zhang & He 2020, as DeepSpeedExamples' bing_bert
// modelingpreln_layerdrop.py runs it): in a training forward each block
// is either skipped — its output is its input, and its parameters get no
// gradient from this micro-batch — or run with both residual branches
// divided by the keep probability p the example passes (its
// `output * 1 / keep_prob`: a float32 division by float32(p), and the
// same division of the gradient in the backward):
//
//	res2 = x + attn.proj(attention(attn.qkv(ln1(x)))) / p
//	out  = res2 + mlp.proj(gelu(mlp.fc(ln2(res2)))) / p
//
// The training loop draws which blocks run and their p (package train);
// the model only carries the decision from Forward to its Backward (and a
// recompute under activation checkpointing).

// layerDrop is the decision for the next Forward: nil keep runs every
// block undivided.
type layerDrop struct {
	keep     []bool
	keepProb []float32
}

// DropLayers is the number of blocks SetLayerDrop decides about.
func (m *Model) DropLayers() int { return m.cfg.Layers }

// SetLayerDrop makes the following Forward passes, and their Backward,
// skip every block l with keep[l] false and divide the residual branches
// of every other block by keepProb[l]. nil slices run every block as
// usual.
func (m *Model) SetLayerDrop(keep []bool, keepProb []float32) error {
	if keep == nil && keepProb == nil {
		m.drop = layerDrop{}
		return nil
	}
	if len(keep) != m.cfg.Layers || len(keepProb) != m.cfg.Layers {
		return fmt.Errorf("gpt: layer drop for %d and %d blocks, the model has %d", len(keep), len(keepProb), m.cfg.Layers)
	}
	for l, p := range keepProb {
		if keep[l] && !(p > 0) {
			return fmt.Errorf("gpt: layer drop: block %d runs with keep probability %v, want > 0", l, p)
		}
	}
	m.drop = layerDrop{keep: append(m.drop.keep[:0], keep...), keepProb: append(m.drop.keepProb[:0], keepProb...)}
	return nil
}

// dropped says whether block l is skipped, and its branches' divisor.
func (m *Model) dropped(l int) (skip bool, p float32) {
	if m.drop.keep == nil {
		return false, 1
	}
	return !m.drop.keep[l], m.drop.keepProb[l]
}

// blockForwardPLD is blockForward under the layer-drop decision.
func (m *Model) blockForwardPLD(l int, x []float32, ba *blockActs, out []float32) {
	skip, s := m.dropped(l)
	switch {
	case skip:
		if out != nil {
			copy(out, x)
		}
		return
	case s == 1:
		m.blockForward(l, x, ba, out)
		return
	}
	p := &m.p.blocks[l]
	B, T := m.a.B, m.a.T
	N, C, M := B*T, m.cfg.Dim, m.cfg.MLP
	m.layernormForward(ba.ln1, ba.ln1Mean, ba.ln1Rstd, x, p.ln1w, p.ln1b, N)
	m.matmulForward(ba.qkv, ba.ln1, p.qkvw, p.qkvb, N, C, 3*C)
	m.attentionForward(ba.atty, ba.att, ba.qkv, m.a.dx, B, T)
	m.matmulForward(ba.res2, ba.atty, p.attprojw, p.attprojb, N, C, C)
	m.scale(ba.res2, s)
	m.residualForward(ba.res2, x, ba.res2)
	m.layernormForward(ba.ln2, ba.ln2Mean, ba.ln2Rstd, ba.res2, p.ln2w, p.ln2b, N)
	m.matmulForward(ba.fch, ba.ln2, p.fcw, p.fcb, N, C, M)
	m.geluForward(ba.fchGelu, ba.fch)
	if out != nil {
		m.matmulForward(out, ba.fchGelu, p.fcprojw, p.fcprojb, N, M, C)
		m.scale(out, s)
		m.residualForward(out, ba.res2, out)
	}
}

// blockBackwardPLD is blockBackward under the layer-drop decision: a
// skipped block passes dres through (and adds no gradient, or writes
// zeros after OverwriteGrads); a divided one hands each branch
// d(its output)/p. a.dln holds that gradient, free at both points.
func (m *Model) blockBackwardPLD(l int, x []float32, ba *blockActs, dres []float32) {
	skip, s := m.dropped(l)
	switch {
	case skip:
		// PyTorch leaves a skipped block's .grad None after zero_grad
		// (set_to_none) and ZeRO reduces it as zeros: overwrite the
		// previous step's gradient with them.
		if m.sink.Overwriting() {
			clear(m.layout.UnitView(m.grads, 1+l))
		}
		return
	case s == 1:
		m.blockBackward(l, x, ba, dres)
		return
	}
	p, g, a := &m.p.blocks[l], &m.g.blocks[l], &m.a
	B, T := a.B, a.T
	N, C, M := B*T, m.cfg.Dim, m.cfg.MLP
	dbr := a.dln[:N*C]
	m.scaled(dbr, dres, s)
	m.matmulBackward(a.dfch, g.fcprojw, g.fcprojb, dbr, ba.fchGelu, p.fcprojw, N, M, C)
	m.geluBackward(a.dfch, ba.fch, a.dfch)
	m.matmulBackward(a.dln, g.fcw, g.fcb, a.dfch, ba.ln2, p.fcw, N, C, M)
	m.layernormBackward(a.dx, g.ln2w, g.ln2b, a.dln, ba.res2, p.ln2w, ba.ln2Mean, ba.ln2Rstd, N)
	m.residualBackward(dres, a.dx) // dres = d(res2)
	m.scaled(dbr, dres, s)
	m.matmulBackward(a.datty, g.attprojw, g.attprojb, dbr, ba.atty, p.attprojw, N, C, C)
	m.attentionBackward(a.dqkv, a.datt, a.datty, ba.qkv, ba.att, a.dx, B, T)
	m.matmulBackward(a.dln, g.qkvw, g.qkvb, a.dqkv, ba.ln1, p.qkvw, N, C, 3*C)
	m.layernormBackward(a.dx, g.ln1w, g.ln1b, a.dln, x, p.ln1w, ba.ln1Mean, ba.ln1Rstd, N)
	m.residualBackward(dres, a.dx) // dres = d(x)
}

// scale divides x by p in place (one op: rounded to the training dtype;
// torch divides a bf16/fp16 tensor by a scalar in float, then rounds).
func (m *Model) scale(x []float32, p float32) {
	for i := range x {
		x[i] /= p
	}
	m.round(x)
}

// scaled writes x/p into dst.
func (m *Model) scaled(dst, x []float32, p float32) {
	for i := range dst {
		dst[i] = x[i] / p
	}
	m.round(dst)
}
