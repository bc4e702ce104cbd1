package mlp

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
)

// Config is the shape of an MLP.
type Config struct {
	// Sizes are the layer widths: input, hidden..., output. Layer i
	// (fc{i+1}) maps Sizes[i] to Sizes[i+1]; a ReLU follows every layer
	// but the last.
	Sizes []int
}

var presets = map[string]Config{
	"tiny": {Sizes: []int{16, 64, 64, 8}}, // the harness's TinyMLP
}

// Preset returns the named configuration.
func Preset(name string) (Config, error) {
	c, ok := presets[name]
	if !ok {
		names := make([]string, 0, len(presets))
		for n := range presets {
			names = append(names, n)
		}
		slices.Sort(names)
		return Config{}, fmt.Errorf("mlp: unknown preset %q (known: %s)", name, strings.Join(names, ", "))
	}
	return Config{Sizes: slices.Clone(c.Sizes)}, nil
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if len(c.Sizes) < 2 {
		errs = append(errs, fmt.Errorf("mlp: Sizes %v needs an input and an output width", c.Sizes))
	}
	for i, s := range c.Sizes {
		if s <= 0 {
			errs = append(errs, fmt.Errorf("mlp: Sizes[%d] = %d, must be > 0", i, s))
		}
	}
	return errors.Join(errs...)
}

// Layers is the number of Linear layers.
func (c Config) Layers() int { return len(c.Sizes) - 1 }

// Layout returns the flat-buffer layout: unit fc{i} holds fc{i}.weight
// (out, in) and fc{i}.bias (out), both initialised U(-1/√in, 1/√in) like
// torch.nn.Linear. c must be valid.
func (c Config) Layout() model.Layout {
	var b model.LayoutBuilder
	for i := range c.Layers() {
		in, out := c.Sizes[i], c.Sizes[i+1]
		init := model.Init{Kind: model.InitUniform, Scale: 1 / math.Sqrt(float64(in))}
		name := fmt.Sprintf("fc%d", i+1)
		b.Unit(name)
		b.Param(name+".weight", init, out, in)
		b.Param(name+".bias", init, out)
	}
	return b.Build()
}

// Options are a Model's dependencies and switches.
type Options struct {
	Gemm  model.Gemmer    // required
	Acct  *mem.Accountant // required: activations (mem.Activations) and the gradient scratch (mem.Temp)
	Hooks model.UnitHooks // optional, called around every layer in both passes
	Round func([]float32) // optional 16-bit compute emulation (see doc.go)
}

// layer is one Linear's views into the flat buffers.
type layer struct {
	in, out int
	w, b    []float32 // (out, in), (out)
	dw, db  []float32 // same, in the gradient buffer
}

// Model is an MLP on a flat parameter buffer. Not safe for concurrent use.
type Model struct {
	cfg    Config
	layout model.Layout
	opt    Options

	params, grads []float32
	layers        []layer

	// Activations of the last Forward, for its batch size.
	batch  int
	buf    []float32   // accounted activations
	x      []float32   // (B, In) the input (rounded with Round)
	h      [][]float32 // per layer (B, out): post-ReLU outputs; the last is the model output
	diff   []float32   // (B, Out) out - y
	dh     [][]float32 // per layer (B, out): gradient scratch
	colAcc []float64

	ready bool // a Forward with targets ran and Backward has not

	// sink hands each parameter gradient over: added to the gradient
	// buffer, or written there in the Backward after OverwriteGrads. Its
	// Scratch is a parameter's fresh gradient (mem.Temp).
	sink model.GradSink
}

// New builds a model; Bind the buffers before Forward.
func New(cfg Config, opt Options) (*Model, error) {
	cfg = Config{Sizes: slices.Clone(cfg.Sizes)}
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if opt.Gemm == nil {
		errs = append(errs, errors.New("mlp: Options.Gemm is required"))
	}
	if opt.Acct == nil {
		errs = append(errs, errors.New("mlp: Options.Acct is required"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m := &Model{cfg: cfg, layout: cfg.Layout(), opt: opt}
	m.sink.Round = opt.Round
	largest := 0
	for _, s := range m.layout.Specs {
		largest = max(largest, s.Numel)
	}
	var err error
	if m.sink.Scratch, err = opt.Acct.F32(mem.Temp, mem.Device, largest); err != nil {
		return nil, fmt.Errorf("mlp: gradient scratch: %w", err)
	}
	m.colAcc = make([]float64, slices.Max(cfg.Sizes))
	return m, nil
}

// Config is the model's configuration.
func (m *Model) Config() Config { return Config{Sizes: slices.Clone(m.cfg.Sizes)} }

// Layout is the flat-buffer layout.
func (m *Model) Layout() *model.Layout { return &m.layout }

// Specs lists the parameter tensors in flat-buffer order.
func (m *Model) Specs() []model.ParamSpec { return m.layout.Specs }

// Units lists the units, one per layer.
func (m *Model) Units() []model.Unit { return m.layout.Units }

// NumParams is the length of the flat buffers.
func (m *Model) NumParams() int { return m.layout.Numel }

// OverwriteGrads declares the gradient buffer logically zero, like
// PyTorch's zero_grad(set_to_none=True): the next Backward writes every
// parameter's gradient into the bound gradient buffer instead of adding
// to it, so the owner need not clear it; whatever it holds is ignored,
// NaN and Inf included. The Backwards after that one accumulate again.
// Without OverwriteGrads every Backward accumulates (+=).
//
// The buffer is not touched until that Backward runs. The mark is taken
// by the next Backward that starts (one that returns an error for a
// missing Forward or gradient buffer does not take it); a Backward that
// fails in a hook leaves the buffer partly written, so the owner must
// call OverwriteGrads (or clear the buffer) again. Bind keeps the mark.
//
// The result is bit-identical to clearing the buffer and accumulating,
// except that a gradient element computed as -0 stays -0 (0 + (-0) gives
// +0), as PyTorch's AccumulateGrad keeps it when .grad is None.
func (m *Model) OverwriteGrads() { m.sink.OverwriteNext() }

// Params and Grads return the bound buffers.
func (m *Model) Params() []float32 { return m.params }
func (m *Model) Grads() []float32  { return m.grads }

// Bind points the model at a parameter buffer and a gradient buffer
// (nil for forward-only use), each NumParams long.
func (m *Model) Bind(params, grads []float32) error {
	n := m.layout.Numel
	if len(params) != n {
		return fmt.Errorf("mlp: parameter buffer has %d elements, the model %d", len(params), n)
	}
	if grads != nil && len(grads) != n {
		return fmt.Errorf("mlp: gradient buffer has %d elements, the model %d", len(grads), n)
	}
	m.params, m.grads = params, grads
	m.layers = make([]layer, m.cfg.Layers())
	for i := range m.layers {
		L := &m.layers[i]
		L.in, L.out = m.cfg.Sizes[i], m.cfg.Sizes[i+1]
		L.w, L.b = m.layout.View(params, 2*i), m.layout.View(params, 2*i+1)
		if grads != nil {
			L.dw, L.db = m.layout.View(grads, 2*i), m.layout.View(grads, 2*i+1)
		}
	}
	return nil
}

// Close frees the activations and the gradient scratch.
func (m *Model) Close() {
	m.freeActs()
	if m.sink.Scratch != nil {
		m.opt.Acct.FreeF32(mem.Temp, mem.Device, m.sink.Scratch)
		m.sink.Scratch = nil
	}
	m.ready = false
}

func (m *Model) freeActs() {
	if m.buf != nil {
		m.opt.Acct.FreeF32(mem.Activations, mem.Device, m.buf)
		m.buf = nil
	}
	m.batch = 0
}

// ensureActs carves the activations of batch B, allocating only when the
// held buffer is too small.
func (m *Model) ensureActs(B int) error {
	if m.batch == B {
		return nil
	}
	sizes := m.cfg.Sizes
	n := B * sizes[0]
	for _, s := range sizes[1:] {
		n += 2 * B * s // h, dh
	}
	n += B * sizes[len(sizes)-1] // diff
	if len(m.buf) < n {
		m.freeActs()
		var err error
		if m.buf, err = m.opt.Acct.F32(mem.Activations, mem.Device, n); err != nil {
			return fmt.Errorf("mlp: activations for B=%d: %w", B, err)
		}
	}
	off := 0
	take := func(k int) []float32 {
		s := m.buf[off : off+k : off+k]
		off += k
		return s
	}
	m.batch = B
	m.x = take(B * sizes[0])
	m.h, m.dh = make([][]float32, len(sizes)-1), make([][]float32, len(sizes)-1)
	for i, s := range sizes[1:] {
		m.h[i], m.dh[i] = take(B*s), take(B*s)
	}
	m.diff = take(B * sizes[len(sizes)-1])
	return nil
}

func (m *Model) round(s []float32) {
	if m.opt.Round != nil {
		m.opt.Round(s)
	}
}

// Forward runs the model on b.X (B, In). With b.Y (B, Out) it returns the
// mean squared error and keeps what Backward needs; with nil b.Y it
// returns 0 and the output is in Output. The MLP takes dense vectors
// only: token fields in b are an error.
func (m *Model) Forward(b model.Batch) (float32, error) {
	m.ready = false
	x, B, y := b.X, b.B, b.Y
	in, out := m.cfg.Sizes[0], m.cfg.Sizes[len(m.cfg.Sizes)-1]
	switch {
	case b.Tokens != nil || b.Targets != nil || b.Positions != nil || b.LossDenom != 0:
		return 0, errors.New("mlp: the MLP takes dense vectors (Batch.X, Batch.Y), not tokens")
	case m.params == nil:
		return 0, errors.New("mlp: Forward before Bind")
	case m.sink.Scratch == nil:
		return 0, errors.New("mlp: Forward after Close")
	case B <= 0 || len(x) != B*in:
		return 0, fmt.Errorf("mlp: input has %d values, want B=%d × %d", len(x), B, in)
	case y != nil && len(y) != B*out:
		return 0, fmt.Errorf("mlp: targets have %d values, want B=%d × %d", len(y), B, out)
	}
	if err := m.ensureActs(B); err != nil {
		return 0, err
	}
	copy(m.x, x)
	m.round(m.x)
	inp := m.x
	for i := range m.layers {
		if err := m.hook(model.HookBeforeForward, i); err != nil {
			return 0, err
		}
		L := &m.layers[i]
		m.linearForward(m.h[i], inp, L.w, L.b, B, L.in, L.out)
		if i < len(m.layers)-1 {
			for j, v := range m.h[i] {
				m.h[i][j] = max(v, 0) // ReLU; exact, needs no rounding
			}
		}
		inp = m.h[i]
		if err := m.hook(model.HookAfterForward, i); err != nil {
			return 0, err
		}
	}
	if y == nil {
		return 0, nil
	}
	// mse_loss: mean((out - y)²), out and y in float32.
	var sum float64
	for j, v := range inp {
		d := v - y[j]
		m.diff[j] = d
		sum += float64(d * d)
	}
	m.ready = true
	return float32(sum / float64(len(inp))), nil
}

// Output is the (B, Out) output of the last Forward.
func (m *Model) Output() []float32 {
	if m.batch == 0 {
		return nil
	}
	return m.h[len(m.h)-1]
}

// Backward accumulates into the gradient buffer the gradient of
// dlossScale × the last Forward's loss, or writes it there when
// OverwriteGrads was called since the last Backward; it consumes that
// Forward. When a hook fails part way the gradient buffer is left partly
// updated.
func (m *Model) Backward(dlossScale float32) error {
	switch {
	case !m.ready:
		return errors.New("mlp: Backward without a Forward with targets")
	case m.grads == nil:
		return errors.New("mlp: Backward without a gradient buffer (Bind(params, nil))")
	}
	m.ready = false
	m.sink.Begin()
	defer m.sink.End()
	B, last := m.batch, len(m.layers)-1
	// d(out) = ((out - y) · 2/n) · dlossScale, PyTorch's mse_loss_backward.
	norm := float32(2 / float64(len(m.diff)))
	dout := m.dh[last]
	for j, d := range m.diff {
		dout[j] = d * norm * dlossScale
	}
	for i := last; i >= 0; i-- {
		if err := m.hook(model.HookBeforeBackward, i); err != nil {
			return err
		}
		L := &m.layers[i]
		if i < last {
			for j, h := range m.h[i] {
				if h <= 0 {
					m.dh[i][j] = 0 // ReLU backward: the gradient passes where the output is > 0
				}
			}
		}
		inp, dinp := m.x, []float32(nil)
		if i > 0 {
			inp, dinp = m.h[i-1], m.dh[i-1]
		}
		m.linearBackward(dinp, L.dw, L.db, m.dh[i], inp, L.w, B, L.in, L.out)
		if err := m.hook(model.HookAfterBackward, i); err != nil {
			return err
		}
	}
	return nil
}

// hook calls the unit hook of kind k, if any; a failing hook consumes the
// Forward.
func (m *Model) hook(k model.HookKind, unit int) error {
	if err := model.CallHook(m.opt.Hooks, k, &m.layout, unit); err != nil {
		m.ready = false
		return fmt.Errorf("mlp: %w", err)
	}
	return nil
}

// linearForward: out (N, OC) = inp (N, IC) · wᵀ + bias, torch addmm's
// order (bias copied in, then one GEMM with beta = 1).
func (m *Model) linearForward(out, inp, w, bias []float32, N, IC, OC int) {
	for r := range N {
		copy(out[r*OC:][:OC], bias)
	}
	m.opt.Gemm.Sgemm(false, true, N, OC, IC, 1, inp, IC, w, IC, 1, out, OC)
	m.round(out)
}

// linearBackward: dinp = dout · w (skipped when dinp is nil, for the
// input layer); dw += doutᵀ · inp; db += Σ_rows dout. Each parameter
// gradient is computed whole (the weight's with one GEMM, beta = 0) in a
// scratch and then added, like PyTorch's AccumulateGrad; after
// OverwriteGrads it is computed straight into dw and db.
func (m *Model) linearBackward(dinp, dw, db, dout, inp, w []float32, N, IC, OC int) {
	if dinp != nil {
		m.opt.Gemm.Sgemm(false, false, N, IC, OC, 1, dout, OC, w, IC, 0, dinp, IC)
		m.round(dinp)
	}
	g := m.gradOut(dw)
	m.opt.Gemm.Sgemm(true, false, OC, IC, N, 1, dout, OC, inp, IC, 0, g, IC)
	m.gradCommit(dw, g)
	acc := m.colAcc[:OC]
	clear(acc)
	for r := range N {
		for j, v := range dout[r*OC:][:OC] {
			acc[j] += float64(v)
		}
	}
	g = m.gradOut(db)
	for j, s := range acc {
		g[j] = float32(s)
	}
	m.gradCommit(db, g)
}

// gradOut and gradCommit are the model.GradSink protocol.
func (m *Model) gradOut(grad []float32) []float32 { return m.sink.Out(grad) }
func (m *Model) gradCommit(grad, fresh []float32) { m.sink.Commit(grad, fresh) }
