package llama

import (
	"fmt"

	"github.com/dszero/dszero/mem"
)

// layerActs are what one decoder layer's backward needs from its forward.
// Without activation checkpointing the model keeps one per layer; with
// it, one that every layer's forward (and recompute) writes into.
type layerActs struct {
	xn1   []float32 // (N, H) input_layernorm output
	rstd1 []float32 // (N)
	qpre  []float32 // (N, nH·D) q_proj output before q_norm (Qwen3; nil otherwise)
	kpre  []float32 // (N, nKV·D) k_proj output before k_norm (Qwen3)
	qrstd []float32 // (N·nH) q_norm's rstd per head (Qwen3)
	krstd []float32 // (N·nKV)
	q     []float32 // (N, nH·D) queries after RoPE
	k     []float32 // (N, nKV·D) keys after RoPE
	v     []float32 // (N, nKV·D) values
	att   []float32 // (B, nH, T, T) softmax probabilities, zero where masked
	y     []float32 // (N, nH·D) attention output, heads side by side, before o_proj
	h1    []float32 // (N, H) residual stream after attention: x + o_proj(y)
	xn2   []float32 // (N, H) post_attention_layernorm output
	rstd2 []float32 // (N)
	gate  []float32 // (N, I) gate_proj output
	up    []float32 // (N, I) up_proj output
	act   []float32 // (N, I) silu(gate) ⊙ up, down_proj's input
}

// acts holds every activation of one (B, T) and the backward scratch.
type acts struct {
	B, T int

	// res[l] is layer l's input, res[L] the last layer's output (the final
	// norm's input); res[0] is the embedding output. With checkpointing
	// these are all that is kept of the layers, res[0..L-1] in the save
	// tier.
	res    [][]float32 // L+1 of (N, H)
	layers []layerActs // L, or 1 with checkpointing

	cos, sin []float32 // (N, D/2) the rotary tables of the tokens' positions

	xf     []float32 // (N, H) final norm output
	rstdf  []float32 // (N)
	logits []float32 // (N, V); Backward turns it into dlogits in place
	lseMax []float32 // (N) max of each logits row
	lseLog []float32 // (N) log Σ exp(logits − max) of each row
	losses []float32 // (N) per-position cross-entropy (0 where ignored)

	// Backward scratch, shared by all layers.
	dres []float32 // (N, H) gradient of the residual stream
	dx   []float32 // (N, H) a branch's input gradient before it joins dres
	dln  []float32 // (N, H) a norm's output gradient
	dy   []float32 // (N, nH·D) gradient of the attention output
	dq   []float32 // (N, nH·D)
	dk   []float32 // (N, nKV·D)
	dv   []float32 // (N, nKV·D)
	datt []float32 // (B, nH, T, T) gradient of the scores
	dfc  []float32 // (N, I) gradient of act, then of up (in place)
	dfc2 []float32 // (N, I) gradient of gate

	tokens    []int32 // (N) copy of the forward's input
	targets   []int32 // (N) copy of the forward's targets
	positions []int32 // (N) position ids
	blk       []int32 // (N) each token's block start within its row
	counted   int     // targets that take a loss
	denom     float64 // what the summed loss was divided by
}

// slab hands out consecutive views of one accounted allocation.
type slab struct {
	buf []float32
	off int
}

func (s *slab) take(n int) []float32 {
	v := s.buf[s.off : s.off+n : s.off+n]
	s.off += n
	return v
}

// layerSize is the floats of one layerActs for N tokens in B rows of T.
func (m *Model) layerSize(B, T int) int {
	c := m.cfg
	N, H, Q, KV, I := B*T, c.Hidden, c.qDim(), c.kvDim(), c.Intermediate
	n := N*H + N + N*Q + 2*N*KV + c.Heads*B*T*T + N*Q + 2*N*H + N + 3*N*I // xn1 rstd1 q k v att y h1 xn2 rstd2 gate up act
	if c.qkNorm() {
		n += N*Q + N*KV + N*c.Heads + N*c.KVHeads
	}
	return n
}

// actSizes returns the floats needed on the device and in the save tier
// (the checkpointed layer inputs) for a (B, T) step.
func (m *Model) actSizes(B, T int) (device, saved int) {
	c := m.cfg
	N, H, Q, KV, I := B*T, c.Hidden, c.qDim(), c.kvDim(), c.Intermediate
	nLayers := c.Layers
	if m.opt.Checkpoint {
		nLayers = 1
	}
	device = nLayers*m.layerSize(B, T) +
		N*H + // res[L]
		N*c.HeadDim + // cos, sin
		N*H + N + N*c.Vocab + 3*N + // xf, rstdf, logits, lse, losses
		3*N*H + 2*N*Q + 2*N*KV + c.Heads*B*T*T + 2*N*I // backward scratch
	saved = c.Layers * N * H
	if !m.opt.CPUCheckpoint {
		device += saved
		saved = 0
	}
	return device, saved
}

