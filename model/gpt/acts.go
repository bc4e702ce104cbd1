package gpt

import (
	"fmt"

	"github.com/dszero/dszero/mem"
)

// blockActs are what one block's backward needs from its forward. Without
// activation checkpointing the model keeps one per block; with it, one
// that every block's forward (and recompute) writes into.
type blockActs struct {
	ln1     []float32 // (B, T, C) LayerNorm 1 output
	ln1Mean []float32 // (B, T)
	ln1Rstd []float32 // (B, T)
	qkv     []float32 // (B, T, 3C) q | k | v, head h at columns h*HS..h*HS+HS-1 of each
	att     []float32 // (B, NH, T, T) softmax probabilities, zero above the diagonal
	atty    []float32 // (B, T, C) attention output, heads side by side, before the projection
	res2    []float32 // (B, T, C) residual stream after attention: x + proj(atty)
	ln2     []float32 // (B, T, C) LayerNorm 2 output
	ln2Mean []float32 // (B, T)
	ln2Rstd []float32 // (B, T)
	fch     []float32 // (B, T, M) MLP pre-activation
	fchGelu []float32 // (B, T, M) MLP activation
}

// acts holds every activation of one (B, T) and the backward scratch.
type acts struct {
	B, T int

	// res[l] is block l's input, res[L] the last block's output (ln_f's
	// input). res[0] is the embedding output. With checkpointing these
	// are all that is kept of the blocks, res[0..L-1] in the save tier.
	res    [][]float32 // L+1 of (B, T, C)
	blocks []blockActs // L, or 1 with checkpointing

	lnf     []float32 // (B, T, C) final LayerNorm output
	lnfMean []float32 // (B, T)
	lnfRstd []float32 // (B, T)
	logits  []float32 // (B, T, V); Backward turns it into dlogits in place
	lseMax  []float32 // (B, T) max of each logits row
	lseLog  []float32 // (B, T) log(sum(exp(logits - max))) of each row
	losses  []float32 // (B, T) per-position cross-entropy

	// Backward scratch, shared by all blocks.
	dres  []float32 // (B, T, C) gradient of the residual stream
	dx    []float32 // (B, T, C) LayerNorm input gradient before it joins dres
	dln   []float32 // (B, T, C) LayerNorm output gradient
	datty []float32 // (B, T, C)
	dqkv  []float32 // (B, T, 3C)
	dfch  []float32 // (B, T, M) gradient of fchGelu, then of fch (in place)
	datt  []float32 // (B, NH, T, T) gradient of the pre-softmax scores

	tokens  []int32 // (B, T) copy of the forward's input
	targets []int32 // (B, T) copy of the forward's targets
	lossDiv float64 // what the forward divided the summed losses by (crossentropyForward)
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

// actSizes returns the floats needed on the device and in the save tier
// (the checkpointed block inputs) for a (B, T) step.
func (m *Model) actSizes(B, T int) (device, saved int) {
	c := m.cfg
	N, C, M := B*T, c.Dim, c.MLP
	att := m.attElems(B, T)
	block := N*C*4 + N*3*C + 4*N + 2*N*M + att // ln1 atty res2 ln2, qkv, stats, fch fchGelu, att
	nBlocks := c.Layers
	if m.opt.Checkpoint {
		nBlocks = 1
	}
	device = nBlocks*block +
		N*C + // res[L]
		N*C + 2*N + N*c.Vocab + 3*N + // lnf, stats, logits, lse, losses
		4*N*C + 3*N*C + N*M + att // dres dx dln datty, dqkv, dfch, datt
	saved = c.Layers * N * C // res[0..L-1]
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
			return fmt.Errorf("gpt: activations for B=%d T=%d: %w", B, T, err)
		}
		if saved > 0 {
			if m.savedBuf, err = m.opt.Acct.F32(mem.Activations, mem.PinnedHost, saved); err != nil {
				m.freeActs()
				return fmt.Errorf("gpt: checkpointed block inputs for B=%d T=%d: %w", B, T, err)
			}
		}
		if err := m.opt.Acct.Reserve(mem.Activations, mem.Device, int64(8*B*T)); err != nil {
			m.freeActs()
			return fmt.Errorf("gpt: token buffers for B=%d T=%d: %w", B, T, err)
		}
		m.intBytes = int64(8 * B * T)
		m.a.tokens = make([]int32, B*T)
		m.a.targets = make([]int32, B*T)
	}
	m.carve(B, T)
	return nil
}

// carve points the activation views into the held buffers for (B, T).
func (m *Model) carve(B, T int) {
	c := m.cfg
	N, C, M := B*T, c.Dim, c.MLP
	att := m.attElems(B, T)
	dev := &slab{buf: m.devBuf}
	save := dev
	if m.opt.CPUCheckpoint {
		save = &slab{buf: m.savedBuf}
	}
	a := &m.a
	a.B, a.T = B, T
	a.res = make([][]float32, c.Layers+1)
	for l := range c.Layers {
		a.res[l] = save.take(N * C)
	}
	a.res[c.Layers] = dev.take(N * C)
	nBlocks := c.Layers
	if m.opt.Checkpoint {
		nBlocks = 1
	}
	a.blocks = make([]blockActs, nBlocks)
	for i := range a.blocks {
		b := &a.blocks[i]
		b.ln1, b.ln1Mean, b.ln1Rstd = dev.take(N*C), dev.take(N), dev.take(N)
		b.qkv = dev.take(N * 3 * C)
		b.att = dev.take(att)
		b.atty = dev.take(N * C)
		b.res2 = dev.take(N * C)
		b.ln2, b.ln2Mean, b.ln2Rstd = dev.take(N*C), dev.take(N), dev.take(N)
		b.fch, b.fchGelu = dev.take(N*M), dev.take(N*M)
	}
	a.lnf, a.lnfMean, a.lnfRstd = dev.take(N*C), dev.take(N), dev.take(N)
	a.logits = dev.take(N * c.Vocab)
	a.lseMax, a.lseLog, a.losses = dev.take(N), dev.take(N), dev.take(N)
	a.dres, a.dx, a.dln, a.datty = dev.take(N*C), dev.take(N*C), dev.take(N*C), dev.take(N*C)
	a.dqkv = dev.take(N * 3 * C)
	a.dfch = dev.take(N * M)
	a.datt = dev.take(att)
	a.tokens, a.targets = a.tokens[:N], a.targets[:N]
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
