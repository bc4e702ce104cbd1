package llama

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
)

// DeepSpeed-Ulysses sequence parallelism (deepspeed/sequence/layer.py;
// the GQA rule of Arctic's UlyssesSPAttentionHF, DeepSpeed ≥ 0.17). The
// sp ranks of a group (Options.SeqParallel) each hold Tl = T/sp
// consecutive tokens of the same B sequences, rank s tokens s·Tl …, with
// their global positions for RoPE. Everything but the attention is
// row-wise on the local tokens. The attention exchanges tokens for heads
// (all_to_all) before and back after:
//
//	q (B, Tl, nH·D)  → (B, T, nH/sp·D)   query heads [s·nH/sp, (s+1)·nH/sp)
//	k, v (B, Tl, nKV·D) → (B, T, nKVl·D) kv heads from ⌊s·nKV/sp⌋, nKVl of them
//	y (B, T, nH/sp·D) → (B, Tl, nH·D)
//
// With nKV ≥ sp each rank takes nKVl = nKV/sp kv heads (nKV divisible by
// sp); with nKV < sp (sp divisible by nKV) each kv head is replicated to
// the sp/nKV ranks whose query heads read it (nKVl = 1), and in backward
// the replicas' gradients are summed. Either way rank s's query heads
// read exactly its kv heads, with rep = nH/nKV as without sp. Backward
// mirrors the exchanges. Packed samples (positions) are all-gathered so
// that every rank sees where each sequence of the whole row starts.
//
// The loss is the mean over the whole group's sequences: the count of
// targets that take a loss is all-reduced (unless Batch.LossDenom is
// set), each rank's Backward differentiates its share, and Forward
// returns the sum of the shares on every rank.

// ulysses is one rank's sequence-parallel state.
type ulysses struct {
	c          comm.Comm
	size, rank int
	nHl, nKVl  int

	B, Tl      int
	buf        []float32
	q, k, v    [][]float32 // per layer (1 with checkpointing): the local heads over all tokens
	att        [][]float32 // per layer: (B, nHl, T, T)
	y, dq      []float32   // (B, T, nHl·D); y holds dy in backward
	dk, dv     []float32   // (B, T, nKVl·D)
	datt       []float32   // (B, nHl, T, T)
	send, recv []float32
	gather     []float32 // the all_to_all's all_gather scratch without a native one (mem.Comm)
	pos        []float32 // (sp·B·Tl) all-gathered positions
	mine       []float32 // (B·Tl) this rank's positions
	blk        []int32   // (B·T) block starts over the whole rows
	gpos       []int32   // (B·T) the whole rows' positions
	small      []float32

	err error
}

// CheckSeqParallel reports why the decoder cannot run Ulysses with sp
// ranks per sequence of T tokens.
func (c Config) CheckSeqParallel(sp, T int) error {
	c = c.WithDefaults()
	var errs []error
	if c.Heads%sp != 0 {
		errs = append(errs, fmt.Errorf("sequence_parallel_size %d does not divide the %d attention heads (Ulysses shards the heads): use a sequence_parallel_size that divides %d", sp, c.Heads, c.Heads))
	}
	if c.KVHeads%sp != 0 && sp%c.KVHeads != 0 {
		errs = append(errs, fmt.Errorf("sequence_parallel_size %d and the %d key/value heads: one must divide the other (kv heads are split across the ranks, or replicated when fewer)", sp, c.KVHeads))
	}
	if T%sp != 0 {
		errs = append(errs, fmt.Errorf("sequence_parallel_size %d does not divide the sequence length %d (each rank holds T/sp tokens): use a sequence length that is a multiple of %d", sp, T, sp))
	}
	return errors.Join(errs...)
}

func newUlysses(c comm.Comm, cfg Config) (*ulysses, error) {
	n := c.Size()
	if err := cfg.CheckSeqParallel(n, n); err != nil {
		return nil, fmt.Errorf("llama: sequence parallelism over %d ranks: %w", n, err)
	}
	return &ulysses{c: c, size: n, rank: c.Rank(), nHl: cfg.Heads / n, nKVl: max(1, cfg.KVHeads/n), small: make([]float32, 1)}, nil
}

// kvFirst is the first kv head rank j attends with.
func (u *ulysses) kvFirst(cfg *Config, j int) int { return j * cfg.KVHeads / u.size }

