package half

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/x448/float16"
)

// benchN elements: 256 KiB of float32, resident in L2 so the figures
// measure the conversion rather than memory bandwidth.
const benchN = 1 << 16

func benchInput() []float32 {
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, benchN)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// timed runs op b.N times on benchN elements and reports the mean and the
// best throughput (the best is what the loop does when a shared machine
// lets it run).
func timed(b *testing.B, op func()) {
	best := time.Duration(math.MaxInt64)
	for range b.N {
		t0 := time.Now()
		op()
		best = min(best, time.Since(t0))
	}
	b.ReportMetric(float64(benchN)*float64(b.N)/b.Elapsed().Seconds(), "elem/s")
	b.ReportMetric(float64(benchN)/best.Seconds(), "best-elem/s")
}

func BenchmarkF32ToF16(b *testing.B) {
	src, dst := benchInput(), make([]uint16, benchN)
	timed(b, func() { F32ToF16(dst, src) })
}

func BenchmarkF16ToF32(b *testing.B) {
	src, dst := make([]uint16, benchN), make([]float32, benchN)
	F32ToF16(src, benchInput())
	timed(b, func() { F16ToF32(dst, src) })
}

// The x448 benchmarks time github.com/x448/float16's scalar conversions in
// the same loop shape, as a reference point measured in the same run.
func BenchmarkF32ToF16X448(b *testing.B) {
	src, dst := benchInput(), make([]uint16, benchN)
	timed(b, func() {
		for i, f := range src {
			dst[i] = float16.Fromfloat32(f).Bits()
		}
	})
}

func BenchmarkF16ToF32X448(b *testing.B) {
	src, dst := make([]uint16, benchN), make([]float32, benchN)
	F32ToF16(src, benchInput())
	timed(b, func() {
		for i, h := range src {
			dst[i] = float16.Frombits(h).Float32()
		}
	})
}

func BenchmarkF32ToBF16(b *testing.B) {
	src, dst := benchInput(), make([]uint16, benchN)
	timed(b, func() { F32ToBF16(dst, src) })
}

func BenchmarkBF16ToF32(b *testing.B) {
	src, dst := make([]uint16, benchN), make([]float32, benchN)
	F32ToBF16(src, benchInput())
	timed(b, func() { BF16ToF32(dst, src) })
}

// The Round benchmarks include refilling x from src (a copy of 256 KiB),
// so that every pass rounds unrounded values.
func BenchmarkRoundF16(b *testing.B) {
	src, x := benchInput(), make([]float32, benchN)
	timed(b, func() { copy(x, src); RoundF16(x) })
}

func BenchmarkRoundBF16(b *testing.B) {
	src, x := benchInput(), make([]float32, benchN)
	timed(b, func() { copy(x, src); RoundBF16(x) })
}
