package gpt

import (
	"context"
	"errors"
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/mem"
)

// DeepSpeed-Ulysses sequence parallelism (deepspeed/sequence/layer.py,
// DistributedAttention): the SP ranks of one group (Options.SeqParallel)
// each hold Tl = T/SP consecutive tokens of the same B sequences — rank s
// tokens s·Tl … (s+1)·Tl−1, at global positions, so the position
// embedding rows are wpe[s·Tl …]. Everything but the attention is
// row-wise and runs on the local tokens. Around the attention two
// all-to-alls swap the sharding from tokens to heads and back
// (_SeqAllToAll):
//
//	qkv (B, Tl, 3, NH, HS) --seq2head--> (B, T, 3, NH/SP, HS)   all T tokens, heads [s·NH/SP, (s+1)·NH/SP)
//	attention on NH/SP heads over all T tokens: y (B, T, NH/SP, HS)
//	y --head2seq--> atty (B, Tl, NH, HS)
//
// Backward is the mirror: d(atty) goes through seq2head, the attention's
// backward gives d(qkv) for the local heads over all tokens, head2seq
// brings it back to the local tokens. The two exchanges are permutations,
// each the other's inverse, so their backward is exchanging the
// gradients the other way (and per (b, h) the attention computes exactly
// what one rank computes for that head).
//
// Loss: each rank's Forward takes the cross-entropy summed over its
// tokens, divided by the number of targets that take a loss over the
// whole group's sequences (an all_reduce of the count; or by
// Batch.LossDenom when set), so the ranks' shares add up to the mean
// over the whole sequence; Forward returns that sum (an all_reduce of the
// shares) on every rank, and Backward differentiates the rank's share.
// The data-parallel reduction must therefore sum the SP ranks' gradients
// (DeepSpeed's ZeRO divides by dp_world_size/sequence_parallel_size).

// ulysses is one rank's sequence-parallel state.
type ulysses struct {
	c          comm.Comm
	size, rank int

	// Activations for (B, Tl), in one accounted allocation.
	B, Tl int
	buf   []float32
	qkv   [][]float32 // per block (1 with checkpointing): (B, T, 3·C/SP) q | k | v of the local heads
	att   [][]float32 // per block: (B, NH/SP, T, T) softmax probabilities
	y     []float32   // (B, T, C/SP) attention output of the local heads; in backward its gradient
	dqkv  []float32   // (B, T, 3·C/SP)
	datt  []float32   // (B, NH/SP, T, T)
	tr    []float32   // (B, NH/SP, HS, T) transposes
	send  []float32   // (B·Tl·3C) exchange buffers
	recv  []float32
	// gather is the all_to_all's all_gather scratch where the
	// communicator has no native all_to_all (mem.Comm).
	gather []float32
	small  []float32 // the loss count, then the loss share, all-reduced

	err error // the first failed exchange of this pass
}

func newUlysses(c comm.Comm, cfg Config) (*ulysses, error) {
	n := c.Size()
	if cfg.Heads%n != 0 {
		return nil, fmt.Errorf("gpt: sequence parallelism over %d ranks needs the attention heads (%d) divisible by it: use a sequence_parallel_size that divides %d", n, cfg.Heads, cfg.Heads)
	}
	return &ulysses{c: c, size: n, rank: c.Rank(), small: make([]float32, 1)}, nil
}

// CheckSeqParallel reports why the GPT cannot run Ulysses with sp ranks
// per sequence of T tokens: the heads and T must be divisible by sp.
func (c Config) CheckSeqParallel(sp, T int) error {
	c = c.WithDefaults()
	var errs []error
	if c.Heads%sp != 0 {
		errs = append(errs, fmt.Errorf("sequence_parallel_size %d does not divide the GPT's %d attention heads (Ulysses shards the heads): use a sequence_parallel_size that divides %d", sp, c.Heads, c.Heads))
	}
	if T%sp != 0 {
		errs = append(errs, fmt.Errorf("sequence_parallel_size %d does not divide the sequence length %d (each rank holds T/sp tokens): use a sequence length that is a multiple of %d", sp, T, sp))
	}
	return errors.Join(errs...)
}

// posOffset is the global position of this rank's first token.
func (m *Model) posOffset() int {
	if m.sp == nil {
		return 0
	}
	return m.sp.rank * m.a.T
}

