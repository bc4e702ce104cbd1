package llama

import (
	"errors"
	"fmt"
	"math"
	"runtime"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/internal/rangepool"
)

// Options are a Model's dependencies and switches.
type Options struct {
	// Gemm runs every matrix product. The Linear layers call it from the
	// goroutine that called Forward or Backward (it may parallelise each
	// call itself); the attention calls it from Workers goroutines at once,
	// one GEMM per (batch row, head), so it must be safe for concurrent
	// use, as package blas's engines are. Required.
	Gemm model.Gemmer
	// Acct accounts the activations (mem.Activations) and a scratch the
	// size of the largest parameter tensor where each parameter gradient
	// is computed before it is added to the gradient buffer (mem.Temp).
	// Required.
	Acct *mem.Accountant
	// Hooks, if set, is called at every unit boundary of both passes.
	Hooks model.UnitHooks
	// Checkpoint keeps only each decoder layer's input during forward and
	// recomputes the layer's forward during backward (activation
	// checkpointing, one layer per checkpoint).
	Checkpoint bool
	// CPUCheckpoint accounts the saved layer inputs in the pinned-host tier
	// instead of the device (DeepSpeed's cpu_checkpointing). It requires
	// Checkpoint.
	CPUCheckpoint bool
	// Round, if set, emulates 16-bit compute (half.RoundBF16,
	// half.RoundF16): every op reads 16-bit values, computes in float32
	// and rounds its output once, the contract of a GPU's 16-bit kernels
	// (see doc.go for the list). The bound parameters must already hold
	// 16-bit values. It is called from several goroutines at once on
	// disjoint slices.
	Round func([]float32)
	// Workers bounds the goroutines of the attention, SwiGLU and
	// cross-entropy loops; 0 means GOMAXPROCS. With a Gemm that runs each
	// call on several threads itself (OpenBLAS with threads > 1), 1 runs
	// the attention's small GEMMs one at a time on all of them, which
	// BenchmarkStep measured faster than several at once on 2 cores.
	Workers int
	// SeqParallel, when set, is this rank's sequence-parallel group
	// (DeepSpeed-Ulysses, ulysses.go): each Forward's tokens are the
	// rank's T/sp consecutive tokens of sequences whose other tokens the
	// other members hold, in rank order.
	SeqParallel comm.Comm
}

// passState is where a Model is between Forward and Backward.
type passState int

const (
	idle          passState = iota // no activations to use
	forwardLogits                  // Forward ran without targets: logits valid, no Backward
	forwardLoss                    // Forward ran with targets: Backward may run once
)

// Model is a Llama-family decoder that computes on a flat parameter
// buffer and accumulates into a flat gradient buffer of the same layout.
// It implements model.Model and is not safe for concurrent use.
type Model struct {
	cfg    Config
	layout model.Layout
	opt    Options
	pool   *rangepool.Pool

	invFreq []float32 // (D/2) the rotary inverse frequencies
	ropeMul float64   // attention scaling of cos and sin (yarn), else 1

	params, grads []float32
	p, g          views

	a        acts
	devBuf   []float32 // accounted activations, device tier
	savedBuf []float32 // accounted checkpointed layer inputs, pinned-host tier
	intBytes int64     // accounted bytes of the int32 buffers

	// tiedGrad (V, H) holds a tied head's gradient of embed_tokens while
	// the layers run backward, until the embedding's gradient is added to
	// it and the sum to the accumulated gradient, as autograd sums the
	// two uses before AccumulateGrad (mem.Temp; only when accumulating).
	tiedGrad []float32
	pgLen    int       // the largest tensor's size
	colAcc   []float64 // column sums for bias and norm weight gradients
	rowSeen  []uint64  // a bit per embedding row: rows already added in embeddingBackward

	// sink hands each parameter gradient over: added to the gradient
	// buffer, or written there in the Backward after OverwriteGrads. Its
	// Scratch is a parameter's fresh gradient (mem.Temp), allocated at the first Backward that needs it.
	sink model.GradSink

	state passState
	jobs  struct {
		attn   attnShape
		swiglu swigluJob
		ce     ceRows
	}

	sp *ulysses // sequence parallelism; nil without
}

var _ model.Model = (*Model)(nil)

