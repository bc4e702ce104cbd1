package gpt

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
)

// The golden files of these tests come from torch 1.13.1 on the reference
// machine (testdata/gen_torch_bf16.py, see testdata/README.md).

// goldenBF16 reads the tensors of testdata/torch_bf16_kernels.safetensors
// as float32 (bf16 tensors widened exactly).
type goldenBF16 struct {
	t testing.TB
	f *model.SafetensorsFile
}

func openGoldenBF16(t testing.TB) goldenBF16 {
	t.Helper()
	f, err := model.OpenSafetensors("testdata/torch_bf16_kernels.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return goldenBF16{t, f}
}

func (g goldenBF16) get(name string) []float32 {
	g.t.Helper()
	ti, ok := g.f.Lookup(name)
	if !ok {
		g.t.Fatalf("golden file has no tensor %q", name)
	}
	v := make([]float32, ti.Numel())
	if err := g.f.ReadFloat32(name, v); err != nil {
		g.t.Fatal(err)
	}
	return v
}

// sameBits reports the elements of got that are not torch's value (NaN
// equals NaN; -0 equals +0, which torch's zero-initialised sums and ours
// may sign differently).
func sameBits(t testing.TB, what string, got, want []float32) {
	t.Helper()
	bad := 0
	for i := range want {
		if got[i] == want[i] || math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i])) {
			continue
		}
		if bad < 3 {
			t.Errorf("%s[%d] = %v (%#08x), torch %v (%#08x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
		bad++
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d elements differ from torch", what, bad, len(want))
	}
}

// bf16Model is a model whose ops run torch's bf16 kernels, of width C
// (only its kernels are used).
func bf16Model(t testing.TB, C int) *Model {
	t.Helper()
	cfg := Config{Vocab: 8, Context: 4, Dim: C, Heads: 4, Layers: 1}
	m, _ := newTestModel(t, cfg, Options{DType: device.BF16}, nil)
	if !m.bf16 {
		t.Fatal("Round = half.RoundBF16 did not select the bf16 kernels")
	}
	if err := m.gradScratch(); err != nil { // the kernels accumulate through it
		t.Fatal(err)
	}
	return m
}

// TestBF16KernelsMatchTorch runs the bf16 kernels that are not "float32
// and one rounding" — LayerNorm (bf16 Welford moments, bf16 rstd, rows of
// dw and db summed in bf16, fused multiply-adds), GELU (every operation in
// bf16), the Linear layer in oneDNN's order, and the float32 exp and log
// of Sleef — on torch's inputs and requires torch's outputs bit for bit.
func TestBF16KernelsMatchTorch(t *testing.T) {
	g := openGoldenBF16(t)
	for _, C := range []int{64, 40, 100, 768} {
		p := "ln" + strconv.Itoa(C) + "."
		m := bf16Model(t, C)
		x, w, b, dy := g.get(p+"x"), g.get(p+"w"), g.get(p+"b"), g.get(p+"dy")
		N := len(x) / C
		y, mean, rstd := make([]float32, len(x)), make([]float32, N), make([]float32, N)
		m.layernormForward(y, mean, rstd, x, w, b, N)
		sameBits(t, p+"y", y, g.get(p+"y"))
		sameBits(t, p+"mean", mean, g.get(p+"mean"))
		sameBits(t, p+"rstd", rstd, g.get(p+"rstd"))
		dx, dw, db := make([]float32, len(x)), make([]float32, C), make([]float32, C)
		m.layernormBackward(dx, dw, db, dy, x, w, mean, rstd, N)
		sameBits(t, p+"dx", dx, g.get(p+"dx"))
		sameBits(t, p+"dw", dw, g.get(p+"dw"))
		sameBits(t, p+"db", db, g.get(p+"db"))
	}

	m := bf16Model(t, 64)
	u := g.get("gelu.x")
	gu, du := make([]float32, len(u)), make([]float32, len(u))
	m.geluForward(gu, u)
	sameBits(t, "gelu.y", gu, g.get("gelu.y"))
	m.geluBackward(du, u, g.get("gelu.dy"))
	sameBits(t, "gelu.dx", du, g.get("gelu.dx"))

	const N, IC, OC = 32, 256, 32
	lx, lw, lb, ldy := g.get("linear.x"), g.get("linear.w"), g.get("linear.b"), g.get("linear.dy")
	ly := make([]float32, N*OC)
	m.matmulForward(ly, lx, lw, lb, N, IC, OC)
	sameBits(t, "linear.y", ly, g.get("linear.y"))
	ldx, ldw, ldb := make([]float32, N*IC), make([]float32, OC*IC), make([]float32, OC)
	m.matmulBackward(ldx, ldw, ldb, ldy, lx, lw, N, IC, OC)
	sameBits(t, "linear.dx", ldx, g.get("linear.dx"))
	sameBits(t, "linear.dw", ldw, g.get("linear.dw"))

	for _, f := range []struct {
		name string
		fn   func(float32) float32
	}{{"exp", expf}, {"log", logf}} {
		in := g.get(f.name + ".x")
		got := make([]float32, len(in))
		for i, v := range in {
			got[i] = f.fn(v)
		}
		sameBits(t, f.name+".y", got, g.get(f.name+".y"))
	}
}

