package llama

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/internal/fdiff"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
)

// cutRows is rank r's columns [r·T/sp, (r+1)·T/sp) of every row of x.
func cutRows(x []int32, B, T, sp, r int) []int32 {
	if x == nil {
		return nil
	}
	Tl := T / sp
	out := make([]int32, 0, B*Tl)
	for b := range B {
		out = append(out, x[b*T+r*Tl:][:Tl]...)
	}
	return out
}

// spRun runs two Forward/Backward passes (the first after OverwriteGrads,
// the second accumulating) on sp ranks of one group and returns each
// rank's losses and the sum of the ranks' gradients.
func spRun(t *testing.T, cfg Config, init []float32, bs [2]model.Batch, sp int, checkpoint bool) ([][2]float32, []float32) {
	t.Helper()
	losses := make([][2]float32, sp)
	grads := make([][]float32, sp)
	var mu sync.Mutex
	err := inproc.New(sp, inproc.Options{}).Run(func(c comm.Comm) error {
		r := c.Rank()
		gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
		if err != nil {
			return err
		}
		opt := Options{Gemm: gemm, Acct: mem.NewAccountant(r), Checkpoint: checkpoint, Workers: 2}
		if sp > 1 {
			opt.SeqParallel = c
		}
		m, err := New(cfg, opt)
		if err != nil {
			return err
		}
		defer m.Close()
		g := make([]float32, len(init))
		for i := range g {
			g[i] = float32(math.NaN())
		}
		if err := m.Bind(append([]float32(nil), init...), g); err != nil {
			return err
		}
		m.OverwriteGrads()
		for k, full := range bs {
			T := len(full.Tokens) / full.B
			b := model.Batch{B: full.B, Tokens: cutRows(full.Tokens, full.B, T, sp, r), Targets: cutRows(full.Targets, full.B, T, sp, r),
				Positions: cutRows(full.Positions, full.B, T, sp, r), LossDenom: full.LossDenom}
			loss, err := m.Forward(b)
			if err != nil {
				return err
			}
			if err := m.Backward(1); err != nil {
				return err
			}
			losses[r][k] = loss
		}
		mu.Lock()
		grads[r] = g
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sum := make([]float32, len(init))
	for _, g := range grads {
		for i, v := range g {
			sum[i] += v
		}
	}
	return losses, sum
}

// TestUlyssesMatchesOneRank: tiny Llama-family decoders on 2 and 4
// sequence-parallel ranks give every rank the one-rank loss of the whole
// sequences (1e-6 relative) and gradients whose sum over the ranks is the
// one-rank gradient (each tensor within 1e-6 of its norm): grouped-query
// attention with the kv heads split (tiny-llama, 2 kv heads, sp 2) and
// replicated (sp 4; tiny-mistral's single kv head with its sliding
// window), q/k norm (tiny-qwen3), with and without checkpointing, over a
// plain pass and a packed one whose samples restart inside a rank's
// slice and span ranks.
func TestUlyssesMatchesOneRank(t *testing.T) {
	for _, tc := range []struct {
		preset string
		sps    []int
	}{{"tiny-llama", []int{2, 4}}, {"tiny-mistral", []int{2, 4}}, {"tiny-qwen3", []int{2}}} {
		cfg, err := Preset(tc.preset)
		if err != nil {
			t.Fatal(err)
		}
		init := perturbedInit(cfg, 3)
		rng := newRand(9)
		bs := [2]model.Batch{randomBatch(rng, 2, 32, cfg.Vocab), packedBatch(rng, 32, cfg.Vocab, -1)}
		bs[1].LossDenom = 77 // HF's num_items_in_batch
		wantLoss, wantGrad := spRun(t, cfg, init, bs, 1, false)
		for _, sp := range tc.sps {
			for _, ck := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/sp%d/checkpoint=%v", tc.preset, sp, ck), func(t *testing.T) {
					losses, grad := spRun(t, cfg, init, bs, sp, ck)
					for r, l := range losses {
						for k := range 2 {
							if d := math.Abs(float64(l[k]-wantLoss[0][k])) / float64(wantLoss[0][k]); d > 1e-6 {
								t.Errorf("rank %d pass %d: loss %v, one rank %v (%.2g relative)", r, k, l[k], wantLoss[0][k], d)
							}
						}
					}
					l := cfg.Layout()
					for i, s := range l.Specs {
						abs, rel := fdiff.Weights(l.View(grad, i), l.View(wantGrad, i))
						if math.IsNaN(abs) || rel > 1e-6 {
							t.Errorf("%s: gradient max |Δ| %.3g, relative %.3g", s.Name, abs, rel)
						}
					}
				})
			}
		}
	}
}

// TestUlyssesRefuses: heads, kv heads and lengths that the group size
// does not fit are refused naming sequence_parallel_size.
func TestUlyssesRefuses(t *testing.T) {
	cfg, _ := Preset("tiny-llama") // 4 heads, 2 kv heads
	for _, tc := range []struct {
		sp, T int
		want  string
	}{
		{3, 30, "sequence_parallel_size 3 does not divide the 4 attention heads"},
		{3, 30, "sequence_parallel_size 3 and the 2 key/value heads"},
		{2, 31, "does not divide the sequence length 31"},
	} {
		if err := cfg.CheckSeqParallel(tc.sp, tc.T); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sp %d T %d: %v, want %q", tc.sp, tc.T, err, tc.want)
		}
	}
	if err := cfg.CheckSeqParallel(4, 32); err != nil {
		t.Errorf("sp 4 (kv heads replicated): %v", err)
	}
}
