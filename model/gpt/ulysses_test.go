package gpt

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/internal/fdiff"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/internal/modeltest"
)

// spBatch is one micro-batch pair: two Forward/Backward passes, the first
// after OverwriteGrads, the second accumulating.
type spBatch struct {
	B, T            int
	tokens, targets [2][]int32
}

func newSPBatch(cfg Config, B, T int, seed uint64) spBatch {
	rng := rand.New(rand.NewPCG(seed, 3))
	sb := spBatch{B: B, T: T}
	for k := range 2 {
		sb.tokens[k] = randomTokens(rng, B*T, cfg.Vocab)
		sb.targets[k] = randomTokens(rng, B*T, cfg.Vocab)
		for i := range sb.targets[k] {
			if rng.IntN(7) == 0 {
				sb.targets[k][i] = model.IgnoreIndex // uneven counts per rank
			}
		}
	}
	return sb
}

// slice is rank r's tokens of every row: columns [r·T/sp, (r+1)·T/sp).
func slice(x []int32, B, T, sp, r int) []int32 {
	Tl := T / sp
	out := make([]int32, 0, B*Tl)
	for b := range B {
		out = append(out, x[b*T+r*Tl:][:Tl]...)
	}
	return out
}

// spRun trains the two passes on sp ranks of one sequence-parallel group
// (sp = 1: one plain model) and returns each rank's losses and the sum of
// the ranks' gradients.
func spRun(t *testing.T, cfg Config, init []float32, sb spBatch, sp int, checkpoint bool) ([][2]float32, []float32) {
	t.Helper()
	losses := make([][2]float32, sp)
	grads := make([][]float32, sp)
	gemms := make([]model.Gemmer, sp)
	for r := range gemms {
		gemms[r] = modeltest.Gonum(t)
	}
	var mu sync.Mutex
	err := inproc.New(sp, inproc.Options{}).Run(func(c comm.Comm) error {
		r := c.Rank()
		opt := Options{Gemm: gemms[r], Acct: newAcct(), Checkpoint: checkpoint, Workers: 2}
		if sp > 1 {
			opt.SeqParallel = c
		}
		m, err := New(cfg, opt)
		if err != nil {
			return err
		}
		defer m.Close()
		params, g := append([]float32(nil), init...), make([]float32, len(init))
		for i := range g {
			g[i] = float32(math.NaN()) // OverwriteGrads must write every element
		}
		if err := m.Bind(params, g); err != nil {
			return err
		}
		m.OverwriteGrads()
		for k := range 2 {
			b := model.Batch{B: sb.B, Tokens: slice(sb.tokens[k], sb.B, sb.T, sp, r), Targets: slice(sb.targets[k], sb.B, sb.T, sp, r)}
			if k == 1 {
				b.LossDenom = 77 // HF's num_items_in_batch: a share of a larger sum
			}
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

// TestUlyssesMatchesOneRank: the tiny GPT (4 heads, T = 32) and a tied
// variant with 8 heads, on 2 and 4 sequence-parallel ranks, with and
// without activation checkpointing, give every rank the one-rank loss of
// the whole sequences (within 1e-6 relative) and gradients whose sum over
// the ranks is the one-rank gradient (each tensor within 1e-6 of its
// norm), over a pass that overwrites the gradients and one that
// accumulates (with a LossDenom, as HF's num_items_in_batch sets it),
// with ignored targets spread unevenly over the ranks.
func TestUlyssesMatchesOneRank(t *testing.T) {
	tiny, _ := Preset("tiny")
	tied := tiny
	tied.Heads, tied.Tied = 8, true
	for _, tc := range []struct {
		name string
		cfg  Config
		sps  []int
	}{{"tiny", tiny, []int{2, 4}}, {"tied-8-heads", tied, []int{2, 4, 8}}} {
		init := perturbedInit(tc.cfg, 5)
		sb := newSPBatch(tc.cfg, 2, 32, 11)
		wantLoss, wantGrad := spRun(t, tc.cfg, init, sb, 1, false)
		for _, sp := range tc.sps {
			for _, ck := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/sp%d/checkpoint=%v", tc.name, sp, ck), func(t *testing.T) {
					losses, grad := spRun(t, tc.cfg, init, sb, sp, ck)
					for r, l := range losses {
						for k := range 2 {
							if d := math.Abs(float64(l[k]-wantLoss[0][k])) / float64(wantLoss[0][k]); d > 1e-6 {
								t.Errorf("rank %d pass %d: loss %v, one rank %v (%.2g relative)", r, k, l[k], wantLoss[0][k], d)
							}
						}
					}
					l := tc.cfg.WithDefaults().Layout()
					for i, s := range l.Specs {
						got, want := l.View(grad, i), l.View(wantGrad, i)
						abs, rel := fdiff.Weights(got, want)
						if math.IsNaN(abs) || rel > 1e-6 {
							t.Errorf("%s: gradient max |Δ| %.3g, relative %.3g", s.Name, abs, rel)
						}
					}
				})
			}
		}
	}
}

// TestUlyssesRefusesHeads: heads not divisible by the group size are
// refused at New and by CheckSeqParallel, naming sequence_parallel_size.
func TestUlyssesRefusesHeads(t *testing.T) {
	tiny, _ := Preset("tiny")
	if err := tiny.CheckSeqParallel(3, 30); err == nil || !strings.Contains(err.Error(), "sequence_parallel_size 3 does not divide the GPT's 4 attention heads") {
		t.Errorf("CheckSeqParallel(3): %v", err)
	}
	if err := tiny.CheckSeqParallel(2, 31); err == nil || !strings.Contains(err.Error(), "sequence length 31") {
		t.Errorf("CheckSeqParallel(2, T=31): %v", err)
	}
	if err := tiny.CheckSeqParallel(2, 32); err != nil {
		t.Errorf("CheckSeqParallel(2, 32): %v", err)
	}
	err := inproc.New(3, inproc.Options{}).Run(func(c comm.Comm) error {
		_, err := New(tiny, Options{Gemm: loopGemm{}, Acct: newAcct(), SeqParallel: c})
		if err == nil || !strings.Contains(err.Error(), "sequence_parallel_size") {
			t.Errorf("New with 4 heads on 3 ranks: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
