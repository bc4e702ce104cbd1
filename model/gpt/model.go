package gpt

import (
	"errors"
	"fmt"
	"math"
	"runtime"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/internal/rangepool"
)

// Options are a Model's dependencies and switches.
type Options struct {
	// Gemm runs every matrix multiplication, always from the goroutine
	// that called Forward or Backward, so it may parallelise each call
	// itself. Required. (With DType BF16 the model sums its products in
	// torch's bf16 order itself: see doc.go.)
	Gemm model.Gemmer
	// Acct accounts the activations (mem.Activations) and a scratch the
	// size of the largest parameter tensor where each parameter gradient
	// is computed before it is added to the gradient buffer (mem.Temp;
	// a Backward after OverwriteGrads does not use it). Required.
	Acct *mem.Accountant
	// Hooks, if set, is called at every unit boundary of both passes.
	Hooks model.UnitHooks
	// Checkpoint keeps only each block's input during forward and
	// recomputes the block's forward during backward (activation
	// checkpointing, one block per checkpoint).
	Checkpoint bool
	// CPUCheckpoint accounts the saved block inputs in the pinned-host
	// tier instead of the device (DeepSpeed's cpu_checkpointing). It
	// requires Checkpoint.
	CPUCheckpoint bool
	// DType is the dtype the model computes in. F32, the zero value,
	// computes in float32. F16 and BF16 emulate 16-bit compute: the
	// output of every op, forward and backward, is rounded to the dtype
	// (DType.Rounding; see doc.go for the list), and with BF16 the ops
	// follow torch's CPU bf16 kernels bit for bit (bf16.go). The
	// parameters must already hold values of the dtype.
	DType device.DType
	// Workers bounds the goroutines of the attention, GELU and
	// cross-entropy loops; 0 means GOMAXPROCS.
	Workers int
	// SeqParallel, when set, is this rank's sequence-parallel group
	// (DeepSpeed-Ulysses, ulysses.go): each Forward's tokens are the
	// rank's Tl consecutive tokens of sequences whose other tokens the
	// other members hold, in rank order.
	SeqParallel comm.Comm
	// Fast selects the fast float32 path (fast.go): attention as GEMMs,
	// float32 exp and tanh, fused bias passes, the element-wise layers
	// on the pool. Its losses stay within 1e-5 relative of the exact
	// path's; it is ignored with a 16-bit DType (16-bit emulation keeps
	// torch's rounding) and under sequence parallelism (the Ulysses
	// attention is the exact path's).
	Fast bool
}

// passState is where a Model is between Forward and Backward.
type passState int

const (
	idle          passState = iota // no activations to use
	forwardLogits                  // Forward ran without targets: logits valid, no Backward
	forwardLoss                    // Forward ran with targets: Backward may run once
)

// Model is a GPT-2 that computes on a flat parameter buffer and
// accumulates into a flat gradient buffer of the same layout. It is not
// safe for concurrent use.
type Model struct {
	cfg    Config
	layout model.Layout
	opt    Options
	pool   *rangepool.Pool

	params, grads []float32 // bound flat buffers, layout.Numel each
	p, g          views     // named views of params and grads

	a        acts
	devBuf   []float32 // accounted activations, device tier
	savedBuf []float32 // accounted checkpointed block inputs, pinned-host tier
	intBytes int64     // accounted bytes of a.tokens and a.targets

	pgLen   int       // the largest tensor's size
	colAcc  []float64 // column sums for bias and LayerNorm parameter gradients
	rowSeen []uint64  // a bit per wte row: rows already added in encoderBackward

	// rounding is Options.DType's (nil for F32). It is called from
	// several goroutines at once on disjoint slices.
	rounding func([]float32)
	// nearest is rounding for one value (nil for F32), for the fast
	// path's fused passes, which round inside a pass over the rows.
	nearest func(float32) float32
	// bf16: Options.DType is BF16 on the exact path, and the ops that
	// torch's CPU bf16 kernels do not compute in float32 follow those
	// kernels (bf16.go).
	bf16    bool
	moments []momentStack // LayerNorm moments' cascade (bf16)
	lnAccB  []float32     // LayerNorm bias gradient, summed in bf16 (C)

	// sink hands each parameter gradient over: added to the gradient
	// buffer, or written there in the Backward after OverwriteGrads. Its
	// Scratch (the largest tensor's size, mem.Temp) is allocated at the
	// first Backward that needs it.
	sink model.GradSink

	// fast: Options.Fast (any DType) without sequence parallelism.
	// attnBlock is the row block of its causal attention GEMMs.
	fast      bool
	attnBlock int

	state passState
	drop  layerDrop // progressive layer drop (pld.go)
	jobs  jobs

	sp *ulysses // sequence parallelism; nil without
}

// New builds a model for cfg (defaults applied, then validated). Bind
// the parameter and gradient buffers before Forward.
func New(cfg Config, opt Options) (*Model, error) {
	cfg = cfg.WithDefaults()
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if opt.Gemm == nil {
		errs = append(errs, errors.New("gpt: Options.Gemm is required"))
	}
	if opt.Acct == nil {
		errs = append(errs, errors.New("gpt: Options.Acct is required"))
	}
	if opt.CPUCheckpoint && !opt.Checkpoint {
		errs = append(errs, errors.New("gpt: Options.CPUCheckpoint requires Options.Checkpoint"))
	}
	if !opt.DType.Valid() {
		errs = append(errs, fmt.Errorf("gpt: Options.DType = %v: want F32, F16 or BF16", opt.DType))
	}
	if opt.Workers < 0 {
		errs = append(errs, fmt.Errorf("gpt: Options.Workers = %d, must be >= 0", opt.Workers))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m := &Model{cfg: cfg, layout: cfg.Layout(), opt: opt, attnBlock: attnBlockDefault}
	if opt.SeqParallel != nil && opt.SeqParallel.Size() > 1 {
		var err error
		if m.sp, err = newUlysses(opt.SeqParallel, cfg); err != nil {
			return nil, err
		}
	}
	m.rounding, m.nearest = opt.DType.Rounding(), opt.DType.Nearest()
	m.fast = opt.Fast && m.sp == nil
	m.bf16 = opt.DType == device.BF16 && !m.fast
	m.sink.Round = m.rounding
	if m.layout.Numel != cfg.NumParams() {
		panic("gpt: layout and NumParams disagree")
	}
	m.colAcc = make([]float64, max(3*cfg.Dim, cfg.MLP, 2*cfg.Dim))
	m.rowSeen = make([]uint64, (cfg.Vocab+63)/64)
	if m.bf16 {
		m.moments = make([]momentStack, ceilLog2((cfg.Dim/bf16Lanes+kChunk-1)/kChunk))
		m.lnAccB = make([]float32, cfg.Dim)
	}
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

// Specs lists the parameter tensors in flat-buffer order.
func (m *Model) Specs() []model.ParamSpec { return m.layout.Specs }

// Units lists the units: embeddings, one per block, head.
func (m *Model) Units() []model.Unit { return m.layout.Units }

// NumParams is the length of the flat buffers.
func (m *Model) NumParams() int { return m.layout.Numel }

// Bind points the model at a parameter buffer and a gradient buffer, each
// NumParams long. grads may be nil for forward-only use. The model keeps
// the slices; whoever owns them may change their contents between passes
// (a ZeRO stage gathers into params in a BeforeForward hook).
func (m *Model) Bind(params, grads []float32) error {
	if len(params) != m.layout.Numel {
		return fmt.Errorf("gpt: parameter buffer has %d elements, the model %d", len(params), m.layout.Numel)
	}
	if grads != nil && len(grads) != m.layout.Numel {
		return fmt.Errorf("gpt: gradient buffer has %d elements, the model %d", len(grads), m.layout.Numel)
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
// parameter's gradient into the bound gradient buffer (all NumParams
// elements) instead of adding to it, so the owner of the buffer need not
// clear it; whatever it holds is ignored, NaN and Inf included. The
// Backwards after that one accumulate again, so a gradient-accumulation
// boundary is OverwriteGrads, then GAS Forward/Backward pairs. Without
// OverwriteGrads every Backward accumulates (+=), as before.
//
// The buffer is not touched until that Backward runs: Grads() returns the
// old contents until then. The mark is taken by the next Backward that
// starts (one that returns an error for a missing Forward or gradient
// buffer does not take it); a Backward that fails in a hook leaves the
// buffer partly written, so the owner must call OverwriteGrads (or clear
// the buffer) again. Bind keeps the mark.
//
// The result is bit-identical to clearing the buffer and accumulating,
// except for the sign of zeros: a gradient element computed as -0 stays
// -0 here, where 0 + (-0) gives +0. That is what PyTorch's AccumulateGrad
// does when .grad is None (it takes the new gradient tensor as it is),
// which is the state DeepSpeed's stage-0 fp32 engine leaves .grad in
// after each step (engine.zero_grad sets it to None).
func (m *Model) OverwriteGrads() { m.sink.OverwriteNext() }

// Params and Grads return the bound buffers.
func (m *Model) Params() []float32 { return m.params }
func (m *Model) Grads() []float32  { return m.grads }

// Close frees the activations and stops the worker goroutines.
func (m *Model) Close() {
	m.freeActs()
	if m.sp != nil {
		m.sp.free(m)
	}
	if m.sink.Scratch != nil {
		m.opt.Acct.FreeF32(mem.Temp, mem.Device, m.sink.Scratch)
		m.sink.Scratch = nil
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

// Forward runs the model on b: b.B sequences of T = len(b.Tokens)/b.B
// ids (row-major (B, T)). With b.Targets (same shape) it returns the
// cross-entropy over the positions whose target is not
// model.IgnoreIndex — their mean, or their sum over b.LossDenom when that
// is set — and keeps what Backward needs; without targets it computes
// only the logits and returns 0. The GPT's positions are 0…T−1 in every
// row: b.Positions (packing) is refused.
func (m *Model) Forward(b model.Batch) (float32, error) {
	m.state = idle
	tokens, B, targets := b.Tokens, b.B, b.Targets
	if m.params == nil {
		return 0, errors.New("gpt: Forward before Bind")
	}
	if m.pool == nil {
		return 0, errors.New("gpt: Forward after Close")
	}
	if B <= 0 || len(tokens) == 0 || len(tokens)%B != 0 {
		return 0, fmt.Errorf("gpt: %d tokens do not form B=%d sequences", len(tokens), B)
	}
	T := len(tokens) / B
	if m.globalT(T) > m.cfg.Context {
		return 0, fmt.Errorf("gpt: sequence length %d exceeds the context %d", m.globalT(T), m.cfg.Context)
	}
	if targets != nil && len(targets) != len(tokens) {
		return 0, fmt.Errorf("gpt: %d targets for %d tokens", len(targets), len(tokens))
	}
	if b.Positions != nil {
		return 0, errNoPacking
	}
	if b.LossDenom < 0 || math.IsNaN(b.LossDenom) || math.IsInf(b.LossDenom, 0) {
		return 0, fmt.Errorf("gpt: loss denominator %v: want a positive count, or 0 for the mean", b.LossDenom)
	}
	if err := checkIDs("token", tokens, m.cfg.Vocab, false); err != nil {
		return 0, err
	}
	if err := checkIDs("target", targets, m.cfg.Vocab, true); err != nil {
		return 0, err
	}
	if err := m.ensureActs(B, T); err != nil {
		return 0, err
	}
	if m.sp != nil {
		if err := m.sp.ensure(m, B, T); err != nil {
			return 0, err
		}
		m.sp.err = nil
	}
	a := &m.a
	copy(a.tokens, tokens)
	L, N := m.cfg.Layers, B*T

	if err := m.hook(model.HookBeforeForward, 0); err != nil {
		return 0, err
	}
	m.encoderForward(a.res[0], a.tokens, m.p.wte, m.p.wpe[m.posOffset()*m.cfg.Dim:], B, T)
	if err := m.hook(model.HookAfterForward, 0); err != nil {
		return 0, err
	}
	for l := range L {
		if err := m.hook(model.HookBeforeForward, 1+l); err != nil {
			return 0, err
		}
		m.blockForwardPLD(l, a.res[l], m.blockActs(l), a.res[l+1])
		if err := m.hook(model.HookAfterForward, 1+l); err != nil {
			return 0, err
		}
	}
	head := L + 1
	if err := m.hook(model.HookBeforeForward, head); err != nil {
		return 0, err
	}
	if m.fast {
		m.layernormForwardFast(a.lnf, a.lnfMean, a.lnfRstd, a.res[L], m.p.lnfw, m.p.lnfb, N)
	} else {
		m.layernormForward(a.lnf, a.lnfMean, a.lnfRstd, a.res[L], m.p.lnfw, m.p.lnfb, N)
	}
	m.matmulForward(a.logits, a.lnf, m.p.head, nil, N, m.cfg.Dim, m.cfg.Vocab)
	var loss float32
	if targets != nil {
		copy(a.targets, targets)
		a.lossDiv = lossDivisor(targets, b.LossDenom)
		if m.sp != nil && !(b.LossDenom > 0) {
			n, err := m.spSum(float32(a.lossDiv), "loss count")
			if err != nil {
				return 0, err
			}
			a.lossDiv = float64(n) // the whole sequences' count
		}
		loss = m.crossentropyForward(a.losses, a.lseMax, a.lseLog, a.logits, a.targets, N, a.lossDiv)
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
	if targets != nil {
		m.state = forwardLoss
	} else {
		m.state = forwardLogits
	}
	return loss, nil
}

// Backward accumulates into the gradient buffer the gradient of
// dlossScale × the last Forward's loss (an engine passes 1/GAS, times the
// loss scale under fp16), or writes it there when OverwriteGrads was
// called since the last Backward. It consumes the forward's activations:
// a second Backward needs a new Forward. When a hook fails part way the
// gradient buffer is left partly updated.
func (m *Model) Backward(dlossScale float32) error {
	switch {
	case m.state != forwardLoss:
		return errors.New("gpt: Backward without a Forward with targets")
	case m.grads == nil:
		return errors.New("gpt: Backward without a gradient buffer (Bind(params, nil))")
	}
	m.state = idle
	overwriting := m.sink.Begin()
	// The fresh-gradient scratch (gradOut) is needed to accumulate, and
	// for a tied wte, which already holds the head's gradient; a model that
	// only ever overwrites its gradients never allocates it.
	if !overwriting || m.cfg.Tied {
		if err := m.gradScratch(); err != nil {
			m.sink.Abort()
			return err
		}
	}
	defer m.sink.End()
	a := &m.a
	B, T, L := a.B, a.T, m.cfg.Layers
	N, C, V := B*T, m.cfg.Dim, m.cfg.Vocab

	head := L + 1
	if err := m.hook(model.HookBeforeBackward, head); err != nil {
		return err
	}
	var d float32 // the loss gradient per position that takes a loss
	if a.lossDiv > 0 {
		d = dlossScale / float32(a.lossDiv)
	}
	m.crossentropyBackward(a.logits, a.lseMax, a.lseLog, a.targets, d, N)
	m.matmulBackward(a.dln, m.g.head, nil, a.logits, a.lnf, m.p.head, N, C, V)
	if m.fast {
		m.layernormBackwardFast(a.dres, false, m.g.lnfw, m.g.lnfb, a.dln, a.res[L], m.p.lnfw, a.lnfMean, a.lnfRstd, N)
	} else {
		m.layernormBackward(a.dres, m.g.lnfw, m.g.lnfb, a.dln, a.res[L], m.p.lnfw, a.lnfMean, a.lnfRstd, N)
	}
	if err := m.hook(model.HookAfterBackward, head); err != nil {
		return err
	}
	for l := L - 1; l >= 0; l-- {
		if err := m.hook(model.HookBeforeBackward, 1+l); err != nil {
			return err
		}
		if m.opt.Checkpoint {
			m.blockForwardPLD(l, a.res[l], m.blockActs(l), nil) // recompute
		}
		m.blockBackwardPLD(l, a.res[l], m.blockActs(l), a.dres)
		if err := m.hook(model.HookAfterBackward, 1+l); err != nil {
			return err
		}
	}
	if err := m.hook(model.HookBeforeBackward, 0); err != nil {
		return err
	}
	m.encoderBackward(m.g.wte, m.wpeGrad(), a.dres, a.tokens, B, T)
	return m.hook(model.HookAfterBackward, 0)
}

// gradScratch allocates the fresh-gradient scratch (gradOut) if it is not
// there yet.
func (m *Model) gradScratch() error {
	if m.sink.Scratch != nil {
		return nil
	}
	pg, err := m.opt.Acct.F32(mem.Temp, mem.Device, m.pgLen)
	if err != nil {
		return fmt.Errorf("gpt: gradient scratch: %w", err)
	}
	m.sink.Scratch = pg
	return nil
}

// blockActs is block l's activation set.
func (m *Model) blockActs(l int) *blockActs {
	if m.opt.Checkpoint {
		return &m.a.blocks[0]
	}
	return &m.a.blocks[l]
}

// blockForward runs block l on x (B, T, C) into out:
//
//	res2 = x + attn.proj(attention(attn.qkv(ln1(x))))
//	out  = res2 + mlp.proj(gelu(mlp.fc(ln2(res2))))
//
// With out == nil it stops after the GELU: what a recompute needs.
func (m *Model) blockForward(l int, x []float32, ba *blockActs, out []float32) {
	if m.fast {
		m.blockForwardFast(l, x, ba, out)
		return
	}
	p := &m.p.blocks[l]
	B, T := m.a.B, m.a.T
	N, C, M := B*T, m.cfg.Dim, m.cfg.MLP
	m.layernormForward(ba.ln1, ba.ln1Mean, ba.ln1Rstd, x, p.ln1w, p.ln1b, N)
	m.matmulForward(ba.qkv, ba.ln1, p.qkvw, p.qkvb, N, C, 3*C)
	m.attentionForward(ba.atty, ba.att, ba.qkv, m.a.dx, B, T) // dx is free in any forward
	m.matmulForward(ba.res2, ba.atty, p.attprojw, p.attprojb, N, C, C)
	m.residualForward(ba.res2, x, ba.res2)
	m.layernormForward(ba.ln2, ba.ln2Mean, ba.ln2Rstd, ba.res2, p.ln2w, p.ln2b, N)
	m.matmulForward(ba.fch, ba.ln2, p.fcw, p.fcb, N, C, M)
	m.geluForward(ba.fchGelu, ba.fch)
	if out != nil {
		m.matmulForward(out, ba.fchGelu, p.fcprojw, p.fcprojb, N, M, C)
		m.residualForward(out, ba.res2, out)
	}
}

// blockBackward is blockForward's mirror: dres holds d(out) on entry and
// d(x) on return; block l's parameter gradients are accumulated.
func (m *Model) blockBackward(l int, x []float32, ba *blockActs, dres []float32) {
	if m.fast {
		m.blockBackwardFast(l, x, ba, dres)
		return
	}
	p, g, a := &m.p.blocks[l], &m.g.blocks[l], &m.a
	B, T := a.B, a.T
	N, C, M := B*T, m.cfg.Dim, m.cfg.MLP
	m.matmulBackward(a.dfch, g.fcprojw, g.fcprojb, dres, ba.fchGelu, p.fcprojw, N, M, C)
	m.geluBackward(a.dfch, ba.fch, a.dfch)
	m.matmulBackward(a.dln, g.fcw, g.fcb, a.dfch, ba.ln2, p.fcw, N, C, M)
	m.layernormBackward(a.dx, g.ln2w, g.ln2b, a.dln, ba.res2, p.ln2w, ba.ln2Mean, ba.ln2Rstd, N)
	m.residualBackward(dres, a.dx) // dres = d(res2)
	m.matmulBackward(a.datty, g.attprojw, g.attprojb, dres, ba.atty, p.attprojw, N, C, C)
	m.attentionBackward(a.dqkv, a.datt, a.datty, ba.qkv, ba.att, a.dx, B, T) // dx is written next
	m.matmulBackward(a.dln, g.qkvw, g.qkvb, a.dqkv, ba.ln1, p.qkvw, N, C, 3*C)
	m.layernormBackward(a.dx, g.ln1w, g.ln1b, a.dln, x, p.ln1w, ba.ln1Mean, ba.ln1Rstd, N)
	m.residualBackward(dres, a.dx) // dres = d(x)
}

// checkIDs reports the first id outside [0, vocab) (model.IgnoreIndex
// allowed when ignore is set).
func checkIDs(what string, ids []int32, vocab int, ignore bool) error {
	for i, id := range ids {
		if ignore && id == model.IgnoreIndex {
			continue
		}
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("gpt: %s %d at position %d is outside the vocabulary [0, %d)", what, id, i, vocab)
		}
	}
	return nil
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
		return fmt.Errorf("gpt: %w", err)
	}
	return nil
}
