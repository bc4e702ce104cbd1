package llama

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/internal/modeltest"
)

// tinyCases are the tiny presets, which between them have every switch.
var tinyCases = []string{"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral"}

func tiny(t testing.TB, name string) Config {
	t.Helper()
	cfg, err := Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestActivationCheckpointing(t *testing.T) {
	for _, name := range tinyCases {
		t.Run(name, func(t *testing.T) {
			cfg := tiny(t, name)
			params := perturbedInit(cfg, 2)
			b := packedBatch(newRand(1), 24, cfg.Vocab, 3)
			run := func(opt Options) (float32, []float32, mem.Snapshot) {
				m, acct := newTestModel(t, cfg, opt, params)
				loss := step(t, m, b, 0.5)
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
			// Checkpointing drops L-1 layers' activation sets.
			m, _ := newTestModel(t, cfg, Options{}, nil)
			layer := int64(4 * m.layerSize(2, 24))
			if plain-ckpt != int64(cfg.Layers-1)*layer {
				t.Errorf("checkpointing saved %d bytes, want %d (L-1 layer activation sets)", plain-ckpt, int64(cfg.Layers-1)*layer)
			}
			saved := int64(4 * cfg.Layers * 2 * 24 * cfg.Hidden)
			if cpuHost != saved || ckpt-cpuDev != saved {
				t.Errorf("cpu checkpointing: %d bytes pinned host, device down by %d; want %d both", cpuHost, ckpt-cpuDev, saved)
			}
		})
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
	for _, name := range []string{"tiny-llama", "tiny-qwen3"} { // untied, tied
		for _, ckpt := range []bool{false, true} {
			cfg := tiny(t, name)
			params := perturbedInit(cfg, 5)
			b := packedBatch(newRand(2), 16, cfg.Vocab, -1)
			ref, _ := newTestModel(t, cfg, Options{Checkpoint: ckpt}, params)
			wantLoss := step(t, ref, b, 1)

			h := &gatherHooks{atAfter: map[int][]float32{}}
			m, _ := newTestModel(t, cfg, Options{Checkpoint: ckpt, Hooks: h}, nil)
			h.l, h.full, h.buf, h.grads = m.Layout(), params, m.Params(), m.Grads
			for i := range h.buf {
				h.buf[i] = float32(math.NaN())
			}
			if loss := step(t, m, b, 1); loss != wantLoss {
				t.Errorf("%s ckpt=%v: loss with per-unit gathering %v, want %v", name, ckpt, loss, wantLoss)
			}
			if !slices.Equal(m.Grads(), ref.Grads()) {
				t.Errorf("%s ckpt=%v: gradients with per-unit gathering differ", name, ckpt)
			}
			for u := range m.Layout().Units {
				if !slices.Equal(h.atAfter[u], m.Layout().UnitView(m.Grads(), u)) {
					t.Errorf("%s ckpt=%v: unit %d's gradients changed after its AfterBackward", name, ckpt, u)
				}
			}
			want := []string{"BF(0)", "AF(0)", "BF(1)", "AF(1)", "BF(2)", "AF(2)", "BF(3)", "AF(3)",
				"BB(3)", "AB(3)", "BB(2)", "AB(2)", "BB(1)", "AB(1)", "BB(0)", "AB(0)"}
			if d := cmp.Diff(want, h.Log); d != "" {
				t.Errorf("%s ckpt=%v: hook order (-want +got):\n%s", name, ckpt, d)
			}
		}
	}
}

func TestHookErrors(t *testing.T) {
	cfg := tiny(t, "tiny-qwen2")
	params := perturbedInit(cfg, 1)
	b := randomBatch(newRand(3), 2, 8, cfg.Vocab)
	for _, at := range []string{"BF(0)", "AF(2)", "BF(3)", "BB(3)", "BB(1)", "AB(0)"} {
		h := &gatherHooks{Recorder: modeltest.Recorder{FailAt: at}, atAfter: map[int][]float32{}}
		m, _ := newTestModel(t, cfg, Options{Hooks: h}, nil)
		h.l, h.full, h.buf, h.grads = m.Layout(), params, m.Params(), m.Grads
		_, err := m.Forward(b)
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
	cfg := tiny(t, "tiny-qwen3")
	params := perturbedInit(cfg, 4)
	rng := newRand(4)
	b0, b1 := randomBatch(rng, 2, 12, cfg.Vocab), packedBatch(rng, 12, cfg.Vocab, -1)
	a, _ := newTestModel(t, cfg, Options{}, params)
	step(t, a, b0, 1)
	b, _ := newTestModel(t, cfg, Options{}, params)
	step(t, b, b1, 1)
	acc, _ := newTestModel(t, cfg, Options{}, params)
	step(t, acc, b0, 1)
	step(t, acc, b1, 1)
	for i := range params {
		if s := a.Grads()[i] + b.Grads()[i]; s != acc.Grads()[i] {
			t.Fatalf("grad[%d]: accumulated %v, sum of the micro-steps %v", i, acc.Grads()[i], s)
		}
	}
	halved, _ := newTestModel(t, cfg, Options{}, params)
	step(t, halved, b0, 0.5)
	for i, g := range halved.Grads() {
		if 2*g != a.Grads()[i] {
			t.Fatalf("grad[%d] with scale 0.5 is %v, with scale 1 %v", i, g, a.Grads()[i])
		}
	}
}

// TestLossDenom: sum/LossDenom with LossDenom = 2·count is half the mean,
// and so are the gradients, exactly; a micro-batch without targets has
// loss 0 and zero gradients.
func TestLossDenom(t *testing.T) {
	cfg := tiny(t, "tiny-llama")
	params := perturbedInit(cfg, 6)
	b := packedBatch(newRand(7), 16, cfg.Vocab, -1)
	count := 0
	for _, tg := range b.Targets {
		if tg != model.IgnoreIndex {
			count++
		}
	}
	mean, _ := newTestModel(t, cfg, Options{}, params)
	lm := step(t, mean, b, 1)
	b.LossDenom = float64(2 * count)
	sum, _ := newTestModel(t, cfg, Options{}, params)
	if ls := step(t, sum, b, 1); 2*ls != lm {
		t.Errorf("loss with LossDenom = 2·count %v, mean %v", ls, lm)
	}
	for i, g := range sum.Grads() {
		if 2*g != mean.Grads()[i] {
			t.Fatalf("grad[%d] with LossDenom = 2·count %v, mean %v", i, g, mean.Grads()[i])
		}
	}
	for _, denom := range []float64{0, 10} {
		none := randomBatch(newRand(8), 2, 8, cfg.Vocab)
		for i := range none.Targets {
			none.Targets[i] = model.IgnoreIndex
		}
		none.LossDenom = denom
		m, _ := newTestModel(t, cfg, Options{}, params)
		for i := range m.Grads() {
			m.Grads()[i] = float32(math.NaN())
		}
		m.OverwriteGrads()
		if loss := step(t, m, none, 1); loss != 0 {
			t.Errorf("LossDenom %v, every target ignored: loss %v", denom, loss)
		}
		if i := slices.IndexFunc(m.Grads(), func(g float32) bool { return g != 0 }); i >= 0 {
			t.Errorf("LossDenom %v, every target ignored: grad[%d] = %v", denom, i, m.Grads()[i])
		}
	}
}

// TestPaddingRowGetsNoEmbeddingGradient: with pad_token_id set, the pad
// token's embedding row gets no gradient from the lookup (nn.Embedding's
// padding_idx), and nothing else changes.
func TestPaddingRowGetsNoEmbeddingGradient(t *testing.T) {
	cfg := tiny(t, "tiny-llama")
	params := perturbedInit(cfg, 8)
	b := packedBatch(newRand(9), 16, cfg.Vocab, 5)
	plain, _ := newTestModel(t, cfg, Options{}, params)
	lp := step(t, plain, b, 1)
	cfg.PadTokenID = ptr(5)
	padded, _ := newTestModel(t, cfg, Options{}, params)
	if l := step(t, padded, b, 1); l != lp {
		t.Errorf("padding_idx changed the loss: %v, %v", l, lp)
	}
	H := cfg.Hidden
	for i, g := range padded.Grads() {
		inPad := i >= 5*H && i < 6*H
		if inPad && g != 0 {
			t.Fatalf("padding row grad[%d] = %v", i-5*H, g)
		}
		if !inPad && g != plain.Grads()[i] {
			t.Fatalf("grad[%d] = %v, without padding_idx %v", i, g, plain.Grads()[i])
		}
	}
	if slices.Equal(plain.Grads()[5*H:6*H], make([]float32, H)) {
		t.Fatal("the batch does not exercise the padding row")
	}
}

// TestPackingIsBlockDiagonal: each sample of a packed row gets the logits
// it gets alone (position restarts keep RoPE, the mask keeps attention
// within the sample), up to float32 summation order.
func TestPackingIsBlockDiagonal(t *testing.T) {
	for _, name := range tinyCases {
		cfg := tiny(t, name)
		params := perturbedInit(cfg, 10)
		rng := newRand(11)
		lens := []int{7, 5, 9}
		var packed model.Batch
		packed.B = 1
		for _, n := range lens {
			packed.Tokens = append(packed.Tokens, randomTokens(rng, n, cfg.Vocab)...)
			for p := range n {
				packed.Positions = append(packed.Positions, int32(p))
			}
		}
		m, _ := newTestModel(t, cfg, Options{}, params)
		if _, err := m.Forward(packed); err != nil {
			t.Fatal(err)
		}
		all := slices.Clone(m.Logits())
		at := 0
		for _, n := range lens {
			alone := model.Batch{B: 1, Tokens: packed.Tokens[at : at+n]}
			if _, err := m.Forward(alone); err != nil {
				t.Fatal(err)
			}
			checkClose(t, name+" packed sample", all[at*cfg.Vocab:(at+n)*cfg.Vocab], m.Logits(), 1e-5)
			at += n
		}
	}
}

// TestDeterministicAcrossWorkers: the worker count and nil Positions
// (0…T-1) change no bit.
func TestDeterministicAcrossWorkers(t *testing.T) {
	cfg := tiny(t, "tiny-mistral")
	params := perturbedInit(cfg, 12)
	b := randomBatch(newRand(13), 3, 20, cfg.Vocab)
	one, _ := newTestModel(t, cfg, Options{Workers: 1}, params)
	l1 := step(t, one, b, 1)
	b.Positions = make([]int32, len(b.Tokens))
	for i := range b.Positions {
		b.Positions[i] = int32(i % 20)
	}
	many, _ := newTestModel(t, cfg, Options{Workers: 3}, params)
	if l3 := step(t, many, b, 1); l3 != l1 || !slices.Equal(one.Grads(), many.Grads()) {
		t.Errorf("Workers 1 and 3 differ: losses %v %v", l1, l3)
	}
}

// sameBitsOrZeros reports the first index where got and want differ in
// their bits, except that +0 and -0 count as the same.
func sameBitsOrZeros(got, want []float32) int {
	for i, w := range want {
		if g := got[i]; math.Float32bits(g) != math.Float32bits(w) && !(g == 0 && w == 0) {
			return i
		}
	}
	return -1
}

// TestOverwriteGrads checks that a Backward after OverwriteGrads, into a
// buffer of NaN, gives the bits of clearing the buffer and accumulating
// (zeros' signs aside), and that the Backwards after it accumulate again.
func TestOverwriteGrads(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  Options
	}{{"tiny-llama", Options{}}, {"tiny-qwen3", Options{}}, {"tiny-qwen2", Options{Checkpoint: true}}, {"tiny-qwen3", Options{Round: half.RoundBF16}}} {
		cfg := tiny(t, tc.name)
		cfg.PadTokenID = ptr(3)
		params := perturbedInit(cfg, 3)
		if tc.opt.Round != nil {
			tc.opt.Round(params)
		}
		rng := newRand(14)
		bs := []model.Batch{packedBatch(rng, 12, cfg.Vocab, 3), randomBatch(rng, 2, 12, cfg.Vocab), packedBatch(rng, 12, cfg.Vocab, 3)}
		ref, _ := newTestModel(t, cfg, tc.opt, params)
		m, _ := newTestModel(t, cfg, tc.opt, params)
		checkSame := func(what string) {
			t.Helper()
			if i := sameBitsOrZeros(m.Grads(), ref.Grads()); i >= 0 {
				t.Errorf("%s %s: grad[%d] = %v, clear-and-accumulate gives %v", tc.name, what, i, m.Grads()[i], ref.Grads()[i])
			}
		}
		for i := range m.Grads() {
			m.Grads()[i] = float32(math.NaN())
		}
		m.OverwriteGrads()
		step(t, ref, bs[0], 0.5)
		step(t, m, bs[0], 0.5)
		checkSame("first Backward after OverwriteGrads")
		step(t, ref, bs[1], 0.5)
		step(t, m, bs[1], 0.5)
		checkSame("second Backward (accumulating)")
		clear(ref.Grads())
		m.OverwriteGrads()
		step(t, ref, bs[2], 1)
		step(t, m, bs[2], 1)
		checkSame("after a second OverwriteGrads")
	}
}

func TestShapeChanges(t *testing.T) {
	cfg := tiny(t, "tiny-qwen2")
	params := perturbedInit(cfg, 15)
	rng := newRand(15)
	m, acct := newTestModel(t, cfg, Options{Checkpoint: true}, params)
	for _, bt := range [][2]int{{2, 16}, {1, 8}, {3, 16}, {4, 4}, {1, 40}} {
		b := randomBatch(rng, bt[0], bt[1], cfg.Vocab)
		fresh, _ := newTestModel(t, cfg, Options{Checkpoint: true}, params)
		want := step(t, fresh, b, 1)
		clear(m.Grads())
		if got := step(t, m, b, 1); got != want || !slices.Equal(m.Grads(), fresh.Grads()) {
			t.Errorf("B=%d T=%d: after other shapes loss %v, fresh model %v (or gradients differ)", bt[0], bt[1], got, want)
		}
	}
	m.Close()
	if s := acct.Snapshot(); s.LiveTotal[mem.Device] != 0 || s.LiveTotal[mem.PinnedHost] != 0 {
		t.Errorf("after Close %d device and %d host bytes are live", s.LiveTotal[mem.Device], s.LiveTotal[mem.PinnedHost])
	}
}

func TestInputErrors(t *testing.T) {
	cfg := tiny(t, "tiny-llama")
	m, _ := newTestModel(t, cfg, Options{}, perturbedInit(cfg, 1))
	ok := make([]int32, 2*8)
	bad := slices.Clone(ok)
	bad[9] = int32(cfg.Vocab)
	neg := slices.Clone(ok)
	neg[3] = -1
	for _, tc := range []struct {
		name string
		b    model.Batch
		want string
	}{
		{"token >= vocab", model.Batch{B: 2, Tokens: bad, Targets: ok}, "token 256 at position 9"},
		{"negative token", model.Batch{B: 2, Tokens: neg, Targets: ok}, "token -1 at position 3"},
		{"target >= vocab", model.Batch{B: 2, Tokens: ok, Targets: bad}, "target 256 at position 9"},
		{"target -1", model.Batch{B: 2, Tokens: ok, Targets: neg}, "target -1 at position 3 is outside the vocabulary [0, 256) and is not the ignore index -100"},
		{"negative position", model.Batch{B: 2, Tokens: ok, Targets: ok, Positions: neg}, "position id -1 at position 3"},
		{"positions length", model.Batch{B: 2, Tokens: ok, Positions: ok[:3]}, "3 positions for 16 tokens"},
		{"B does not divide", model.Batch{B: 3, Tokens: ok}, "16 tokens do not form B=3 sequences"},
		{"empty", model.Batch{B: 1}, "0 tokens"},
		{"targets length", model.Batch{B: 2, Tokens: ok, Targets: ok[:5]}, "5 targets for 16 tokens"},
		{"negative LossDenom", model.Batch{B: 2, Tokens: ok, Targets: ok, LossDenom: -1}, "LossDenom = -1"},
		{"NaN LossDenom", model.Batch{B: 2, Tokens: ok, Targets: ok, LossDenom: math.NaN()}, "LossDenom = NaN"},
		{"dense rows", model.Batch{B: 2, Tokens: ok, X: []float32{1}}, "dense X/Y"},
	} {
		if _, err := m.Forward(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := m.Backward(1); err == nil {
		t.Error("Backward without Forward succeeded")
	}
	if _, err := m.Forward(model.Batch{B: 2, Tokens: ok}); err != nil {
		t.Fatal(err)
	}
	if len(m.Logits()) != 16*cfg.Vocab {
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
	if _, err := u.Forward(model.Batch{B: 2, Tokens: ok}); err == nil {
		t.Error("Forward before Bind succeeded")
	}
	if err := u.Bind(make([]float32, 10), nil); err == nil {
		t.Error("Bind accepted a short buffer")
	}
	if err := u.Bind(make([]float32, u.NumParams()), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Forward(model.Batch{B: 2, Tokens: ok, Targets: ok}); err != nil {
		t.Fatal(err)
	}
	if err := u.Backward(1); err == nil || !strings.Contains(err.Error(), "gradient buffer") {
		t.Errorf("Backward without a gradient buffer: %v", err)
	}
	if _, err := New(cfg, Options{CPUCheckpoint: true, Workers: -1}); err == nil || !strings.Contains(err.Error(), "Gemm is required") ||
		!strings.Contains(err.Error(), "Acct is required") || !strings.Contains(err.Error(), "requires Options.Checkpoint") ||
		!strings.Contains(err.Error(), "Workers = -1") {
		t.Errorf("New with bad options: %v", err)
	}
	bad3 := cfg
	bad3.KVHeads = 3
	if _, err := New(bad3, Options{Gemm: modeltest.Gonum(t), Acct: mem.NewAccountant(0)}); err == nil || !strings.Contains(err.Error(), "KVHeads = 3") {
		t.Errorf("New with a bad config: %v", err)
	}
}

func TestActivationOOM(t *testing.T) {
	cfg := tiny(t, "tiny-llama")
	acct := mem.NewAccountant(0)
	acct.SetCapacity(mem.Device, 1<<20)
	m, _ := newTestModel(t, cfg, Options{Acct: acct}, perturbedInit(cfg, 1))
	b := randomBatch(newRand(1), 8, 64, cfg.Vocab)
	var oom *mem.OOMError
	if _, err := m.Forward(b); !errors.As(err, &oom) {
		t.Fatalf("Forward over the device budget: %v, want an *mem.OOMError", err)
	}
}

func TestNoAllocationsAfterWarmup(t *testing.T) {
	for _, opt := range []Options{{}, {Checkpoint: true}, {Round: half.RoundBF16}} {
		cfg := tiny(t, "tiny-qwen3")
		cfg.Vocab, cfg.PadTokenID = 32, ptr(1)
		opt.Gemm, opt.Workers = loopGemm{}, 2
		m, _ := newTestModel(t, cfg, opt, perturbedInit(cfg, 1))
		b := packedBatch(newRand(1), 8, 32, 1)
		step(t, m, b, 1)
		if n := testing.AllocsPerRun(3, func() { step(t, m, b, 1) }); n != 0 {
			t.Errorf("options %+v: %v allocations per step after warm-up", opt, n)
		}
	}
}

// TestHalfPrecisionBand runs each tiny model with bf16 and fp16 rounding
// on 16-bit weights and compares with float32 on the same weights: the
// loss within 1e-3 (bf16) or 2e-4 (fp16) and every tensor's gradient
// within 4% (bf16, 8 significant bits) or 0.8% (fp16, 11) of its largest,
// a few of the format's ulps after two layers. The gradients must differ
// from float32's too (by more than 1e-4 somewhere), or the emulation is
// not running.
func TestHalfPrecisionBand(t *testing.T) {
	for _, name := range tinyCases {
		for _, r := range []struct {
			name  string
			round func([]float32)
			loss  float64
			grad  float64
		}{{"bf16", half.RoundBF16, 1e-3, 4e-2}, {"fp16", half.RoundF16, 2e-4, 8e-3}} {
			cfg := tiny(t, name)
			params := perturbedInit(cfg, 16)
			r.round(params)
			b := packedBatch(newRand(17), 32, cfg.Vocab, -1)
			f32, _ := newTestModel(t, cfg, Options{}, params)
			l32 := step(t, f32, b, 1)
			h, _ := newTestModel(t, cfg, Options{Round: r.round}, params)
			lh := step(t, h, b, 1)
			if rel := math.Abs(float64(lh-l32)) / float64(l32); rel > r.loss {
				t.Errorf("%s %s: loss %v, float32 %v (rel %.2e)", name, r.name, lh, l32, rel)
			}
			l := h.Layout()
			worst := 0.0
			for i, s := range l.Specs {
				g, want := l.View(h.Grads(), i), l.View(f32.Grads(), i)
				var gmax, dmax float64
				for j := range want {
					gmax = max(gmax, math.Abs(float64(want[j])))
					dmax = max(dmax, math.Abs(float64(g[j]-want[j])))
				}
				worst = max(worst, dmax/gmax)
				if dmax > r.grad*gmax {
					t.Errorf("%s %s: %s max |Δ| %.3g of %.3g (rel %.2e)", name, r.name, s.Name, dmax, gmax, dmax/gmax)
				}
			}
			t.Logf("%s %s: loss rel %.2e, worst gradient rel %.2e", name, r.name, math.Abs(float64(lh-l32))/float64(l32), worst)
			if worst < 1e-4 {
				t.Errorf("%s %s: gradients within %.2e of float32's: is Round applied?", name, r.name, worst)
			}
		}
	}
}

// TestRoundedTensorsAre16Bit checks, with bf16 emulation, that every op
// output of doc.go's list holds bf16 values: the activations the forward
// keeps, the backward scratch of the last layer run (layer 0) and, after
// one Backward into a zeroed buffer, every gradient.
func TestRoundedTensorsAre16Bit(t *testing.T) {
	cfg := tiny(t, "tiny-qwen3")
	cfg.PadTokenID = ptr(2)
	params := perturbedInit(cfg, 18)
	half.RoundBF16(params)
	m, _ := newTestModel(t, cfg, Options{Round: half.RoundBF16}, params)
	if _, err := m.Forward(packedBatch(newRand(19), 16, cfg.Vocab, 2)); err != nil {
		t.Fatal(err)
	}
	a := &m.a
	named := map[string][]float32{"res[0]": a.res[0], "xf": a.xf, "logits": a.logits, "cos": a.cos, "sin": a.sin}
	for l := range cfg.Layers {
		la := &a.layers[l]
		for name, x := range map[string][]float32{"xn1": la.xn1, "qpre": la.qpre, "kpre": la.kpre, "q": la.q, "k": la.k, "v": la.v,
			"att": la.att, "y": la.y, "h1": la.h1, "xn2": la.xn2, "gate": la.gate, "up": la.up, "act": la.act} {
			named[name+itoa(l)] = x
		}
		named["res"+itoa(l+1)] = a.res[l+1]
	}
	check := func(named map[string][]float32) {
		t.Helper()
		for name, x := range named {
			if i := slices.IndexFunc(x, func(v float32) bool { return math.Float32bits(v)&0xffff != 0 }); i >= 0 {
				t.Errorf("%s[%d] = %v is not a bf16 value", name, i, x[i])
			}
		}
	}
	check(named)
	if err := m.Backward(1); err != nil {
		t.Fatal(err)
	}
	check(map[string][]float32{"dlogits": a.logits, "dres": a.dres, "dx": a.dx, "dln": a.dln, "dy": a.dy, "dq": a.dq,
		"dk": a.dk, "dv": a.dv, "datt": a.datt, "dfc": a.dfc, "dfc2": a.dfc2, "grads": m.Grads()})
}