// TestBF16GradientsMatchTorch: the bf16 TinyGPT's loss and every
// gradient of one micro-step (step 1, micro 0, rank 0, backward of
// loss/2) equal torch 1.13's bf16 model bit for bit.
func TestBF16GradientsMatchTorch(t *testing.T) {
	cfg, params := harnessTiny(t)
	tok := harnessTokens(t)
	want := make([]float32, len(params))
	if err := ReadWeights("testdata/torch_bf16_grads_step1_m0r0.safetensors", cfg, want); err != nil {
		t.Fatal(err)
	}
	half.RoundBF16(params)
	m, _ := newTestModel(t, cfg, Options{DType: device.BF16}, params)
	idx, tgt := microBatch(tok, 0, 0, 0)
	step(t, m, idx, tgt, 4, 0.5)
	for i, s := range m.Layout().Specs {
		sameBits(t, s.Name, m.Layout().View(m.Grads(), i), m.Layout().View(want, i))
	}
}

// TestModelIsToldDType: the model computes in the dtype it is given,
// not one it infers: fp32 rounds nothing (some logits are not fp16
// values), fp16 rounds to fp16 with the fp16emu kernels (every logit an
// fp16 value, some not bf16 values; no bf16 kernels), bf16 rounds to bf16
// with torch's bf16 kernels (every logit a bf16 value). An invalid dtype
// is an error naming Options.DType.
func TestModelIsToldDType(t *testing.T) {
	isF16 := func(v float32) bool { return half.NearestF16(v) == v }
	isBF16 := func(v float32) bool { return math.Float32bits(v)&0xffff == 0 }
	for _, tc := range []struct {
		d                 device.DType
		bf16Kernels       bool
		allOf, someNotOf  func(float32) bool
		allName, someName string
	}{
		{device.F32, false, nil, isF16, "", "fp16"},
		{device.F16, false, isF16, isBF16, "fp16", "bf16"},
		{device.BF16, true, isBF16, nil, "bf16", ""},
	} {
		cfg, params := harnessTiny(t)
		if r := tc.d.Rounding(); r != nil {
			r(params)
		}
		idx, tgt := microBatch(harnessTokens(t), 0, 0, 0)
		m, _ := newTestModel(t, cfg, Options{DType: tc.d}, params)
		if m.bf16 != tc.bf16Kernels || (m.rounding == nil) != (tc.d == device.F32) {
			t.Errorf("%v: bf16 kernels %v, rounding %v; want %v, %v", tc.d, m.bf16, m.rounding != nil, tc.bf16Kernels, tc.d != device.F32)
		}
		if _, err := m.Forward(model.Batch{Tokens: idx, B: 4, Targets: tgt}); err != nil {
			t.Fatal(err)
		}
		some := false
		for i, v := range m.a.logits {
			if tc.allOf != nil && !tc.allOf(v) {
				t.Errorf("%v: logits[%d] = %v is not a value of %s", tc.d, i, v, tc.allName)
				break
			}
			some = some || tc.someNotOf != nil && !tc.someNotOf(v)
		}
		if tc.someNotOf != nil && !some {
			t.Errorf("%v: every logit is a value of %s", tc.d, tc.someName)
		}
	}
	cfg, _ := harnessTiny(t)
	if _, err := New(cfg, Options{Gemm: loopGemm{}, Acct: mem.NewAccountant(0), DType: device.DType(7)}); err == nil || !strings.Contains(err.Error(), "Options.DType") {
		t.Errorf("New with DType(7): %v, want an error naming Options.DType", err)
	}
}

// TestDotPairsOrder pins oneDNN's bf16 summation order: pairs in order,
// the odd element of each pair first. For 1, 0, 2^-24, 2^-24·(1+2^-23)
// that order adds the larger small term first and rounds up twice, to
// 1 + 2^-22; in index order the tie 1 + 2^-24 rounds down first, to
// 1 + 2^-23.
func TestDotPairsOrder(t *testing.T) {
	h := math.Ldexp(1, -24)
	a := []float32{1, 0, float32(h), float32(h * (1 + math.Ldexp(1, -23)))}
	ones := []float32{1, 1, 1, 1}
	if got, want := dotPairs(a, ones), float32(1+math.Ldexp(1, -22)); got != want {
		t.Errorf("dotPairs = %v, want %v", got, want)
	}
	var order []int
	for k := range 5 {
		order = append(order, pairSwap(k, 5))
	}
	if want := []int{1, 0, 3, 2, 4}; !slices.Equal(order, want) {
		t.Errorf("pairSwap order %v, want %v", order, want)
	}
}
