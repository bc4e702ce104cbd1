package llama

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/internal/modeltest"
)

// loopGemm is a plain triple loop: slow, but it never allocates, which the
// allocation test needs (gonum's parallel Sgemm allocates).
type loopGemm struct{}

var _ model.Gemmer = loopGemm{}

func (loopGemm) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := range m {
		for j := range n {
			var s float32
			for p := range k {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += av * bv
			}
			if beta == 0 {
				c[i*ldc+j] = alpha * s
			} else {
				c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
			}
		}
	}
}

// newTestModel builds a model with fresh buffers: params from init (or
// zeros when init is nil), zeroed grads.
func newTestModel(t testing.TB, cfg Config, opt Options, init []float32) (*Model, *mem.Accountant) {
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
	if init != nil {
		copy(params, init)
	}
	if err := m.Bind(params, make([]float32, m.NumParams())); err != nil {
		t.Fatal(err)
	}
	return m, opt.Acct
}

// step runs Forward and Backward(scale) and returns the loss.
func step(t testing.TB, m *Model, b model.Batch, scale float32) float32 {
	t.Helper()
	loss, err := m.Forward(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(scale); err != nil {
		t.Fatal(err)
	}
	return loss
}

// randomTokens returns n ids in [0, vocab).
func randomTokens(rng *rand.Rand, n, vocab int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(vocab))
	}
	return out
}

// randomBatch is a batch of B rows of T random tokens and targets.
func randomBatch(rng *rand.Rand, B, T, vocab int) model.Batch {
	return model.Batch{B: B, Tokens: randomTokens(rng, B*T, vocab), Targets: randomTokens(rng, B*T, vocab)}
}

// packedBatch is a batch with position restarts, a block not starting at
// 0, ignored targets and a pad token (when pad >= 0).
func packedBatch(rng *rand.Rand, T, vocab, pad int) model.Batch {
	b := randomBatch(rng, 2, T, vocab)
	b.Positions = make([]int32, 2*T)
	for t := range T {
		b.Positions[t] = int32(t % (T/2 + 1)) // row 0: two samples
		b.Positions[T+t] = int32(t + 3)       // row 1: one continued sample
		if t == T/3 || t == T-1 || t%5 == 0 {
			b.Targets[t] = model.IgnoreIndex
		}
	}
	if pad >= 0 {
		b.Tokens[2], b.Tokens[T+4], b.Tokens[T+5] = int32(pad), int32(pad), int32(pad)
	}
	return b
}

// perturbedInit returns initialised parameters with the RMSNorm weights
// and biases moved off their 1/0 init, so that every gradient path is
// exercised.
func perturbedInit(cfg Config, seed uint64) []float32 {
	cfg = cfg.WithDefaults()
	l := cfg.Layout()
	p := make([]float32, l.Numel)
	cfg.InitRange(&l, seed, p, 0)
	rng := rand.New(rand.NewPCG(seed, 7))
	for i, s := range l.Specs {
		if s.Init.Kind == model.InitOnes || s.Init.Kind == model.InitZeros {
			v := l.View(p, i)
			for j := range v {
				v[j] += float32(0.1 * rng.NormFloat64())
			}
		}
	}
	return p
}

// golden is a case's golden.json.
type golden struct {
	Losses           []float64  `json:"losses"`
	LR               float64    `json:"lr"`
	Steps            int        `json:"steps"`
	B                int        `json:"B"`
	T                int        `json:"T"`
	LossDenom        []*float64 `json:"loss_denom"`
	PositionsGiven   bool       `json:"positions_given"`
	Final            bool       `json:"final"`
	InvFreq          []float64  `json:"inv_freq"`
	AttentionScaling float64    `json:"attention_scaling"`
}

func readGolden(t testing.TB, dir string) golden {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	return g
}

// goldenInts reads an I64 [steps, B, T] tensor of golden.safetensors as
// int32 per step.
func goldenInts(t testing.TB, f *model.SafetensorsFile, name string, steps, n int) [][]int32 {
	t.Helper()
	raw := make([]int64, steps*n)
	if err := f.ReadInt64(name, raw); err != nil {
		t.Fatal(err)
	}
	out := make([][]int32, steps)
	for s := range out {
		out[s] = make([]int32, n)
		for i := range n {
			out[s][i] = int32(raw[s*n+i])
		}
	}
	return out
}

// goldenTensors reads prefix+name for every parameter of l into a flat
// buffer of layout l.
func goldenTensors(t testing.TB, f *model.SafetensorsFile, l *model.Layout, prefix string) []float32 {
	t.Helper()
	out := make([]float32, l.Numel)
	for i, s := range l.Specs {
		if err := f.ReadFloat32(prefix+s.Name, l.View(out, i)); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed+1)) }

// contains reports whether err's message contains s.
func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }
