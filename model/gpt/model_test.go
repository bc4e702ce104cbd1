package gpt

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/internal/modeltest"
)

func TestPresets(t *testing.T) {
	// Parameter counts of OpenAI's GPT-2 checkpoints (tied head); tiny is
	// the harness's models.json total.
	want := map[string]int{
		"tiny":        110336,
		"gpt2":        124439808,
		"gpt2-medium": 354823168,
		"gpt2-large":  774030080,
		"gpt2-xl":     1557611200,
	}
	for _, name := range PresetNames() {
		cfg, err := Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		l := cfg.Layout()
		if l.Numel != cfg.NumParams() {
			t.Errorf("%s: layout has %d elements, NumParams %d", name, l.Numel, cfg.NumParams())
		}
		if n, ok := want[name]; ok && cfg.NumParams() != n {
			t.Errorf("%s: %d parameters, want %d", name, cfg.NumParams(), n)
		}
	}
	if _, err := Preset("gpt3"); err == nil || !strings.Contains(err.Error(), "gpt2-medium") {
		t.Errorf("unknown preset error %v should list the known ones", err)
	}
}

func TestConfigValidateCollectsAll(t *testing.T) {
	err := Config{Vocab: 0, Context: 8, Dim: 10, Heads: 3, Layers: -1}.WithDefaults().Validate()
	for _, s := range []string{"Vocab = 0", "Layers = -1", "Dim = 10 is not a multiple of Heads = 3"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("Validate() = %v, want it to mention %q", err, s)
		}
	}
}

func TestUnits(t *testing.T) {
	for _, tied := range []bool{false, true} {
		cfg := Config{Vocab: 10, Context: 4, Dim: 8, Heads: 2, Layers: 3, Tied: tied}.WithDefaults()
		l := cfg.Layout()
		var names []string
		next := 0
		for i, u := range l.Units {
			names = append(names, u.Name)
			if u.Offset != next || u.First > u.Last {
				t.Errorf("unit %d %+v is not contiguous after %d", i, u, next)
			}
			for p := u.First; p <= u.Last; p++ {
				if l.Specs[p].Unit != i {
					t.Errorf("%s is in unit %d, Specs says %d", l.Specs[p].Name, i, l.Specs[p].Unit)
				}
			}
			next = u.Offset + u.Numel
		}
		want := []string{"embeddings", "blocks.0", "blocks.1", "blocks.2", "head"}
		if d := cmp.Diff(want, names); d != "" || next != l.Numel {
			t.Errorf("tied=%v units (-want +got):\n%s (end %d of %d)", tied, d, next, l.Numel)
		}
		head := l.Units[len(l.Units)-1]
		var borrows []int
		if tied {
			borrows = []int{0}
		}
		if !slices.Equal(head.Borrows, borrows) {
			t.Errorf("tied=%v: head borrows %v, want %v", tied, head.Borrows, borrows)
		}
	}
}

