package gpt

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/internal/modeltest"
)

// The golden numbers in testdata come from the reference harness
// (shared/reference/harness, DeepSpeed 0.14.5 / torch 1.13 on CPU, see
// testdata/README.md): plain PyTorch training of the same TinyGPT from
// gpt_init.safetensors on gpt_data.safetensors.

// TestLayoutMatchesHarness checks the flat-buffer order and shapes against
// the harness's init file, whose tensors are in named_parameters order.
func TestLayoutMatchesHarness(t *testing.T) {
	cfg, err := Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	f, err := model.OpenSafetensors("testdata/gpt_init.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type entry struct {
		Name  string
		Shape []int
	}
	var want, got []entry
	for _, ti := range f.Tensors {
		want = append(want, entry{ti.Name, ti.Shape})
	}
	l := cfg.Layout()
	for _, s := range l.Specs {
		got = append(got, entry{s.Name, s.Shape})
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("layout differs from gpt_init.safetensors (-file +ours):\n%s", d)
	}
	if l.Numel != 110336 {
		t.Errorf("tiny has %d parameters, the harness 110336", l.Numel)
	}
}

// TestParityMicroLossesStep1 runs the four micro-batches of step 1 with
// the initial weights and compares with plain PyTorch's micro losses.
func TestParityMicroLossesStep1(t *testing.T) {
	cfg, params := harnessTiny(t)
	tok := harnessTokens(t)
	res := modeltest.ReadResult(t, "testdata/plain_dsclip_result.json")
	m, _ := newTestModel(t, cfg, Options{}, params)
	step := res.Steps[0]
	if step.Step != 1 || len(step.MicroLosses) != 4 {
		t.Fatalf("unexpected result.json step 1: %+v", step)
	}
	for _, ml := range step.MicroLosses {
		idx, tgt := microBatch(tok, 0, ml.Micro, ml.Rank)
		loss, err := m.Forward(model.Batch{Tokens: idx, B: 4, Targets: tgt})
		if err != nil {
			t.Fatal(err)
		}
		modeltest.CheckLoss(t, fmt.Sprintf("micro %d rank %d", ml.Micro, ml.Rank), loss, ml.Loss, 1e-6)
	}
}

// TestParityEvalAfterTraining evaluates PyTorch's weights after 10 steps
// on the eval batch (step 0, mb 0) and compares with the eval loss torch
// reported after step 10: a forward check on trained, non-initial weights.
func TestParityEvalAfterTraining(t *testing.T) {
	cfg, _ := harnessTiny(t)
	params := make([]float32, cfg.NumParams())
	if err := ReadWeights("testdata/plain_dsclip_final_fp32.safetensors", cfg, params); err != nil {
		t.Fatal(err)
	}
	res := modeltest.ReadResult(t, "testdata/plain_dsclip_result.json")
	m, _ := newTestModel(t, cfg, Options{}, params)
	idx, tgt := microBatch(harnessTokens(t), 0, 0, 0)
	loss, err := m.Forward(model.Batch{Tokens: idx, B: 4, Targets: tgt})
	if err != nil {
		t.Fatal(err)
	}
	modeltest.CheckLoss(t, "eval after step 10", loss, res.Steps[len(res.Steps)-1].EvalLossAfterStep, 1e-6)
}

// TestBF16EmulationStep1 runs the step-1 micro-batches with bf16 compute
// emulated (parameters rounded to bf16, Round = RoundBF16) and compares
// with DeepSpeed's bf16 run, which uses torch 1.13's native bf16 CPU
// kernels: the emulation follows those kernels (bf16.go), so every
// micro-step's loss is torch's float32 loss exactly, where bf16 moves it
// by ~1e-4 from fp32.
func TestBF16EmulationStep1(t *testing.T) {
	cfg, params := harnessTiny(t)
	tok := harnessTokens(t)
	bf := modeltest.ReadZeroResult(t, "testdata/z0_bf16_result.json")
	fp32 := modeltest.ReadResult(t, "testdata/plain_dsclip_result.json").Steps[0].MicroLosses
	m32, _ := newTestModel(t, cfg, Options{}, params)
	bparams := slices.Clone(params)
	half.RoundBF16(bparams)
	m16, _ := newTestModel(t, cfg, Options{DType: device.BF16}, bparams)
	for _, ml := range fp32 {
		want := bf.Steps[0].MicroLosses[fmt.Sprintf("rank%d", ml.Rank)][ml.Micro]
		idx, tgt := microBatch(tok, 0, ml.Micro, ml.Rank)
		l32, err := m32.Forward(model.Batch{Tokens: idx, B: 4, Targets: tgt})
		if err != nil {
			t.Fatal(err)
		}
		l16, err := m16.Forward(model.Batch{Tokens: idx, B: 4, Targets: tgt})
		if err != nil {
			t.Fatal(err)
		}
		d := math.Abs(float64(l16) - want)
		t.Logf("micro %d rank %d: emulated bf16 %.7g, torch bf16 %.7g (|Δ| %.2e); torch fp32 is %.2e from torch bf16",
			ml.Micro, ml.Rank, l16, want, d, math.Abs(ml.Loss-want))
		if l16 == l32 {
			t.Errorf("micro %d rank %d: bf16 emulation left the loss at its fp32 value %.9g", ml.Micro, ml.Rank, l32)
		}
		if l16 != float32(want) {
			t.Errorf("micro %d rank %d: emulated bf16 loss %.9g, torch bf16 %.9g (|Δ| %.2e)", ml.Micro, ml.Rank, l16, want, d)
		}
	}
}

// TestParityGradientsStep1 accumulates rank 0's two step-1 micro-batches
// with Backward(1/GAS) and compares every gradient with PyTorch's
// (testdata/gen_torch_grads.py). Per tensor, the largest difference must
// be within 5e-6 of the tensor's largest gradient: float32 summation
// order differs (GEMM blocking, reductions), nothing else.
func TestParityGradientsStep1(t *testing.T) {
	cfg, params := harnessTiny(t)
	tok := harnessTokens(t)
	want := make([]float32, len(params))
	if err := ReadWeights("testdata/torch_grads_step1_rank0.safetensors", cfg, want); err != nil {
		t.Fatal(err)
	}
	m, _ := newTestModel(t, cfg, Options{}, params)
	for micro := range 2 {
		idx, tgt := microBatch(tok, 0, micro, 0)
		step(t, m, idx, tgt, 4, 0.5)
	}
	modeltest.CheckGrads(t, m.Layout(), m.Grads(), want, 5e-6)
}