// globalT is the length of the whole sequence of which the rank holds T
// tokens.
func (m *Model) globalT(T int) int {
	if m.sp == nil {
		return T
	}
	return T * m.sp.size
}

// wpeGrad is the gradient view encoderBackward writes the local
// positions' rows from: wpe's rows from posOffset on. After
// OverwriteGrads the rows before it are this Backward's zeros.
func (m *Model) wpeGrad() []float32 {
	off := m.posOffset() * m.cfg.Dim
	if off > 0 && m.sink.Overwriting() {
		clear(m.g.wpe[:off])
	}
	return m.g.wpe[off:]
}

// spTake returns and clears the pass's failed exchange.
func (m *Model) spTake() error {
	if m.sp == nil || m.sp.err == nil {
		return nil
	}
	err := m.sp.err
	m.sp.err = nil
	return err
}

// ensure makes the SP activations fit (B, Tl).
func (u *ulysses) ensure(m *Model, B, Tl int) error {
	if u.B == B && u.Tl == Tl {
		return nil
	}
	u.free(m)
	c := m.cfg
	T, Cl, NHl := Tl*u.size, c.Dim/u.size, c.Heads/u.size
	nb := c.Layers
	if m.opt.Checkpoint {
		nb = 1
	}
	qkv, att, y := B*T*3*Cl, B*NHl*T*T, B*T*Cl
	ex := B * Tl * 3 * c.Dim
	total := nb*(qkv+att) + y + qkv + att + y + 2*ex
	buf, err := m.opt.Acct.F32(mem.Activations, mem.Device, total)
	if err != nil {
		return fmt.Errorf("gpt: sequence-parallel activations for B=%d T=%d: %w", B, T, err)
	}
	s := &slab{buf: buf}
	u.buf, u.B, u.Tl = buf, B, Tl
	u.qkv, u.att = make([][]float32, nb), make([][]float32, nb)
	for i := range nb {
		u.qkv[i], u.att[i] = s.take(qkv), s.take(att)
	}
	u.y, u.dqkv, u.datt, u.tr = s.take(y), s.take(qkv), s.take(att), s.take(y)
	u.send, u.recv = s.take(ex), s.take(ex)
	if n := comm.AllToAllScratch(u.c, ex); n > 0 {
		if u.gather, err = m.opt.Acct.F32(mem.Comm, mem.Device, n); err != nil {
			u.free(m)
			return fmt.Errorf("gpt: sequence-parallel all_to_all scratch for B=%d T=%d: %w", B, T, err)
		}
	}
	return nil
}

func (u *ulysses) free(m *Model) {
	if u.gather != nil {
		m.opt.Acct.FreeF32(mem.Comm, mem.Device, u.gather)
	}
	if u.buf != nil {
		m.opt.Acct.FreeF32(mem.Activations, mem.Device, u.buf)
	}
	*u = ulysses{c: u.c, size: u.size, rank: u.rank, small: u.small}
}

// exchange is the all_to_all of the first n elements of send into recv;
// after a failure it does nothing until the pass reports it (m.hook).
func (u *ulysses) exchange(n int) {
	if u.err != nil {
		return
	}
	if err := comm.AllToAll(context.Background(), u.c, comm.F32(u.recv[:n]), comm.F32(u.send[:n]), comm.F32(u.gather)); err != nil {
		u.err = fmt.Errorf("gpt: sequence-parallel all_to_all (rank %d of %d): %w", u.rank, u.size, err)
	}
}

// seq2head turns src (B, Tl, P·C), this rank's tokens of all heads, into
// dst (B, T, P·C/SP), all tokens of this rank's heads (P = 3 for q | k |
// v, 1 for an attention output).
func (u *ulysses) seq2head(dst, src []float32, C, P int) {
	B, Tl, n := u.B, u.Tl, u.size
	Cl := C / n
	blk := B * Tl * P * Cl
	for j := range n { // block j: rank j's heads of my tokens
		o := u.send[j*blk:]
		for bt := range B * Tl {
			for p := range P {
				copy(o[(bt*P+p)*Cl:][:Cl], src[bt*P*C+p*C+j*Cl:][:Cl])
			}
		}
	}
	u.exchange(n * blk)
	T := Tl * n
	for i := range n { // block i: rank i's tokens of my heads
		in := u.recv[i*blk:]
		for b := range B {
			for t := range Tl {
				copy(dst[(b*T+i*Tl+t)*P*Cl:][:P*Cl], in[(b*Tl+t)*P*Cl:][:P*Cl])
			}
		}
	}
}

