package gpt

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dszero/dszero/model"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// pldRun is one forward and backward of cfg at params under a layer-drop
// decision (nil: none); it returns the loss and the gradients by name.
func pldRun(t *testing.T, cfg Config, params []float32, opt Options, keep []bool, scale []float32, tokens, targets []int32, B int) (float32, map[string][]float32) {
	t.Helper()
	m, _ := newTestModel(t, cfg, opt, params)
	if err := m.SetLayerDrop(keep, scale); err != nil {
		t.Fatal(err)
	}
	loss, err := m.Forward(model.Batch{B: B, Tokens: tokens, Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(1); err != nil {
		t.Fatal(err)
	}
	grads := map[string][]float32{}
	for i, s := range m.Layout().Specs {
		grads[s.Name] = append([]float32(nil), m.Layout().View(m.Grads(), i)...)
	}
	return loss, grads
}

// TestLayerDropSkipIsTheShallowerModel: skipping block l is the model
// without block l — same loss, same gradients for every other tensor —
// and block l's parameters get no gradient. With activation
// checkpointing the recompute follows the same decision.
func TestLayerDropSkipIsTheShallowerModel(t *testing.T) {
	cfg := Config{Vocab: 29, Context: 12, Dim: 24, Heads: 3, Layers: 3, MLP: 40}.WithDefaults()
	short := cfg
	short.Layers = 2
	params := perturbedInit(cfg, 5)
	rng := rand.New(rand.NewPCG(1, 2))
	const B, T = 2, 10
	tokens, targets := randomTokens(rng, B*T, cfg.Vocab), randomTokens(rng, B*T, cfg.Vocab)

	// The 2-block model gets blocks 0 and 2 of the 3-block one.
	full, _ := newTestModel(t, cfg, Options{}, params)
	sm, _ := newTestModel(t, short, Options{}, nil)
	sp := make([]float32, short.NumParams())
	for i, s := range sm.Layout().Specs {
		name := s.Name
		if strings.HasPrefix(name, "blocks.1.") {
			name = "blocks.2." + strings.TrimPrefix(name, "blocks.1.")
		}
		j, ok := full.Layout().Index(name)
		if !ok {
			t.Fatalf("no %s in the full model", name)
		}
		copy(sm.Layout().View(sp, i), full.Layout().View(params, j))
	}
	wantLoss, wantGrads := pldRun(t, short, sp, Options{}, nil, nil, tokens, targets, B)
	for _, ckpt := range []bool{false, true} {
		t.Run(fmt.Sprintf("checkpoint=%v", ckpt), func(t *testing.T) {
			loss, grads := pldRun(t, cfg, params, Options{Checkpoint: ckpt}, []bool{true, false, true}, []float32{1, 1, 1}, tokens, targets, B)
			if loss != wantLoss {
				t.Errorf("loss %v, the model without block 1 %v", loss, wantLoss)
			}
			for name, g := range grads {
				want, ok := wantGrads[name]
				switch {
				case strings.HasPrefix(name, "blocks.1."):
					if d := cmp.Diff(make([]float32, len(g)), g); d != "" {
						t.Errorf("%s: a skipped block's gradient is not zero", name)
					}
					continue
				case strings.HasPrefix(name, "blocks.2."):
					want = wantGrads["blocks.1."+strings.TrimPrefix(name, "blocks.2.")]
				case !ok:
					t.Fatalf("no %s in the short model", name)
				}
				if d := cmp.Diff(want, g, cmpopts.EquateApprox(1e-5, 1e-7)); d != "" {
					t.Errorf("%s (-short model +skipped block):\n%s", name, d)
				}
			}
		})
	}
}

// TestLayerDropScaleIsScaledProjections: dividing block l's branches by
// the keep probability 1/s is the unscaled model with block l's two output projections (weight
// and bias) multiplied by s; the gradient of a projection is s times the
// gradient there, every other gradient is the same.
func TestLayerDropScaleIsScaledProjections(t *testing.T) {
	cfg := Config{Vocab: 29, Context: 12, Dim: 24, Heads: 3, Layers: 2, MLP: 40, Tied: true}.WithDefaults()
	params := perturbedInit(cfg, 9)
	rng := rand.New(rand.NewPCG(7, 8))
	const B = 3
	tokens, targets := randomTokens(rng, B*12, cfg.Vocab), randomTokens(rng, B*12, cfg.Vocab)
	const s = 1.6
	m, _ := newTestModel(t, cfg, Options{}, params)
	proj := map[string]bool{}
	scaled := append([]float32(nil), params...)
	for i, sp := range m.Layout().Specs {
		if strings.HasPrefix(sp.Name, "blocks.1.") && strings.Contains(sp.Name, "proj") {
			proj[sp.Name] = true
			for j := range m.Layout().View(scaled, i) {
				m.Layout().View(scaled, i)[j] *= s
			}
		}
	}
	if len(proj) != 4 {
		t.Fatalf("found %d projection tensors in block 1, want 4 (attn.proj and mlp.proj weight and bias)", len(proj))
	}
	for _, ckpt := range []bool{false, true} {
		t.Run(fmt.Sprintf("checkpoint=%v", ckpt), func(t *testing.T) {
			wantLoss, wantGrads := pldRun(t, cfg, scaled, Options{Checkpoint: ckpt}, nil, nil, tokens, targets, B)
			loss, grads := pldRun(t, cfg, params, Options{Checkpoint: ckpt}, []bool{true, true}, []float32{1, 1 / s}, tokens, targets, B)
			if d := cmp.Diff(wantLoss, loss, cmpopts.EquateApprox(1e-6, 0)); d != "" {
				t.Errorf("loss (-scaled projections +scaled branches):\n%s", d)
			}
			for name, g := range grads {
				want := wantGrads[name]
				if proj[name] {
					want = append([]float32(nil), want...)
					for j := range want {
						want[j] *= s
					}
				}
				if d := cmp.Diff(want, g, cmpopts.EquateApprox(1e-4, 1e-6)); d != "" {
					t.Errorf("%s (-scaled projections +scaled branches):\n%s", name, d)
				}
			}
		})
	}
}

func TestSetLayerDropChecksLengths(t *testing.T) {
	cfg := Config{Vocab: 29, Context: 12, Dim: 24, Heads: 3, Layers: 2, MLP: 40}.WithDefaults()
	m, _ := newTestModel(t, cfg, Options{}, nil)
	if err := m.SetLayerDrop([]bool{true}, []float32{1}); err == nil || !strings.Contains(err.Error(), "the model has 2") {
		t.Errorf("SetLayerDrop with 1 of 2 blocks: %v", err)
	}
}

// TestLayerDropSkipAfterOverwriteGrads: after OverwriteGrads (zero_grad
// with set_to_none) a skipped block's gradient is zero, not the previous
// step's, as ZeRO reduces a .grad left None.
func TestLayerDropSkipAfterOverwriteGrads(t *testing.T) {
	cfg := Config{Vocab: 29, Context: 12, Dim: 24, Heads: 3, Layers: 2, MLP: 40}.WithDefaults()
	m, _ := newTestModel(t, cfg, Options{}, perturbedInit(cfg, 3))
	rng := rand.New(rand.NewPCG(5, 6))
	tokens, targets := randomTokens(rng, 2*8, cfg.Vocab), randomTokens(rng, 2*8, cfg.Vocab)
	for i := range m.Grads() {
		m.Grads()[i] = 7 // last step's gradient
	}
	m.OverwriteGrads()
	if err := m.SetLayerDrop([]bool{true, false}, []float32{1, 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forward(model.Batch{B: 2, Tokens: tokens, Targets: targets}); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(1); err != nil {
		t.Fatal(err)
	}
	for i, sp := range m.Layout().Specs {
		g := m.Layout().View(m.Grads(), i)
		switch {
		case strings.HasPrefix(sp.Name, "blocks.1."):
			if d := cmp.Diff(make([]float32, len(g)), g); d != "" {
				t.Errorf("%s: the skipped block keeps a stale gradient", sp.Name)
			}
		case g[0] == 7:
			t.Errorf("%s: not overwritten", sp.Name)
		}
	}
}