// ensureActs makes the activations fit (B, T), allocating through the
// accountant only when the held buffers are too small: the buffers of an
// earlier, larger shape are reused.
func (m *Model) ensureActs(B, T int) error {
	if m.a.B == B && m.a.T == T {
		return nil
	}
	dev, saved := m.actSizes(B, T)
	if len(m.devBuf) < dev || len(m.savedBuf) < saved || cap(m.a.tokens) < B*T {
		m.freeActs()
		var err error
		if m.devBuf, err = m.opt.Acct.F32(mem.Activations, mem.Device, dev); err != nil {
			return fmt.Errorf("llama: activations for B=%d T=%d: %w", B, T, err)
		}
		if saved > 0 {
			if m.savedBuf, err = m.opt.Acct.F32(mem.Activations, mem.PinnedHost, saved); err != nil {
				m.freeActs()
				return fmt.Errorf("llama: checkpointed layer inputs for B=%d T=%d: %w", B, T, err)
			}
		}
		if err := m.opt.Acct.Reserve(mem.Activations, mem.Device, int64(16*B*T)); err != nil {
			m.freeActs()
			return fmt.Errorf("llama: token buffers for B=%d T=%d: %w", B, T, err)
		}
		m.intBytes = int64(16 * B * T)
		ints := make([]int32, 4*B*T)
		m.a.tokens, m.a.targets, m.a.positions, m.a.blk = ints[:B*T], ints[B*T:2*B*T], ints[2*B*T:3*B*T], ints[3*B*T:]
	}
	m.carve(B, T)
	return nil
}

// carve points the activation views into the held buffers for (B, T).
func (m *Model) carve(B, T int) {
	c := m.cfg
	N, H, Q, KV, I := B*T, c.Hidden, c.qDim(), c.kvDim(), c.Intermediate
	att := c.Heads * B * T * T
	dev := &slab{buf: m.devBuf}
	save := dev
	if m.opt.CPUCheckpoint {
		save = &slab{buf: m.savedBuf}
	}
	a := &m.a
	a.B, a.T = B, T
	a.res = make([][]float32, c.Layers+1)
	for l := range c.Layers {
		a.res[l] = save.take(N * H)
	}
	a.res[c.Layers] = dev.take(N * H)
	nLayers := c.Layers
	if m.opt.Checkpoint {
		nLayers = 1
	}
	a.layers = make([]layerActs, nLayers)
	for i := range a.layers {
		la := &a.layers[i]
		la.xn1, la.rstd1 = dev.take(N*H), dev.take(N)
		if c.qkNorm() {
			la.qpre, la.kpre = dev.take(N*Q), dev.take(N*KV)
			la.qrstd, la.krstd = dev.take(N*c.Heads), dev.take(N*c.KVHeads)
		}
		la.q, la.k, la.v = dev.take(N*Q), dev.take(N*KV), dev.take(N*KV)
		la.att = dev.take(att)
		la.y = dev.take(N * Q)
		la.h1 = dev.take(N * H)
		la.xn2, la.rstd2 = dev.take(N*H), dev.take(N)
		la.gate, la.up, la.act = dev.take(N*I), dev.take(N*I), dev.take(N*I)
	}
	a.cos, a.sin = dev.take(N*c.HeadDim/2), dev.take(N*c.HeadDim/2)
	a.xf, a.rstdf = dev.take(N*H), dev.take(N)
	a.logits = dev.take(N * c.Vocab)
	a.lseMax, a.lseLog, a.losses = dev.take(N), dev.take(N), dev.take(N)
	a.dres, a.dx, a.dln = dev.take(N*H), dev.take(N*H), dev.take(N*H)
	a.dy, a.dq = dev.take(N*Q), dev.take(N*Q)
	a.dk, a.dv = dev.take(N*KV), dev.take(N*KV)
	a.datt = dev.take(att)
	a.dfc, a.dfc2 = dev.take(N*I), dev.take(N*I)
	a.tokens, a.targets, a.positions, a.blk = a.tokens[:N], a.targets[:N], a.positions[:N], a.blk[:N]
}

// freeActs returns every activation buffer to the accountant.
func (m *Model) freeActs() {
	if m.devBuf != nil {
		m.opt.Acct.FreeF32(mem.Activations, mem.Device, m.devBuf)
		m.devBuf = nil
	}
	if m.savedBuf != nil {
		m.opt.Acct.FreeF32(mem.Activations, mem.PinnedHost, m.savedBuf)
		m.savedBuf = nil
	}
	if m.intBytes > 0 {
		m.opt.Acct.Release(mem.Activations, mem.Device, m.intBytes)
		m.intBytes = 0
	}
	m.a = acts{}
}
