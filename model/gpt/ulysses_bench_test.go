package gpt

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/internal/modeltest"
)

// BenchmarkUlysses times one Forward+Backward of a small GPT (C 64, 4
// heads, 2 blocks, V 256) on one sequence of T tokens held by a
// sequence-parallel group of sp in-process ranks, and reports the peak
// activation bytes of one rank (mem.Activations, what the accountant
// measured) and tokens/s of the whole group. The ranks are goroutines on
// the same cores, so tokens/s shows the cost of the exchanges and of the
// split, not the speed-up of sp devices. Run with e.g.
//
//	go test ./model/gpt -run '^$' -bench 'Ulysses/T=1024' -benchtime 3x
func BenchmarkUlysses(b *testing.B) {
	cfg := Config{Vocab: 256, Context: 4096, Dim: 64, Heads: 4, Layers: 2}
	for _, T := range []int{1024, 4096} {
		for _, sp := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("T=%d/sp=%d", T, sp), func(b *testing.B) {
				l := cfg.WithDefaults().Layout()
				params := make([]float32, l.Numel)
				l.InitRange(1, params, 0)
				rng := rand.New(rand.NewPCG(1, 2))
				tokens, targets := randomTokens(rng, T, cfg.Vocab), randomTokens(rng, T, cfg.Vocab)
				gemms := make([]model.Gemmer, sp)
				for r := range gemms {
					gemms[r] = modeltest.Gonum(b)
				}
				peak := make([]int64, sp)
				var elapsed time.Duration
				n := b.N
				b.ResetTimer()
				err := inproc.New(sp, inproc.Options{}).Run(func(c comm.Comm) error {
					r := c.Rank()
					acct := mem.NewAccountant(r)
					opt := Options{Gemm: gemms[r], Acct: acct, Workers: max(1, 2/sp)}
					if sp > 1 {
						opt.SeqParallel = c
					}
					m, err := New(cfg, opt)
					if err != nil {
						return err
					}
					defer m.Close()
					if err := m.Bind(append([]float32(nil), params...), make([]float32, len(params))); err != nil {
						return err
					}
					batch := model.Batch{B: 1, Tokens: slice(tokens, 1, T, sp, r), Targets: slice(targets, 1, T, sp, r)}
					pass := func() error {
						m.OverwriteGrads()
						if _, err := m.Forward(batch); err != nil {
							return err
						}
						return m.Backward(1)
					}
					if err := pass(); err != nil { // warm-up: allocates the activations
						return err
					}
					t0 := time.Now()
					for range n {
						if err := pass(); err != nil {
							return err
						}
					}
					if r == 0 {
						elapsed = time.Since(t0)
					}
					peak[r] = acct.Snapshot().PeakBytes(mem.Device, mem.Activations)
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(peak[0]), "act-bytes/rank")
				b.ReportMetric(float64(T*n)/elapsed.Seconds(), "tokens/s")
			})
		}
	}
}