func (u *ulysses) ensure(m *Model, B, Tl int) error {
	if u.B == B && u.Tl == Tl {
		return nil
	}
	u.free(m)
	c := &m.cfg
	T, D := Tl*u.size, c.HeadDim
	nl := c.Layers
	if m.opt.Checkpoint {
		nl = 1
	}
	q, kv, att := B*T*u.nHl*D, B*T*u.nKVl*D, B*u.nHl*T*T
	ex := B * Tl * u.size * max(u.nHl, u.nKVl) * D
	total := nl*(q+2*kv+att) + 2*q + 2*kv + att + 2*ex + (u.size+1)*B*Tl
	buf, err := m.opt.Acct.F32(mem.Activations, mem.Device, total)
	if err != nil {
		return fmt.Errorf("llama: sequence-parallel activations for B=%d T=%d: %w", B, T, err)
	}
	if err := m.opt.Acct.Reserve(mem.Activations, mem.Device, int64(8*B*T)); err != nil {
		m.opt.Acct.FreeF32(mem.Activations, mem.Device, buf)
		return fmt.Errorf("llama: sequence-parallel block starts for B=%d T=%d: %w", B, T, err)
	}
	all := buf
	take := func(n int) []float32 {
		v := buf[:n:n]
		buf = buf[n:]
		return v
	}
	u.buf = all
	u.B, u.Tl = B, Tl
	u.q, u.k, u.v, u.att = make([][]float32, nl), make([][]float32, nl), make([][]float32, nl), make([][]float32, nl)
	for i := range nl {
		u.q[i], u.k[i], u.v[i], u.att[i] = take(q), take(kv), take(kv), take(att)
	}
	u.y, u.dq, u.dk, u.dv, u.datt = take(q), take(q), take(kv), take(kv), take(att)
	u.send, u.recv = take(ex), take(ex)
	u.pos, u.mine = take(u.size*B*Tl), take(B*Tl)
	u.blk, u.gpos = make([]int32, B*T), make([]int32, B*T)
	if n := comm.AllToAllScratch(u.c, ex); n > 0 {
		if u.gather, err = m.opt.Acct.F32(mem.Comm, mem.Device, n); err != nil {
			u.free(m)
			return fmt.Errorf("llama: sequence-parallel all_to_all scratch for B=%d T=%d: %w", B, T, err)
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
		m.opt.Acct.Release(mem.Activations, mem.Device, int64(8*u.B*u.Tl*u.size))
	}
	*u = ulysses{c: u.c, size: u.size, rank: u.rank, nHl: u.nHl, nKVl: u.nKVl, small: u.small}
}

func (u *ulysses) exchange(n int) {
	if u.err != nil {
		return
	}
	if err := comm.AllToAll(context.Background(), u.c, comm.F32(u.recv[:n]), comm.F32(u.send[:n]), comm.F32(u.gather)); err != nil {
		u.err = fmt.Errorf("llama: sequence-parallel all_to_all (rank %d of %d): %w", u.rank, u.size, err)
	}
}

// seq2head turns src (B, Tl, W) of this rank's tokens into dst (B, T,
// cnt·D): rank j gets columns [first(j)·D, (first(j)+cnt)·D) of every
// token.
func (u *ulysses) seq2head(dst, src []float32, W, D, cnt int, first func(j int) int) {
	B, Tl, n := u.B, u.Tl, u.size
	w := cnt * D
	blk := B * Tl * w
	for j := range n {
		o, c0 := u.send[j*blk:], first(j)*D
		for bt := range B * Tl {
			copy(o[bt*w:][:w], src[bt*W+c0:][:w])
		}
	}
	u.exchange(n * blk)
	T := Tl * n
	for i := range n {
		in := u.recv[i*blk:]
		for b := range B {
			copy(dst[(b*T+i*Tl)*w:][:Tl*w], in[b*Tl*w:][:Tl*w])
		}
	}
}

// head2seq is seq2head's mirror: src (B, T, cnt·D) of this rank's heads
// back to dst (B, Tl, W), the blocks of rank i into columns
// [first(i)·D, …). With add the blocks are summed into dst, cleared first
// (replicated kv heads' gradients).
func (u *ulysses) head2seq(dst, src []float32, W, D, cnt int, first func(j int) int, add bool) {
	B, Tl, n := u.B, u.Tl, u.size
	w := cnt * D
	blk := B * Tl * w
	T := Tl * n
	for j := range n {
		o := u.send[j*blk:]
		for b := range B {
			copy(o[b*Tl*w:][:Tl*w], src[(b*T+j*Tl)*w:][:Tl*w])
		}
	}
	u.exchange(n * blk)
	if add {
		clear(dst[:B*Tl*W])
	}
	for i := range n {
		in, c0 := u.recv[i*blk:], first(i)*D
		for bt := range B * Tl {
			d, s := dst[bt*W+c0:][:w], in[bt*w:][:w]
			if add {
				for x, v := range s {
					d[x] += v
				}
			} else {
				copy(d, s)
			}
		}
	}
}

// spPositions fills the local positions (global ones without packing)
// and the block starts of the whole rows.
func (m *Model) spPositions(b model.Batch) (maxPos int32, err error) {
	u, a := m.sp, &m.a
	B, Tl := u.B, u.Tl
	T := Tl * u.size
	if b.Positions == nil {
		for r := range B {
			for t := range Tl {
				a.positions[r*Tl+t] = int32(u.rank*Tl + t)
			}
		}
		clear(u.blk)
		return int32(T - 1), nil
	}
	copy(a.positions, b.Positions)
	for i, p := range b.Positions {
		if p >= 1<<24 {
			return 0, fmt.Errorf("llama: position id %d at position %d: sequence parallelism exchanges positions below 2^24", p, i)
		}
		u.mine[i] = float32(p)
	}
	if err := u.c.AllGather(context.Background(), comm.F32(u.pos), comm.F32(u.mine)).Wait(); err != nil {
		return 0, fmt.Errorf("llama: sequence-parallel all_gather of the positions (rank %d of %d): %w", u.rank, u.size, err)
	}
	for i := range u.size {
		for r := range B {
			for t := range Tl {
				p := int32(u.pos[(i*B+r)*Tl+t])
				u.gpos[r*T+i*Tl+t] = p
				maxPos = max(maxPos, p)
			}
		}
	}
	blockStarts(u.blk, u.gpos, B, T)
	return maxPos, nil
}

// spAttention is attention under sequence parallelism.
func (m *Model) spAttention(l int, la *layerActs, forward bool) {
	c, a, u := &m.cfg, &m.a, m.sp
	i := l
	if m.opt.Checkpoint {
		i = 0
	}
	D, Q, KV := c.HeadDim, c.qDim(), c.kvDim()
	qFirst := func(j int) int { return j * u.nHl }
	kvFirst := func(j int) int { return u.kvFirst(c, j) }
	T := u.Tl * u.size
	s := &m.jobs.attn
	*s = attnShape{
		gemm: m.opt.Gemm, T: T, nH: u.nHl, nKV: u.nKVl, D: D,
		window: c.Window(l), blk: u.blk, scale: float32(1 / math.Sqrt(float64(D))), round: m.opt.Round,
		attSize: T * T, qStride: u.nHl * D, kvStride: u.nKVl * D, rep: u.nHl / u.nKVl,
		q: u.q[i], k: u.k[i], v: u.v[i], att: u.att[i], forward: forward,
	}
	if forward {
		u.seq2head(u.q[i], la.q, Q, D, u.nHl, qFirst)
		u.seq2head(u.k[i], la.k, KV, D, u.nKVl, kvFirst)
		u.seq2head(u.v[i], la.v, KV, D, u.nKVl, kvFirst)
		s.y = u.y
		m.pool.Run(u.B*u.nKVl, 1, s)
		*s = attnShape{}
		u.head2seq(la.y, u.y, Q, D, u.nHl, qFirst, false)
		return
	}
	u.seq2head(u.y, a.dy, Q, D, u.nHl, qFirst)
	s.y, s.dq, s.dk, s.dv, s.datt = u.y, u.dq, u.dk, u.dv, u.datt
	m.pool.Run(u.B*u.nKVl, 1, s)
	*s = attnShape{}
	replicated := c.KVHeads < u.size
	u.head2seq(a.dq, u.dq, Q, D, u.nHl, qFirst, false)
	u.head2seq(a.dk, u.dk, KV, D, u.nKVl, kvFirst, replicated)
	u.head2seq(a.dv, u.dv, KV, D, u.nKVl, kvFirst, replicated)
}

// spSum all-reduces x over the group.
func (m *Model) spSum(x float32, what string) (float32, error) {
	u := m.sp
	u.small[0] = x
	if err := u.c.AllReduce(context.Background(), comm.F32(u.small), comm.Sum).Wait(); err != nil {
		return 0, fmt.Errorf("llama: sequence-parallel all_reduce of the %s (rank %d of %d): %w", what, u.rank, u.size, err)
	}
	return u.small[0], nil
}

// spLossDenom is the group's count of targets that take a loss, or
// denom when set.
func (m *Model) spLossDenom(targets []int32, denom float64) (float64, error) {
	if denom > 0 {
		return denom, nil
	}
	n := 0
	for _, t := range targets {
		if t != model.IgnoreIndex {
			n++
		}
	}
	s, err := m.spSum(float32(n), "loss count")
	return float64(s), err
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
