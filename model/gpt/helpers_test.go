package gpt

import (
	"math/rand/v2"
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

// harnessTiny returns the tiny preset and the harness's initial weights.
func harnessTiny(t testing.TB) (Config, []float32) {
	t.Helper()
	cfg, err := Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	params := make([]float32, cfg.NumParams())
	if err := ReadWeights("testdata/gpt_init.safetensors", cfg, params); err != nil {
		t.Fatal(err)
	}
	return cfg, params
}

// harnessTokens returns the harness data: tokens [step=10][sample=16][33].
func harnessTokens(t testing.TB) []int64 {
	t.Helper()
	f, err := model.OpenSafetensors("testdata/gpt_data.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok := make([]int64, 10*16*33)
	if err := f.ReadInt64("tokens", tok); err != nil {
		t.Fatal(err)
	}
	return tok
}

// microBatch returns inputs and targets (4, 32) of the harness micro-batch
// (step s, micro m, rank r): samples [4*mb, 4*mb+4) of step s, mb = 2m+r.
func microBatch(tok []int64, s, m, r int) (idx, tgt []int32) {
	mb := 2*m + r
	for i := 4 * mb; i < 4*mb+4; i++ {
		row := tok[(s*16+i)*33:][:33]
		for t := range 32 {
			idx = append(idx, int32(row[t]))
			tgt = append(tgt, int32(row[t+1]))
		}
	}
	return idx, tgt
}

// randomTokens returns n ids in [0, vocab).
func randomTokens(rng *rand.Rand, n, vocab int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(vocab))
	}
	return out
}

// perturbedInit returns initialised parameters with LayerNorm weights and
// all biases moved off their 1/0 init, so that every gradient path is
// exercised.
func perturbedInit(cfg Config, seed uint64) []float32 {
	l := cfg.Layout()
	p := make([]float32, l.Numel)
	l.InitRange(seed, p, 0)
	rng := rand.New(rand.NewPCG(seed, 7))
	for i, s := range l.Specs {
		if s.Init.Kind == model.InitOnes || s.Init.Kind == model.InitZeros {
			for j := range l.View(p, i) {
				l.View(p, i)[j] += float32(0.1 * rng.NormFloat64())
			}
		}
	}
	return p
}

func newAcct() *mem.Accountant { return mem.NewAccountant(0) }
