package mlp

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/internal/modeltest"
)

func newTestModel(t testing.TB, cfg Config, opt Options, init []float32) *Model {
	t.Helper()
	if opt.Gemm == nil {
		opt.Gemm = modeltest.Gonum(t)
	}
	if opt.Acct == nil {
		opt.Acct = mem.NewAccountant(0)
	}
	m, err := New(cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	params := make([]float32, m.NumParams())
	copy(params, init)
	if err := m.Bind(params, make([]float32, m.NumParams())); err != nil {
		t.Fatal(err)
	}
	return m
}

// harness returns the tiny preset, the harness's initial weights and data
// x [10][16][16], y [10][16][8].
func harness(t testing.TB) (Config, []float32, []float32, []float32) {
	t.Helper()
	cfg, err := Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Layout()
	params := make([]float32, l.Numel)
	if err := ReadWeights("testdata/mlp_init.safetensors", cfg, params); err != nil {
		t.Fatal(err)
	}
	f, err := model.OpenSafetensors("testdata/mlp_data.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	x, y := make([]float32, 10*16*16), make([]float32, 10*16*8)
	if err := f.ReadFloat32("x", x); err != nil {
		t.Fatal(err)
	}
	if err := f.ReadFloat32("y", y); err != nil {
		t.Fatal(err)
	}
	return cfg, params, x, y
}

// microBatch is the harness micro-batch (step s, micro m, rank r):
// samples [4*mb, 4*mb+4) of step s, mb = 2m+r.
func microBatch(x, y []float32, s, m, r int) ([]float32, []float32) {
	lo := s*16 + 4*(2*m+r)
	return x[lo*16 : (lo+4)*16], y[lo*8 : (lo+4)*8]
}

func TestLayoutMatchesHarness(t *testing.T) {
	cfg, _ := Preset("tiny")
	f, err := model.OpenSafetensors("testdata/mlp_init.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want, got []string
	for _, ti := range f.Tensors {
		want = append(want, fmt.Sprint(ti.Name, ti.Shape))
	}
	l := cfg.Layout()
	for _, s := range l.Specs {
		got = append(got, fmt.Sprint(s.Name, s.Shape))
	}
	if d := cmp.Diff(want, got); d != "" || l.Numel != 5768 {
		t.Errorf("layout (-file +ours):\n%s numel %d (harness 5768)", d, l.Numel)
	}
	var units []string
	for _, u := range l.Units {
		units = append(units, u.Name)
	}
	if d := cmp.Diff([]string{"fc1", "fc2", "fc3"}, units); d != "" {
		t.Errorf("units: %s", d)
	}
}

// TestParityMicroLossesStep1 compares with plain PyTorch's step-1 micro
// losses (reference harness, DeepSpeed 0.14.5 / torch 1.13 CPU).
func TestParityMicroLossesStep1(t *testing.T) {
	cfg, params, x, y := harness(t)
	m := newTestModel(t, cfg, Options{}, params)
	for _, ml := range modeltest.ReadResult(t, "testdata/plain_dsclip_result.json").Steps[0].MicroLosses {
		xb, yb := microBatch(x, y, 0, ml.Micro, ml.Rank)
		loss, err := m.Forward(model.Batch{X: xb, B: 4, Y: yb})
		if err != nil {
			t.Fatal(err)
		}
		modeltest.CheckLoss(t, fmt.Sprintf("micro %d rank %d", ml.Micro, ml.Rank), loss, ml.Loss, 1e-6)
	}
}

// TestParityEvalAfterTraining evaluates torch's final weights (after 10
// steps) on the eval batch and compares with its eval_loss_after_step.
func TestParityEvalAfterTraining(t *testing.T) {
	cfg, _, x, y := harness(t)
	params := make([]float32, cfg.Layout().Numel)
	if err := ReadWeights("testdata/plain_dsclip_final_fp32.safetensors", cfg, params); err != nil {
		t.Fatal(err)
	}
	res := modeltest.ReadResult(t, "testdata/plain_dsclip_result.json")
	m := newTestModel(t, cfg, Options{}, params)
	xb, yb := microBatch(x, y, 0, 0, 0)
	loss, err := m.Forward(model.Batch{X: xb, B: 4, Y: yb})
	if err != nil {
		t.Fatal(err)
	}
	modeltest.CheckLoss(t, "eval after step 10", loss, res.Steps[len(res.Steps)-1].EvalLossAfterStep, 1e-6)
}

// TestBF16EmulationStep1 compares bf16-emulated losses with DeepSpeed's
// bf16 run (torch's native bf16 CPU kernels). For Linear and ReLU torch
// computes in fp32 and rounds each output once, which is exactly the
// emulation, so the losses agree as closely as the fp32 ones do, while
// bf16 moves them by up to 2e-4 from fp32.
func TestBF16EmulationStep1(t *testing.T) {
	cfg, params, x, y := harness(t)
	bf := modeltest.ReadZeroResult(t, "testdata/z0_bf16_result.json")
	half.RoundBF16(params)
	m := newTestModel(t, cfg, Options{Round: half.RoundBF16}, params)
	for _, ml := range modeltest.ReadResult(t, "testdata/plain_dsclip_result.json").Steps[0].MicroLosses {
		want := bf.Steps[0].MicroLosses[fmt.Sprintf("rank%d", ml.Rank)][ml.Micro]
		xb, yb := microBatch(x, y, 0, ml.Micro, ml.Rank)
		loss, err := m.Forward(model.Batch{X: xb, B: 4, Y: yb})
		if err != nil {
			t.Fatal(err)
		}
		d := math.Abs(float64(loss) - want)
		t.Logf("micro %d rank %d: emulated bf16 %.7g, torch bf16 %.7g (|Δ| %.2e); torch fp32 is %.2e from it", ml.Micro, ml.Rank, loss, want, d, math.Abs(ml.Loss-want))
		if d > 1e-6*want {
			t.Errorf("micro %d rank %d: emulated bf16 %.7g is %.2e from torch bf16 %.7g", ml.Micro, ml.Rank, loss, d, want)
		}
	}
}

// ref64 is an independent float64 forward of the MLP.
func ref64(cfg Config, p []float64, x, y []float32, B int) float64 {
	l := cfg.Layout()
	h := make([][]float64, B)
	for b := range B {
		for _, v := range x[b*cfg.Sizes[0] : (b+1)*cfg.Sizes[0]] {
			h[b] = append(h[b], float64(v))
		}
	}
	for i := range cfg.Layers() {
		w, bias := l.Specs[2*i], l.Specs[2*i+1]
		in, out := cfg.Sizes[i], cfg.Sizes[i+1]
		for b := range B {
			next := make([]float64, out)
			for o := range out {
				s := p[bias.Offset+o]
				for j := range in {
					s += p[w.Offset+o*in+j] * h[b][j]
				}
				if i < cfg.Layers()-1 {
					s = math.Max(s, 0)
				}
				next[o] = s
			}
			h[b] = next
		}
	}
	sum := 0.0
	for b := range B {
		for o, v := range h[b] {
			d := v - float64(y[b*len(h[b])+o])
			sum += d * d
		}
	}
	return sum / float64(B*len(h[0]))
}

// TestGradientCheck compares every analytic gradient (float32) with
// central differences of the float64 forward, relative 1e-4 with an
// absolute floor of 1e-4 of the tensor's largest gradient.
func TestGradientCheck(t *testing.T) {
	for _, cfg := range []Config{{Sizes: []int{16, 64, 64, 8}}, {Sizes: []int{5, 7, 3}}} {
		l := cfg.Layout()
		params := make([]float32, l.Numel)
		l.InitRange(4, params, 0)
		rng := rand.New(rand.NewPCG(5, 6))
		const B = 6
		x, y := make([]float32, B*cfg.Sizes[0]), make([]float32, B*cfg.Sizes[len(cfg.Sizes)-1])
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		for i := range y {
			y[i] = float32(rng.NormFloat64())
		}
		m := newTestModel(t, cfg, Options{}, params)
		loss, err := m.Forward(model.Batch{X: x, B: B, Y: y})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(1); err != nil {
			t.Fatal(err)
		}
		p := make([]float64, len(params))
		for i, v := range params {
			p[i] = float64(v)
		}
		if l64 := ref64(cfg, p, x, y, B); math.Abs(float64(loss)-l64) > 1e-6*l64 {
			t.Errorf("%v: float32 loss %.9g, float64 %.12g", cfg.Sizes, loss, l64)
		}
		const h = 1e-6
		for si, s := range l.Specs {
			g := l.View(m.Grads(), si)
			gmax := 0.0
			for _, v := range g {
				gmax = max(gmax, math.Abs(float64(v)))
			}
			for j := range s.Numel {
				i := s.Offset + j
				save := p[i]
				p[i] = save + h
				up := ref64(cfg, p, x, y, B)
				p[i] = save - h
				down := ref64(cfg, p, x, y, B)
				p[i] = save
				num := (up - down) / (2 * h)
				if d := math.Abs(float64(g[j]) - num); d > 1e-4*math.Abs(num)+1e-4*gmax {
					t.Errorf("%v %s[%d]: analytic %.7g, numeric %.7g", cfg.Sizes, s.Name, j, g[j], num)
				}
			}
		}
	}
}

func TestHooks(t *testing.T) {
	cfg, params, x, y := harness(t)
	xb, yb := microBatch(x, y, 0, 0, 0)
	r := &modeltest.Recorder{}
	m := newTestModel(t, cfg, Options{Hooks: r}, params)
	if _, err := m.Forward(model.Batch{X: xb, B: 4, Y: yb}); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(1); err != nil {
		t.Fatal(err)
	}
	want := []string{"BF(0)", "AF(0)", "BF(1)", "AF(1)", "BF(2)", "AF(2)", "BB(2)", "AB(2)", "BB(1)", "AB(1)", "BB(0)", "AB(0)"}
	if d := cmp.Diff(want, r.Log); d != "" {
		t.Errorf("hook order (-want +got):\n%s", d)
	}
	r2 := &modeltest.Recorder{FailAt: "BB(1)"}
	m2 := newTestModel(t, cfg, Options{Hooks: r2}, params)
	if _, err := m2.Forward(model.Batch{X: xb, B: 4, Y: yb}); err != nil {
		t.Fatal(err)
	}
	if err := m2.Backward(1); !errors.Is(err, modeltest.ErrInjected) || !strings.Contains(err.Error(), `"fc2"`) {
		t.Errorf("failing hook: %v", err)
	}
}

func TestAccumulationScaleAndErrors(t *testing.T) {
	cfg, params, x, y := harness(t)
	x0, y0 := microBatch(x, y, 0, 0, 0)
	x1, y1 := microBatch(x, y, 0, 1, 0)
	run := func(scale float32, batches ...[2][]float32) []float32 {
		m := newTestModel(t, cfg, Options{}, params)
		for _, b := range batches {
			if _, err := m.Forward(model.Batch{X: b[0], B: 4, Y: b[1]}); err != nil {
				t.Fatal(err)
			}
			if err := m.Backward(scale); err != nil {
				t.Fatal(err)
			}
		}
		return m.Grads()
	}
	a, b := run(1, [2][]float32{x0, y0}), run(1, [2][]float32{x1, y1})
	acc := run(1, [2][]float32{x0, y0}, [2][]float32{x1, y1})
	for i := range a {
		if a[i]+b[i] != acc[i] {
			t.Fatalf("grad[%d]: accumulated %v, sum of micro-steps %v", i, acc[i], a[i]+b[i])
		}
	}
	halved := run(0.5, [2][]float32{x0, y0})
	for i := range a {
		if 2*halved[i] != a[i] {
			t.Fatalf("grad[%d] with scale 0.5 is %v, with 1 %v", i, halved[i], a[i])
		}
	}

	m := newTestModel(t, cfg, Options{}, params)
	for _, tc := range []struct {
		x, y []float32
		B    int
		want string
	}{
		{x0[:63], y0, 4, "input has 63 values"},
		{x0, y0[:5], 4, "targets have 5 values"},
		{x0, y0, 0, "B=0"},
	} {
		if _, err := m.Forward(model.Batch{X: tc.x, B: tc.B, Y: tc.y}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Forward: %v, want %q", err, tc.want)
		}
	}
	if err := m.Backward(1); err == nil {
		t.Error("Backward without Forward succeeded")
	}
	if _, err := m.Forward(model.Batch{X: x0, B: 4}); err != nil || len(m.Output()) != 32 {
		t.Errorf("forward without targets: %v, %d outputs", err, len(m.Output()))
	}
	if err := m.Backward(1); err == nil {
		t.Error("Backward after a Forward without targets succeeded")
	}
	if _, err := New(Config{Sizes: []int{4}}, Options{}); err == nil || !strings.Contains(err.Error(), "Gemm is required") {
		t.Errorf("New with a bad config: %v", err)
	}
}

// TestOverwriteGrads checks that a Backward after OverwriteGrads, into a
// buffer of NaN, gives the bits of clearing the buffer and accumulating
// (zeros' signs aside), and that the next Backward accumulates again.
func TestOverwriteGrads(t *testing.T) {
	cfg, params, x, y := harness(t)
	for _, round := range []func([]float32){nil, half.RoundBF16} {
		p := slices.Clone(params)
		if round != nil {
			round(p)
		}
		ref := newTestModel(t, cfg, Options{Round: round}, p)
		m := newTestModel(t, cfg, Options{Round: round}, p)
		for i := range m.Grads() {
			m.Grads()[i] = float32(math.NaN())
		}
		m.OverwriteGrads()
		for micro := range 2 {
			xb, yb := microBatch(x, y, 0, micro, 0)
			for _, mm := range []*Model{ref, m} {
				if _, err := mm.Forward(model.Batch{X: xb, B: 4, Y: yb}); err != nil {
					t.Fatal(err)
				}
				if err := mm.Backward(0.5); err != nil {
					t.Fatal(err)
				}
			}
			for i, w := range ref.Grads() {
				g := m.Grads()[i]
				if math.Float32bits(g) != math.Float32bits(w) && (g != 0 || w != 0) {
					t.Fatalf("round %v, micro %d: grad[%d] = %v, clear-and-accumulate gives %v", round != nil, micro, i, g, w)
				}
			}
		}
	}
}

func TestWeightsRoundTripAndAccounting(t *testing.T) {
	cfg, params, x, y := harness(t)
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := WriteWeights(path, cfg, params); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(params))
	if err := ReadWeights(path, cfg, got); err != nil || !slices.Equal(got, params) {
		t.Errorf("round trip: %v", err)
	}
	wrong := Config{Sizes: []int{16, 32, 8}}
	if err := ReadWeights(path, wrong, make([]float32, wrong.Layout().Numel)); err == nil ||
		!strings.Contains(err.Error(), `tensor "fc1.weight" has shape [64 16], want [32 16]`) || !strings.Contains(err.Error(), `unknown tensor "fc3.weight"`) {
		t.Errorf("reading into the wrong shape: %v", err)
	}

	acct := mem.NewAccountant(0)
	m := newTestModel(t, cfg, Options{Acct: acct}, params)
	xb, yb := microBatch(x, y, 0, 0, 0)
	if _, err := m.Forward(model.Batch{X: xb, B: 4, Y: yb}); err != nil {
		t.Fatal(err)
	}
	if got, want := acct.Snapshot().LiveBytes(mem.Device, mem.Activations), int64(4*4*(16+2*(64+64+8)+8)); got != want {
		t.Errorf("activations %d bytes, want %d", got, want)
	}
	m.Close()
	if s := acct.Snapshot(); s.LiveTotal[mem.Device] != 0 {
		t.Errorf("%d bytes live after Close", s.LiveTotal[mem.Device])
	}
}

func TestNoAllocationsAfterWarmup(t *testing.T) {
	cfg, params, x, y := harness(t)
	xb, yb := microBatch(x, y, 0, 0, 0)
	for _, round := range []func([]float32){nil, half.RoundBF16} {
		m := newTestModel(t, cfg, Options{Round: round}, params)
		step := func() {
			if _, err := m.Forward(model.Batch{X: xb, B: 4, Y: yb}); err != nil {
				t.Fatal(err)
			}
			if err := m.Backward(1); err != nil {
				t.Fatal(err)
			}
		}
		step()
		if n := testing.AllocsPerRun(5, step); n != 0 {
			t.Errorf("round %v: %v allocations per step after warm-up", round != nil, n)
		}
	}
}

// TestParityGradientsStep1 accumulates rank 0's two step-1 micro-batches
// with Backward(1/GAS) and compares every gradient with PyTorch's
// (../gpt/testdata/gen_torch_grads.py), within 5e-6 of each tensor's
// largest gradient (float32 summation order only).
func TestParityGradientsStep1(t *testing.T) {
	cfg, params, x, y := harness(t)
	want := make([]float32, len(params))
	if err := ReadWeights("testdata/torch_grads_step1_rank0.safetensors", cfg, want); err != nil {
		t.Fatal(err)
	}
	m := newTestModel(t, cfg, Options{}, params)
	for micro := range 2 {
		xb, yb := microBatch(x, y, 0, micro, 0)
		if _, err := m.Forward(model.Batch{X: xb, B: 4, Y: yb}); err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(0.5); err != nil {
			t.Fatal(err)
		}
	}
	modeltest.CheckGrads(t, m.Layout(), m.Grads(), want, 5e-6)
}