// head2seq is seq2head's inverse: src (B, T, P·C/SP) into dst (B, Tl, P·C).
func (u *ulysses) head2seq(dst, src []float32, C, P int) {
	B, Tl, n := u.B, u.Tl, u.size
	Cl := C / n
	blk := B * Tl * P * Cl
	T := Tl * n
	for j := range n { // block j: rank j's tokens of my heads
		o := u.send[j*blk:]
		for b := range B {
			for t := range Tl {
				copy(o[(b*Tl+t)*P*Cl:][:P*Cl], src[(b*T+j*Tl+t)*P*Cl:][:P*Cl])
			}
		}
	}
	u.exchange(n * blk)
	for i := range n { // block i: rank i's heads of my tokens
		in := u.recv[i*blk:]
		for bt := range B * Tl {
			for p := range P {
				copy(dst[bt*P*C+p*C+i*Cl:][:Cl], in[(bt*P+p)*Cl:][:Cl])
			}
		}
	}
}

// spShape is the attention's shape on this rank's heads over all tokens.
func (m *Model) spShape() attnShape {
	u := m.sp
	return attnShape{T: u.Tl * u.size, C: m.cfg.Dim / u.size, NH: m.cfg.Heads / u.size, scratch: u.tr, round: m.rounding, bf16: m.bf16}
}

// blockOf is the index of the activation set whose qkv this is (the
// block, or 0 with checkpointing): the SP activations of the same index
// go with it. Every caller of the attention (blockForward, the layer-drop
// and other variants of it) passes a set's own qkv.
func (m *Model) blockOf(qkv []float32) int {
	for i := range m.a.blocks {
		if &m.a.blocks[i].qkv[0] == &qkv[0] {
			return i
		}
	}
	panic("gpt: the attention's qkv is no block's")
}

// spAttentionForward is attentionForward under sequence parallelism for
// activation set i: qkv (B, Tl, 3C) in, out (B, Tl, C).
func (m *Model) spAttentionForward(i int, out, qkv []float32) {
	u, C := m.sp, m.cfg.Dim
	u.seq2head(u.qkv[i], qkv, C, 3)
	sh := m.spShape()
	m.jobs.attn = attnJob{out: u.y, att: u.att[i], qkv: u.qkv[i], attnShape: sh}
	m.pool.Run(u.B*sh.NH, 1, &m.jobs.attn)
	m.jobs.attn = attnJob{}
	u.head2seq(out, u.y, C, 1)
}

// spAttentionBackward is attentionBackward under sequence parallelism for
// activation set i: dout (B, Tl, C) in, dqkv (B, Tl, 3C) out.
func (m *Model) spAttentionBackward(i int, dqkv, dout []float32) {
	u, C := m.sp, m.cfg.Dim
	u.seq2head(u.y, dout, C, 1)
	sh := m.spShape()
	m.jobs.attnB = attnBackJob{dqkv: u.dqkv, datt: u.datt, dout: u.y, qkv: u.qkv[i], att: u.att[i], attnShape: sh}
	m.pool.Run(u.B*sh.NH, 1, &m.jobs.attnB)
	m.jobs.attnB = attnBackJob{}
	u.head2seq(dqkv, u.dqkv, C, 3)
}

// spSum all-reduces x over the SP group (the loss count and the loss
// shares).
func (m *Model) spSum(x float32, what string) (float32, error) {
	u := m.sp
	u.small[0] = x
	if err := u.c.AllReduce(context.Background(), comm.F32(u.small), comm.Sum).Wait(); err != nil {
		return 0, fmt.Errorf("gpt: sequence-parallel all_reduce of the %s (rank %d of %d): %w", what, u.rank, u.size, err)
	}
	return u.small[0], nil
}

// attElems is the size of each block's attention probabilities (and of
// their gradient) in the plain activation sets: B·NH·T², or none under
// sequence parallelism, whose attention keeps its own (ensure).
func (m *Model) attElems(B, T int) int {
	if m.sp != nil {
		return 0
	}
	return B * m.cfg.Heads * T * T
}
