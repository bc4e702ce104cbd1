package llama

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/internal/modeltest"
)

// The goldens under testdata/<case> come from testdata/reference: a plain
// PyTorch implementation of each family written from the transformers
// sources (llama_ref.py), run on Debian's torch 1.13 in float32 (see
// testdata/reference/README.md). Each case is a checkpoint directory, the
// batches of a few SGD steps, the per-step losses, the step-1 logits and
// gradients and, for some, the weights after the last step.

// parityCases names the case directories and what each one exercises.
var parityCases = []struct{ dir, what string }{
	{"llama3", "Llama-3: GQA, llama3 RoPE, sharded F32 checkpoint with an inv_freq buffer, untied"},
	{"qwen2", "Qwen2: q/k/v bias, tied (lm_head.weight stored anyway), a padding token"},
	{"qwen3", "Qwen3: q/k norm, head_dim 16 != 32/4, tied, BF16 checkpoint, rope_parameters"},
	{"mistral", "Mistral: sliding window 5 < T=16, one kv head, F16 checkpoint"},
	{"packed", "packing: position restarts, ignored targets, a row without targets, sum/num_items; Llama q/k/v/o and MLP biases"},
	{"yarn", "yarn RoPE, Qwen2 sliding window on layer 1 only, positions 40..55"},
	{"linear", "linear RoPE (legacy type key), tied, positions 100..115"},
}

// TestParityWithPyTorch loads each case's checkpoint directory, runs its
// steps of Forward, Backward and SGD and compares, within 1e-5 relative
// (float32; summation orders differ), the losses, the step-1 logits and
// gradients, and the final weights.
func TestParityWithPyTorch(t *testing.T) {
	for _, pc := range parityCases {
		t.Run(pc.dir, func(t *testing.T) {
			t.Log(pc.what)
			runParity(t, filepath.Join("testdata", pc.dir), Options{})
		})
	}
}

// TestParityCheckpointedWithPyTorch repeats two cases with activation
// checkpointing (each layer recomputed in backward).
func TestParityCheckpointedWithPyTorch(t *testing.T) {
	for _, dir := range []string{"qwen3", "packed"} {
		t.Run(dir, func(t *testing.T) { runParity(t, filepath.Join("testdata", dir), Options{Checkpoint: true}) })
	}
}

func runParity(t *testing.T, dir string, opt Options) {
	const tol = 1e-5
	g := readGolden(t, dir)
	cfg, params, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := newTestModel(t, cfg, opt, params)
	l := m.Layout()
	f, err := model.OpenSafetensors(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := g.B * g.T
	tokens := goldenInts(t, f, "tokens", g.Steps, n)
	targets := goldenInts(t, f, "targets", g.Steps, n)
	positions := goldenInts(t, f, "positions", g.Steps, n)
	lr := float32(g.LR)
	for s := range g.Steps {
		b := model.Batch{B: g.B, Tokens: tokens[s], Targets: targets[s]}
		if g.PositionsGiven {
			b.Positions = positions[s]
		}
		if d := g.LossDenom[s]; d != nil {
			b.LossDenom = *d
		}
		m.OverwriteGrads()
		loss, err := m.Forward(b)
		if err != nil {
			t.Fatal(err)
		}
		modeltest.CheckLoss(t, fmt.Sprintf("step %d loss", s+1), loss, g.Losses[s], tol)
		if s == 0 {
			want := make([]float32, n*cfg.Vocab)
			if err := f.ReadFloat32("logits", want); err != nil {
				t.Fatal(err)
			}
			checkClose(t, "step 1 logits", m.Logits(), want, tol)
		}
		if err := m.Backward(1); err != nil {
			t.Fatal(err)
		}
		if s == 0 {
			modeltest.CheckGrads(t, l, m.Grads(), goldenTensors(t, f, l, "grad/"), tol)
		}
		p, gr := m.Params(), m.Grads()
		for i := range p {
			p[i] -= float32(lr * gr[i])
		}
	}
	if !g.Final {
		return
	}
	want := goldenTensors(t, f, l, "final/")
	for i, s := range l.Specs {
		checkClose(t, "final "+s.Name, l.View(m.Params(), i), l.View(want, i), tol)
	}
}

// checkClose fails when max |got − want| exceeds tol times max |want|.
func checkClose(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	var wmax, dmax float64
	for i, w := range want {
		wmax = max(wmax, math.Abs(float64(w)))
		dmax = max(dmax, math.Abs(float64(got[i]-w)))
	}
	if dmax > tol*wmax || math.IsNaN(dmax) {
		t.Errorf("%s: max |Δ| %.3g, largest value %.3g (rel %.2e > %.0e)", what, dmax, wmax, dmax/wmax, tol)
	}
}