// New builds a model for cfg (defaults applied, then validated). Bind
// the parameter and gradient buffers before Forward.
func New(cfg Config, opt Options) (*Model, error) {
	cfg = cfg.WithDefaults()
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if opt.Gemm == nil {
		errs = append(errs, errors.New("llama: Options.Gemm is required"))
	}
	if opt.Acct == nil {
		errs = append(errs, errors.New("llama: Options.Acct is required"))
	}
	if opt.CPUCheckpoint && !opt.Checkpoint {
		errs = append(errs, errors.New("llama: Options.CPUCheckpoint requires Options.Checkpoint"))
	}
	if opt.Workers < 0 {
		errs = append(errs, fmt.Errorf("llama: Options.Workers = %d, must be >= 0", opt.Workers))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m := &Model{cfg: cfg, layout: cfg.Layout(), opt: opt}
	if opt.SeqParallel != nil && opt.SeqParallel.Size() > 1 {
		var err error
		if m.sp, err = newUlysses(opt.SeqParallel, cfg); err != nil {
			return nil, err
		}
	}
	m.sink.Round = opt.Round
	if m.layout.Numel != cfg.NumParams() {
		panic("llama: layout and NumParams disagree")
	}
	m.invFreq, m.ropeMul = cfg.InvFreq()
	m.colAcc = make([]float64, max(cfg.Hidden, cfg.Intermediate, cfg.qDim()))
	m.rowSeen = make([]uint64, (cfg.Vocab+63)/64)
	for _, s := range m.layout.Specs {
		m.pgLen = max(m.pgLen, s.Numel)
	}
	w := opt.Workers
	if w == 0 {
		w = runtime.GOMAXPROCS(0)
	}
	m.pool = rangepool.New(w)
	return m, nil
}

// Config is the model's configuration (defaults applied).
func (m *Model) Config() Config { return m.cfg }

// Layout is the flat-buffer layout.
func (m *Model) Layout() *model.Layout { return &m.layout }

// NumParams is the length of the flat buffers.
func (m *Model) NumParams() int { return m.layout.Numel }

// Bind points the model at a parameter buffer and a gradient buffer, each
// NumParams long; grads may be nil for forward-only use. The model keeps
// the slices; whoever owns them may change their contents between passes
// (a ZeRO stage gathers into params in a BeforeForward hook).
func (m *Model) Bind(params, grads []float32) error {
	if len(params) != m.layout.Numel {
		return fmt.Errorf("llama: parameter buffer has %d elements, the model %d", len(params), m.layout.Numel)
	}
	if grads != nil && len(grads) != m.layout.Numel {
		return fmt.Errorf("llama: gradient buffer has %d elements, the model %d", len(grads), m.layout.Numel)
	}
	m.params, m.grads = params, grads
	m.p.cut(&m.layout, m.cfg, params)
	if grads != nil {
		m.g.cut(&m.layout, m.cfg, grads)
	} else {
		m.g = views{}
	}
	return nil
}

// OverwriteGrads declares the gradient buffer logically zero, like
// PyTorch's zero_grad(set_to_none=True): the next Backward writes every
// parameter's gradient instead of adding it, whatever the buffer held
// (NaN included), and the Backwards after it accumulate again. The
// result is bit-identical to clearing the buffer and accumulating except
// that a gradient computed as -0 stays -0. Bind keeps the mark.
func (m *Model) OverwriteGrads() { m.sink.OverwriteNext() }

// Params and Grads return the bound buffers.
func (m *Model) Params() []float32 { return m.params }
func (m *Model) Grads() []float32  { return m.grads }

// Close frees the activations and scratch and stops the workers.
func (m *Model) Close() {
	m.freeActs()
	if m.sp != nil {
		m.sp.free(m)
	}
	for _, p := range []*[]float32{&m.sink.Scratch, &m.tiedGrad} {
		if *p != nil {
			m.opt.Acct.FreeF32(mem.Temp, mem.Device, *p)
			*p = nil
		}
	}
	if m.pool != nil {
		m.pool.Close()
		m.pool = nil
	}
	m.state = idle
}

// Logits returns the (B, T, V) logits of the last Forward; valid until
// Backward, which overwrites them with their gradient.
func (m *Model) Logits() []float32 {
	if m.state == idle {
		return nil
	}
	return m.a.logits
}

// Forward runs the model on one micro-batch of b.B rows of T =
// len(b.Tokens)/b.B tokens. With targets it returns the cross-entropy
// summed over the positions whose target is not model.IgnoreIndex,
// divided by their count or by b.LossDenom when that is positive, and
// keeps what Backward needs; with nil targets it computes the logits and
// returns 0. A micro-batch whose targets are all ignored has loss 0 and
// zero gradients (where PyTorch's mean gives NaN). b.Positions, when set,
// are the RoPE position ids, and attention stays within each run of
// consecutive positions (packing).
func (m *Model) Forward(b model.Batch) (float32, error) {
	m.state = idle
	if err := m.checkBatch(b); err != nil {
		return 0, err
	}
	B, T := b.B, len(b.Tokens)/b.B
	if err := m.ensureActs(B, T); err != nil {
		return 0, err
	}
	a := &m.a
	N, L := B*T, m.cfg.Layers
	copy(a.tokens, b.Tokens)
	maxPos := int32(T - 1)
	if m.sp != nil {
		if err := m.sp.ensure(m, B, T); err != nil {
			return 0, err
		}
		m.sp.err = nil
		var err error
		if maxPos, err = m.spPositions(b); err != nil {
			return 0, err
		}
	} else if b.Positions != nil {
		copy(a.positions, b.Positions)
		maxPos = 0
		for _, p := range b.Positions {
			maxPos = max(maxPos, p)
		}
	} else {
		for r := range B {
			for t := range T {
				a.positions[r*T+t] = int32(t)
			}
		}
	}
	if err := m.cfg.checkRopePositions(maxPos); err != nil {
		return 0, err
	}
	if m.sp == nil {
		blockStarts(a.blk, a.positions, B, T)
	}
	ropeTables(a.cos, a.sin, m.invFreq, m.ropeMul, a.positions, m.opt.Round)

	if err := m.hook(model.HookBeforeForward, 0); err != nil {
		return 0, err
	}
	embeddingForward(a.res[0], m.p.embed, a.tokens, m.cfg.Hidden)
	if err := m.hook(model.HookAfterForward, 0); err != nil {
		return 0, err
	}
	for l := range L {
		if err := m.hook(model.HookBeforeForward, 1+l); err != nil {
			return 0, err
		}
		m.layerForward(l, a.res[l], m.layerActs(l), a.res[l+1])
		if err := m.hook(model.HookAfterForward, 1+l); err != nil {
			return 0, err
		}
	}
	head := L + 1
	if err := m.hook(model.HookBeforeForward, head); err != nil {
		return 0, err
	}
	m.rmsnorm(a.xf, a.rstdf, a.res[L], m.p.norm, N, m.cfg.Hidden)
	m.matmulForward(a.logits, a.xf, m.p.head, nil, N, m.cfg.Hidden, m.cfg.Vocab)
	var loss float32
	if b.Targets != nil {
		copy(a.targets, b.Targets)
		denom := b.LossDenom
		if m.sp != nil {
			var err error
			if denom, err = m.spLossDenom(b.Targets, denom); err != nil {
				return 0, err
			}
		}
		loss = m.crossentropyForward(denom, N)
		if m.sp != nil {
			var err error
			if loss, err = m.spSum(loss, "loss"); err != nil {
				return 0, err
			}
		}
	}
	if err := m.hook(model.HookAfterForward, head); err != nil {
		return 0, err
	}
	if b.Targets != nil {
		m.state = forwardLoss
	} else {
		m.state = forwardLogits
	}
	return loss, nil
}

// checkBatch reports what is wrong with a micro-batch before any work.
func (m *Model) checkBatch(b model.Batch) error {
	switch {
	case m.params == nil:
		return errors.New("llama: Forward before Bind")
	case m.pool == nil:
		return errors.New("llama: Forward after Close")
	case b.X != nil || b.Y != nil:
		return errors.New("llama: the batch carries dense X/Y rows; a language model reads Tokens, Targets and Positions")
	case b.B <= 0 || len(b.Tokens) == 0 || len(b.Tokens)%b.B != 0:
		return fmt.Errorf("llama: %d tokens do not form B=%d sequences", len(b.Tokens), b.B)
	case b.Targets != nil && len(b.Targets) != len(b.Tokens):
		return fmt.Errorf("llama: %d targets for %d tokens", len(b.Targets), len(b.Tokens))
	case b.Positions != nil && len(b.Positions) != len(b.Tokens):
		return fmt.Errorf("llama: %d positions for %d tokens", len(b.Positions), len(b.Tokens))
	case b.LossDenom < 0 || math.IsNaN(b.LossDenom) || math.IsInf(b.LossDenom, 0):
		return fmt.Errorf("llama: LossDenom = %g, must be a finite number >= 0 (0: the count of targets)", b.LossDenom)
	}
	V := m.cfg.Vocab
	for i, id := range b.Tokens {
		if id < 0 || int(id) >= V {
			return fmt.Errorf("llama: token %d at position %d is outside the vocabulary [0, %d)", id, i, V)
		}
	}
	for i, id := range b.Targets {
		if (id < 0 || int(id) >= V) && id != model.IgnoreIndex {
			return fmt.Errorf("llama: target %d at position %d is outside the vocabulary [0, %d) and is not the ignore index %d", id, i, V, model.IgnoreIndex)
		}
	}
	for i, p := range b.Positions {
		if p < 0 {
			return fmt.Errorf("llama: position id %d at position %d is negative", p, i)
		}
	}
	return nil
}

// Backward accumulates into the gradient buffer the gradient of
// dlossScale × the last Forward's loss, or writes it there when
// OverwriteGrads was called since the last Backward. It consumes the
// forward's activations: a second Backward needs a new Forward. When a
// hook fails part way the gradient buffer is left partly updated.
func (m *Model) Backward(dlossScale float32) error {
	switch {
	case m.state != forwardLoss:
		return errors.New("llama: Backward without a Forward with targets")
	case m.grads == nil:
		return errors.New("llama: Backward without a gradient buffer (Bind(params, nil))")
	}
	m.state = idle
	overwriting := m.sink.Begin()
	// The fresh-gradient scratch (gradOut) is needed to accumulate, and
	// for a tied embedding, whose lookup gradient is added to the head's.
	if !overwriting || m.cfg.Tied {
		if err := m.gradScratch(); err != nil {
			m.sink.Abort()
			return err
		}
	}
	defer m.sink.End()
	a := &m.a
	N, H, V, L := a.B*a.T, m.cfg.Hidden, m.cfg.Vocab, m.cfg.Layers

	head := L + 1
	if err := m.hook(model.HookBeforeBackward, head); err != nil {
		return err
	}
	var d float32
	if a.denom > 0 {
		d = float32(float64(dlossScale) / a.denom)
	}
	m.crossentropyBackward(d, N)
	if m.cfg.Tied && !m.sink.Overwriting() {
		// The head's gradient of embed_tokens waits in tiedGrad for the
		// embedding's (embeddingBackward).
		m.linearInputGrad(a.dln, a.logits, m.p.head, N, H, V)
		m.opt.Gemm.Sgemm(true, false, V, H, N, 1, a.logits, V, a.xf, H, 0, m.tiedGrad, H)
		m.round(m.tiedGrad)
	} else {
		m.matmulBackward(a.dln, m.g.head, nil, a.logits, a.xf, m.p.head, N, H, V)
	}
	m.rmsnormBackward(a.dres, m.g.norm, a.dln, a.res[L], m.p.norm, a.rstdf, N, H)
	if err := m.hook(model.HookAfterBackward, head); err != nil {
		return err
	}
	for l := L - 1; l >= 0; l-- {
		if err := m.hook(model.HookBeforeBackward, 1+l); err != nil {
			return err
		}
		if m.opt.Checkpoint {
			m.layerForward(l, a.res[l], m.layerActs(l), nil) // recompute
		}
		m.layerBackward(l, a.res[l], m.layerActs(l), a.dres)
		if err := m.hook(model.HookAfterBackward, 1+l); err != nil {
			return err
		}
	}
	if err := m.hook(model.HookBeforeBackward, 0); err != nil {
		return err
	}
	m.embeddingBackward(m.g.embed, a.dres, a.tokens)
	return m.hook(model.HookAfterBackward, 0)
}

// gradScratch allocates the fresh-gradient scratch, and a tied head's
// gradient when accumulating, if they are not there yet.
func (m *Model) gradScratch() error {
	if m.sink.Scratch == nil {
		pg, err := m.opt.Acct.F32(mem.Temp, mem.Device, m.pgLen)
		if err != nil {
			return fmt.Errorf("llama: gradient scratch: %w", err)
		}
		m.sink.Scratch = pg
	}
	if m.cfg.Tied && !m.sink.Overwriting() && m.tiedGrad == nil {
		tg, err := m.opt.Acct.F32(mem.Temp, mem.Device, m.cfg.Vocab*m.cfg.Hidden)
		if err != nil {
			return fmt.Errorf("llama: tied head gradient: %w", err)
		}
		m.tiedGrad = tg
	}
	return nil
}

// layerActs is layer l's activation set.
func (m *Model) layerActs(l int) *layerActs {
	if m.opt.Checkpoint {
		return &m.a.layers[0]
	}
	return &m.a.layers[l]
}

// hook calls the unit hook of kind k, if any; a failing hook ends the
// pass.
func (m *Model) hook(k model.HookKind, unit int) error {
	if err := m.spTake(); err != nil {
		m.state = idle
		return err
	}
	if err := model.CallHook(m.opt.Hooks, k, &m.layout, unit); err != nil {
		m.state = idle
		return fmt.Errorf("llama: %w", err)
	}
	return nil
}
