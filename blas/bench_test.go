package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkSgemm multiplies n×n matrices (C = A·B) three ways, on one
// thread so the figures compare per-core speed:
//
//   - ours: Engine.Sgemm of the OpenBLAS engine (validation + one cgo call),
//   - direct: the same cblas_sgemm pointer called in a loop from C,
//   - gonum: the pure-Go engine (GOMAXPROCS=1 is not forced; run with
//     -cpu 1 for a one-core gonum figure).
//
// ours ÷ direct is the cost of the Go path; it should be near 1. On a
// shared machine the separate sub-benchmarks drift with the load, so
// "interleaved" alternates the two paths call by call (swapping which goes
// first) and reports the best time of each and their throughput ratio,
// ours/direct: the best of N is what the code can do when the machine
// lets it run.
func BenchmarkSgemm(b *testing.B) {
	ob, oerr := New(Options{Backend: OpenBLAS, Threads: 1})
	gn, _ := New(Options{Backend: Gonum})
	for _, n := range []int{256, 512, 1024} {
		r := rand.New(rand.NewPCG(1, uint64(n)))
		x, y, z := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
		for i := range x {
			x[i], y[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
		}
		flops := 2 * float64(n) * float64(n) * float64(n)
		b.Run(fmt.Sprintf("n=%d/ours", n), func(b *testing.B) {
			if oerr != nil {
				b.Skip(oerr)
			}
			timed(b, flops, func() { ob.Sgemm(false, false, n, n, n, 1, x, n, y, n, 0, z, n) })
		})
		b.Run(fmt.Sprintf("n=%d/direct", n), func(b *testing.B) {
			if oerr != nil {
				b.Skip(oerr)
			}
			directSgemmLoop(ob, b.N, false, false, n, n, n, 1, x, n, y, n, 0, z, n)
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run(fmt.Sprintf("n=%d/interleaved", n), func(b *testing.B) {
			if oerr != nil {
				b.Skip(oerr)
			}
			ours, direct := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
			for i := range b.N {
				for j := range 2 {
					t0 := time.Now()
					if (i+j)%2 == 0 {
						ob.Sgemm(false, false, n, n, n, 1, x, n, y, n, 0, z, n)
						ours = min(ours, time.Since(t0))
					} else {
						directSgemmLoop(ob, 1, false, false, n, n, n, 1, x, n, y, n, 0, z, n)
						direct = min(direct, time.Since(t0))
					}
				}
			}
			b.ReportMetric(flops/ours.Seconds()/1e9, "best-ours-GFLOP/s")
			b.ReportMetric(flops/direct.Seconds()/1e9, "best-direct-GFLOP/s")
			b.ReportMetric(direct.Seconds()/ours.Seconds(), "ours/direct")
		})
		b.Run(fmt.Sprintf("n=%d/gonum", n), func(b *testing.B) {
			timed(b, flops, func() { gn.Sgemm(false, false, n, n, n, 1, x, n, y, n, 0, z, n) })
		})
	}
}

// timed runs op b.N times and reports the mean and the best throughput.
func timed(b *testing.B, flops float64, op func()) {
	best := time.Duration(math.MaxInt64)
	for range b.N {
		t0 := time.Now()
		op()
		best = min(best, time.Since(t0))
	}
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	b.ReportMetric(flops/best.Seconds()/1e9, "best-GFLOP/s")
}
