package train

import (
	"math"
	"math/rand/v2"
	"testing"
)

// countNonFinite finds every NaN and ±Inf, wherever it lies in the
// eight-value groups and blocks of its fast path, and nothing else
// (the largest finite values, subnormals, negative zero).
func TestCountNonFinite(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7fc00001), math.Float32frombits(0xff800001)}
	good := []float32{math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, float32(math.Copysign(0, -1)), 1, -2.5}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 7, 8, 9, 1023, 1024, 1025, 3000} {
		x := make([]float32, n)
		for i := range x {
			x[i] = good[rng.IntN(len(good))]
		}
		if c, f := countNonFinite(x); c != 0 || f != -1 {
			t.Fatalf("n=%d, all finite: count %d, first %d", n, c, f)
		}
		for _, pos := range []int{0, n / 2, n - 1} {
			if n == 0 {
				continue
			}
			for _, b := range bad {
				y := append([]float32(nil), x...)
				y[pos] = b
				if c, f := countNonFinite(y); c != 1 || f != pos {
					t.Fatalf("n=%d, %x at %d: count %d, first %d", n, math.Float32bits(b), pos, c, f)
				}
			}
		}
		if n > 1 { // a view starting at an odd element
			y := append([]float32(nil), x...)
			y[n-1] = bad[0]
			if c, f := countNonFinite(y[1:]); c != 1 || f != n-2 {
				t.Fatalf("n=%d, offset view: count %d, first %d", n, c, f)
			}
		}
		if n >= 3 {
			y := append([]float32(nil), x...)
			y[n-1], y[1] = bad[0], bad[1]
			if c, f := countNonFinite(y); c != 2 || f != 1 {
				t.Fatalf("n=%d, two: count %d, first %d", n, c, f)
			}
		}
	}
}

func BenchmarkCountNonFinite(b *testing.B) {
	x := make([]float32, 16<<20)
	for i := range x {
		x[i] = float32(i)
	}
	b.SetBytes(int64(4 * len(x)))
	for range b.N {
		countNonFinite(x)
	}
}