// step runs Forward and Backward(scale) and returns the loss.
func step(t testing.TB, m *Model, tokens, targets []int32, B int, scale float32) float32 {
	t.Helper()
	loss, err := m.Forward(model.Batch{Tokens: tokens, B: B, Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(scale); err != nil {
		t.Fatal(err)
	}
	return loss
}

func TestActivationCheckpointing(t *testing.T) {
	cfg, params := harnessTiny(t)
	idx, tgt := microBatch(harnessTokens(t), 0, 0, 0)
	const B = 4
	N, C := B*cfg.Context, cfg.Dim

	run := func(opt Options) (float32, []float32, mem.Snapshot) {
		m, acct := newTestModel(t, cfg, opt, params)
		loss := step(t, m, idx, tgt, B, 0.5)
		return loss, m.Grads(), acct.Snapshot()
	}
	l0, g0, s0 := run(Options{})
	l1, g1, s1 := run(Options{Checkpoint: true})
	l2, g2, s2 := run(Options{Checkpoint: true, CPUCheckpoint: true})
	if l0 != l1 || l0 != l2 {
		t.Errorf("losses %v %v %v differ", l0, l1, l2)
	}
	if !slices.Equal(g0, g1) || !slices.Equal(g0, g2) {
		t.Errorf("gradients with checkpointing are not bit-identical")
	}
	plain := s0.PeakBytes(mem.Device, mem.Activations)
	ckpt := s1.PeakBytes(mem.Device, mem.Activations)
	cpuDev, cpuHost := s2.PeakBytes(mem.Device, mem.Activations), s2.PeakBytes(mem.PinnedHost, mem.Activations)
	t.Logf("activation peak: plain %s, checkpointed %s, cpu-checkpointed %s device + %s pinned host",
		mem.FormatBytes(plain), mem.FormatBytes(ckpt), mem.FormatBytes(cpuDev), mem.FormatBytes(cpuHost))
	// Checkpointing drops L-1 blocks' activation sets.
	H, T, M := cfg.Heads, cfg.Context, cfg.MLP
	block := int64(4 * (7*N*C + 4*N + 2*N*M + B*H*T*T))
	if plain-ckpt != int64(cfg.Layers-1)*block {
		t.Errorf("checkpointing saved %d bytes, want %d (L-1 block activation sets)", plain-ckpt, int64(cfg.Layers-1)*block)
	}
	saved := int64(4 * cfg.Layers * N * C)
	if cpuHost != saved || ckpt-cpuDev != saved {
		t.Errorf("cpu checkpointing: %d bytes pinned host, device down by %d; want %d both", cpuHost, ckpt-cpuDev, saved)
	}
}

// gatherHooks emulates ZeRO stage 3 on one rank: the bound parameter
// buffer holds NaN except for the units being run (and what they
// borrow), and each unit's gradients are snapshot at its AfterBackward.
type gatherHooks struct {
	modeltest.Recorder
	l         *model.Layout
	full, buf []float32
	grads     func() []float32
	atAfter   map[int][]float32
}

func (h *gatherHooks) set(u int, gather bool) {
	for _, v := range append([]int{u}, h.l.Units[u].Borrows...) {
		dst := h.l.UnitView(h.buf, v)
		if gather {
			copy(dst, h.l.UnitView(h.full, v))
			continue
		}
		for i := range dst {
			dst[i] = float32(math.NaN())
		}
	}
}

func (h *gatherHooks) BeforeForward(u int) error  { h.set(u, true); return h.Event("BF", u) }
func (h *gatherHooks) AfterForward(u int) error   { h.set(u, false); return h.Event("AF", u) }
func (h *gatherHooks) BeforeBackward(u int) error { h.set(u, true); return h.Event("BB", u) }
func (h *gatherHooks) AfterBackward(u int) error {
	h.atAfter[u] = slices.Clone(h.l.UnitView(h.grads(), u))
	h.set(u, false)
	return h.Event("AB", u)
}

func TestHooksGatherPerUnit(t *testing.T) {
	tiny, _ := Preset("tiny")
	tied := Config{Vocab: 40, Context: 16, Dim: 32, Heads: 4, Layers: 2, Tied: true}
	for _, tc := range []struct {
		name string
		cfg  Config
		ckpt bool
	}{{"tiny", tiny, false}, {"tiny checkpointed", tiny, true}, {"tied", tied, false}, {"tied checkpointed", tied, true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg.WithDefaults()
			params := perturbedInit(cfg, 5)
			rng := rand.New(rand.NewPCG(1, 2))
			tokens, targets := randomTokens(rng, 2*cfg.Context, cfg.Vocab), randomTokens(rng, 2*cfg.Context, cfg.Vocab)
			ref, _ := newTestModel(t, cfg, Options{Checkpoint: tc.ckpt}, params)
			wantLoss := step(t, ref, tokens, targets, 2, 1)

			h := &gatherHooks{atAfter: map[int][]float32{}}
			m, _ := newTestModel(t, cfg, Options{Checkpoint: tc.ckpt, Hooks: h}, nil)
			h.l, h.full, h.buf, h.grads = m.Layout(), params, m.Params(), m.Grads
			for i := range h.buf {
				h.buf[i] = float32(math.NaN())
			}
			if loss := step(t, m, tokens, targets, 2, 1); loss != wantLoss {
				t.Errorf("loss with per-unit gathering %v, want %v", loss, wantLoss)
			}
			if !slices.Equal(m.Grads(), ref.Grads()) {
				t.Errorf("gradients with per-unit gathering differ")
			}
			for u := range m.Units() {
				if !slices.Equal(h.atAfter[u], m.Layout().UnitView(m.Grads(), u)) {
					t.Errorf("unit %d's gradients changed after its AfterBackward", u)
				}
			}
			want := []string{"BF(0)", "AF(0)", "BF(1)", "AF(1)", "BF(2)", "AF(2)", "BF(3)", "AF(3)",
				"BB(3)", "AB(3)", "BB(2)", "AB(2)", "BB(1)", "AB(1)", "BB(0)", "AB(0)"}
			if d := cmp.Diff(want, h.Log); d != "" {
				t.Errorf("hook order (-want +got):\n%s", d)
			}
		})
	}
}

func TestHookErrors(t *testing.T) {
	cfg, params := harnessTiny(t)
	idx, tgt := microBatch(harnessTokens(t), 0, 0, 0)
	for _, at := range []string{"BF(0)", "AF(2)", "BB(3)", "BB(1)", "AB(0)"} {
		h := &gatherHooks{Recorder: modeltest.Recorder{FailAt: at}, atAfter: map[int][]float32{}}
		m, _ := newTestModel(t, cfg, Options{Hooks: h}, nil)
		h.l, h.full, h.buf, h.grads = m.Layout(), params, m.Params(), m.Grads
		_, err := m.Forward(model.Batch{Tokens: idx, B: 4, Targets: tgt})
		if err == nil {
			err = m.Backward(1)
		}
		if !errors.Is(err, modeltest.ErrInjected) || !strings.Contains(err.Error(), "unit") {
			t.Errorf("failing at %s: got %v, want the injected error naming the unit", at, err)
		}
		if err := m.Backward(1); err == nil {
			t.Errorf("failing at %s: Backward after a failed pass succeeded", at)
		}
	}
}

func TestGradientAccumulationAndScale(t *testing.T) {
	cfg, params := harnessTiny(t)
	tok := harnessTokens(t)
	i0, t0 := microBatch(tok, 0, 0, 0)
	i1, t1 := microBatch(tok, 0, 1, 0)

	a, _ := newTestModel(t, cfg, Options{}, params)
	step(t, a, i0, t0, 4, 1)
	b, _ := newTestModel(t, cfg, Options{}, params)
	step(t, b, i1, t1, 4, 1)
	acc, _ := newTestModel(t, cfg, Options{}, params)
	step(t, acc, i0, t0, 4, 1)
	step(t, acc, i1, t1, 4, 1)
	sum := make([]float32, len(params))
	for i := range sum {
		sum[i] = a.Grads()[i] + b.Grads()[i]
	}
	// Each micro-step's gradient is computed whole and then added, as
	// PyTorch's AccumulateGrad does, so the accumulation is exact.
	if !slices.Equal(sum, acc.Grads()) {
		t.Errorf("accumulated gradients differ from the sum of the micro-steps' (-sum +acc):\n%s",
			cmp.Diff(sum, acc.Grads(), cmpopts.EquateApprox(1e-6, 0)))
	}

	// Scaling the loss by a power of two scales every gradient exactly.
	halved, _ := newTestModel(t, cfg, Options{}, params)
	step(t, halved, i0, t0, 4, 0.5)
	for i, g := range halved.Grads() {
		if 2*g != a.Grads()[i] {
			t.Fatalf("grad[%d] with scale 0.5 is %v, with scale 1 %v", i, g, a.Grads()[i])
		}
	}
}

// sameBitsOrZeros reports the first index where got and want differ in
// their bits, except that +0 and -0 count as the same, and how many
// zeros differ in sign.
func sameBitsOrZeros(got, want []float32) (first, signedZeros int) {
	first = -1
	for i, w := range want {
		g := got[i]
		if math.Float32bits(g) == math.Float32bits(w) {
			continue
		}
		if g == 0 && w == 0 {
			signedZeros++
			continue
		}
		if first < 0 {
			first = i
		}
	}
	return first, signedZeros
}

// TestOverwriteGrads checks that a Backward after OverwriteGrads, into a
// buffer of NaN, gives the bits of clearing the buffer and accumulating
// (zeros' signs aside), and that the Backwards after it accumulate again.
// The tied case has T < Context (wpe rows without a gradient) and the
// head's and the embedding's gradients meeting in wte.
func TestOverwriteGrads(t *testing.T) {
	tiny, _ := Preset("tiny")
	tied := Config{Vocab: 40, Context: 16, Dim: 32, Heads: 4, Layers: 2, Tied: true}
	for _, tc := range []struct {
		name string
		cfg  Config
		T    int
		opt  Options
	}{
		{"tiny", tiny, 32, Options{}},
		{"tiny checkpointed", tiny, 32, Options{Checkpoint: true}},
		{"tiny bf16", tiny, 32, Options{DType: device.BF16}},
		{"tied T<Context", tied, 11, Options{}},
		{"tied bf16", tied, 11, Options{DType: device.BF16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg.WithDefaults()
			params := perturbedInit(cfg, 3)
			if r := tc.opt.DType.Rounding(); r != nil {
				r(params)
			}
			const B = 2
			rng := rand.New(rand.NewPCG(5, 6))
			var tok, tgt [3][]int32
			for i := range tok {
				tok[i], tgt[i] = randomTokens(rng, B*tc.T, cfg.Vocab), randomTokens(rng, B*tc.T, cfg.Vocab)
			}
			ref, _ := newTestModel(t, cfg, tc.opt, params) // zeroed buffer, accumulating
			m, _ := newTestModel(t, cfg, tc.opt, params)
			check := func(what string) {
				t.Helper()
				first, signed := sameBitsOrZeros(m.Grads(), ref.Grads())
				if first >= 0 {
					t.Errorf("%s: grad[%d] = %v, clear-and-accumulate gives %v", what, first, m.Grads()[first], ref.Grads()[first])
				}
				if signed > 0 {
					t.Logf("%s: %d zeros differ in sign", what, signed)
				}
			}
			for i := range m.Grads() {
				m.Grads()[i] = float32(math.NaN())
			}
			m.OverwriteGrads()
			step(t, ref, tok[0], tgt[0], B, 0.5)
			step(t, m, tok[0], tgt[0], B, 0.5)
			check("first Backward after OverwriteGrads")
			step(t, ref, tok[1], tgt[1], B, 0.5)
			step(t, m, tok[1], tgt[1], B, 0.5)
			check("second Backward (accumulating)")

			// The next accumulation boundary: the owner clears or marks.
			clear(ref.Grads())
			m.OverwriteGrads()
			step(t, ref, tok[2], tgt[2], B, 1)
			step(t, m, tok[2], tgt[2], B, 1)
			check("after a second OverwriteGrads")
		})
	}
}

func TestShapeChanges(t *testing.T) {
	cfg, params := harnessTiny(t)
	rng := rand.New(rand.NewPCG(9, 9))
	shapes := [][2]int{{4, 32}, {2, 16}, {1, 32}, {8, 8}, {6, 32}}
	m, acct := newTestModel(t, cfg, Options{Checkpoint: true}, params)
	for _, bt := range shapes {
		B, T := bt[0], bt[1]
		tokens, targets := randomTokens(rng, B*T, cfg.Vocab), randomTokens(rng, B*T, cfg.Vocab)
		fresh, _ := newTestModel(t, cfg, Options{Checkpoint: true}, params)
		want := step(t, fresh, tokens, targets, B, 1)
		clear(m.Grads())
		if got := step(t, m, tokens, targets, B, 1); got != want {
			t.Errorf("B=%d T=%d: loss %v after other shapes, fresh model %v", B, T, got, want)
		}
		if !slices.Equal(m.Grads(), fresh.Grads()) {
			t.Errorf("B=%d T=%d: gradients differ from a fresh model's", B, T)
		}
	}
	m.Close()
	if s := acct.Snapshot(); s.LiveTotal[mem.Device] != 0 || s.LiveTotal[mem.PinnedHost] != 0 {
		t.Errorf("after Close %d device and %d host bytes are live", s.LiveTotal[mem.Device], s.LiveTotal[mem.PinnedHost])
	}
}

func TestInputErrors(t *testing.T) {
	cfg, params := harnessTiny(t)
	m, _ := newTestModel(t, cfg, Options{}, params)
	ok := make([]int32, 4*32)
	bad := slices.Clone(ok)
	bad[70] = 64
	neg := slices.Clone(ok)
	neg[3] = -1
	for _, tc := range []struct {
		name            string
		tokens, targets []int32
		B               int
		want            string
	}{
		{"token >= vocab", bad, ok, 4, "token 64 at position 70"},
		{"negative token", neg, ok, 4, "token -1 at position 3"},
		{"target >= vocab", ok, bad, 4, "target 64 at position 70"},
		{"too long", make([]int32, 2*33), make([]int32, 2*33), 2, "sequence length 33 exceeds the context 32"},
		{"B does not divide", ok, ok, 3, "128 tokens do not form B=3 sequences"},
		{"B zero", ok, ok, 0, "do not form B=0"},
		{"empty", nil, nil, 1, "0 tokens"},
		{"targets mismatch", ok, ok[:100], 4, "100 targets for 128 tokens"},
	} {
		if _, err := m.Forward(model.Batch{Tokens: tc.tokens, B: tc.B, Targets: tc.targets}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := m.Backward(1); err == nil {
		t.Error("Backward without Forward succeeded")
	}
	if _, err := m.Forward(model.Batch{Tokens: ok, B: 4}); err != nil {
		t.Fatal(err)
	}
	if len(m.Logits()) != 4*32*64 {
		t.Errorf("Logits() has %d values", len(m.Logits()))
	}
	if err := m.Backward(1); err == nil {
		t.Error("Backward after a Forward without targets succeeded")
	}
	u, err := New(cfg, Options{Gemm: modeltest.Gonum(t), Acct: mem.NewAccountant(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if _, err := u.Forward(model.Batch{Tokens: ok, B: 4, Targets: ok}); err == nil {
		t.Error("Forward before Bind succeeded")
	}
	if err := u.Bind(params[:10], nil); err == nil {
		t.Error("Bind accepted a short buffer")
	}
	if _, err := New(cfg, Options{CPUCheckpoint: true}); err == nil || !strings.Contains(err.Error(), "Gemm is required") ||
		!strings.Contains(err.Error(), "Acct is required") || !strings.Contains(err.Error(), "requires Options.Checkpoint") {
		t.Errorf("New with bad options: %v", err)
	}
}

func TestActivationOOM(t *testing.T) {
	cfg, params := harnessTiny(t)
	acct := mem.NewAccountant(0)
	acct.SetCapacity(mem.Device, 1<<20)
	m, _ := newTestModel(t, cfg, Options{Acct: acct}, params)
	_, err := m.Forward(model.Batch{Tokens: make([]int32, 16*32), B: 16, Targets: make([]int32, 16*32)})
	var oom *mem.OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("Forward over the device budget: %v, want an *mem.OOMError", err)
	}
}

func TestNoAllocationsAfterWarmup(t *testing.T) {
	for _, opt := range []Options{{}, {Checkpoint: true}, {DType: device.BF16}} {
		cfg := Config{Vocab: 32, Context: 16, Dim: 32, Heads: 4, Layers: 2}
		opt.Gemm, opt.Workers = loopGemm{}, 2
		m, _ := newTestModel(t, cfg, opt, perturbedInit(cfg.WithDefaults(), 1))
		rng := rand.New(rand.NewPCG(1, 1))
		tokens, targets := randomTokens(rng, 3*16, 32), randomTokens(rng, 3*16, 32)
		step(t, m, tokens, targets, 3, 1)
		if n := testing.AllocsPerRun(5, func() { step(t, m, tokens, targets, 3, 1) }); n != 0 {
			t.Errorf("options %+v: %v allocations per step after warm-up", opt, n)
		}
	}
}

// TestRoundedTensorsAre16Bit checks, with bf16 emulation, that the
// tensors doc.go lists as rounded hold bf16 values after a step: the
// activations the forward keeps, the backward scratch of the last block
// run (block 0) and, after one Backward into a zeroed buffer, every
// gradient.
func TestRoundedTensorsAre16Bit(t *testing.T) {
	cfg, params := harnessTiny(t)
	half.RoundBF16(params)
	idx, tgt := microBatch(harnessTokens(t), 0, 0, 0)
	m, _ := newTestModel(t, cfg, Options{DType: device.BF16}, params)
	if _, err := m.Forward(model.Batch{Tokens: idx, B: 4, Targets: tgt}); err != nil {
		t.Fatal(err)
	}
	a := &m.a
	named := map[string][]float32{"res[0]": a.res[0], "lnf": a.lnf, "logits": a.logits}
	for l := range cfg.Layers {
		ba := &a.blocks[l]
		for name, x := range map[string][]float32{"ln1": ba.ln1, "qkv": ba.qkv, "att": ba.att, "atty": ba.atty,
			"res2": ba.res2, "ln2": ba.ln2, "fch": ba.fch, "fchGelu": ba.fchGelu} {
			named[fmt.Sprintf("blocks[%d].%s", l, name)] = x
		}
		named[fmt.Sprintf("res[%d]", l+1)] = a.res[l+1]
	}
	check := func(named map[string][]float32) {
		t.Helper()
		for name, x := range named {
			for i, v := range x {
				if math.Float32bits(v)&0xffff != 0 {
					t.Errorf("%s[%d] = %v is not a bf16 value", name, i, v)
					break
				}
			}
		}
	}
	check(named)
	if err := m.Backward(1); err != nil {
		t.Fatal(err)
	}
	check(map[string][]float32{"dlogits": a.logits, "dres": a.dres, "dx": a.dx, "dln": a.dln,
		"datty": a.datty, "dqkv": a.dqkv, "dfch": a.dfch, "grads": m.Grads()})
}
