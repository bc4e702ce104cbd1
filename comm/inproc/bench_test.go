package inproc

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
)

// benchBytes is the payload: the all-reduce buffer, the reduce-scatter
// input and the all-gather output of each rank (NCCL-tests' "size").
const benchBytes = 64 << 20

// Each benchmark reports, besides ns/op for one collective:
//
//	GB/s         payload / time (NCCL-tests' algbw)
//	memcpy-GB/s  one goroutine's copy() of the same 64 MiB, in the same run
//	xmemcpy      GB/s ÷ memcpy-GB/s
//	xparcopy     GB/s ÷ the rate of n goroutines each copying their own
//	             64 MiB at once: the same bytes as the collective moves,
//	             without communicating (the collective's ceiling on a
//	             machine whose memory or cores are shared by the ranks)
//
// Run them with a fixed count, e.g. -bench . -benchtime 10x: b.N 64 MiB
// collectives per rank.
func BenchmarkAllReduce(b *testing.B)     { benchCollective(b, comm.KindAllReduce) }
func BenchmarkReduceScatter(b *testing.B) { benchCollective(b, comm.KindReduceScatter) }
func BenchmarkAllGather(b *testing.B)     { benchCollective(b, comm.KindAllGather) }

func benchCollective(b *testing.B, kind comm.Kind) {
	for _, n := range []int{2, 4} {
		b.Run(fmt.Sprintf("ranks=%d/64MiB", n), func(b *testing.B) {
			whole := benchBytes / 4
			part := whole / n
			big, small := make([][]float32, n), make([][]float32, n)
			for r := range n {
				big[r], small[r] = filledWith(whole, 1), filledWith(part, 1) // touched: no page faults in the loop
			}
			w := New(n, Options{})
			ctx := context.Background()
			b.SetBytes(benchBytes)
			b.ResetTimer()
			start := time.Now()
			err := w.Run(func(c comm.Comm) error {
				r := c.Rank()
				for range b.N {
					var h comm.Handle
					switch kind {
					case comm.KindAllReduce:
						h = c.AllReduce(ctx, comm.F32(big[r]), comm.Sum)
					case comm.KindReduceScatter:
						h = c.ReduceScatter(ctx, comm.F32(small[r]), comm.F32(big[r]), comm.Sum)
					case comm.KindAllGather:
						h = c.AllGather(ctx, comm.F32(big[r]), comm.F32(small[r]))
					}
					if err := h.Wait(); err != nil {
						return err
					}
				}
				return nil
			})
			elapsed := time.Since(start)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			copyGBs, parGBs := copyRates(b.N, big, n)
			gbs := float64(benchBytes) * float64(b.N) / elapsed.Seconds() / 1e9
			b.ReportMetric(gbs, "GB/s")
			b.ReportMetric(copyGBs, "memcpy-GB/s")
			b.ReportMetric(gbs/copyGBs, "xmemcpy")
			b.ReportMetric(gbs/parGBs, "xparcopy")
		})
	}
}

// copyRates times plain copies of the benchmark's bytes, iters times each:
// one goroutine copying one rank's 64 MiB (memcpy), and n goroutines each
// copying their own rank's 64 MiB at once (parcopy: what all ranks of an
// all-reduce or all-gather read and write, moved without communicating).
// Both are in GB/s of one rank's 64 MiB, like the collective's GB/s.
func copyRates(iters int, srcs [][]float32, n int) (memcpy, parcopy float64) {
	dsts := make([][]float32, n)
	for r := range dsts {
		dsts[r] = filledWith(len(srcs[r]), 0)
	}
	start := time.Now()
	for range iters {
		copy(dsts[0], srcs[0])
	}
	one := time.Since(start)
	start = time.Now()
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range iters {
				copy(dsts[r], srcs[r])
			}
		}()
	}
	wg.Wait()
	all := time.Since(start)
	bytes := float64(benchBytes) * float64(iters)
	return bytes / one.Seconds() / 1e9, bytes / all.Seconds() / 1e9
}

func filledWith(n int, v float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = v
	}
	return x
}
