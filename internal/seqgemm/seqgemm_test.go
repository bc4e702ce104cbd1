package seqgemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// reference is the defining loop, written independently of scalar.
func reference(m, n, k int, a []float32, ai, al int, b []float32, ldb int) [][]float32 {
	out := make([][]float32, m)
	for i := range out {
		out[i] = make([]float32, n)
		for j := range n {
			var s float32
			for l := range k {
				p := a[i*ai+l*al] * b[l*ldb+j]
				s = s + p
			}
			out[i][j] = s
		}
	}
	return out
}

// fill draws values whose products and sums round often, with some
// zeros of both signs, subnormals and huge values mixed in.
func fill(rng *rand.Rand, x []float32) {
	for i := range x {
		switch rng.IntN(40) {
		case 0:
			x[i] = 0
		case 1:
			x[i] = float32(math.Copysign(0, -1))
		case 2:
			x[i] = math.Float32frombits(rng.Uint32N(1 << 23)) // subnormal
		case 3:
			x[i] = float32(rng.NormFloat64()) * 1e18
		default:
			x[i] = float32(rng.NormFloat64())
		}
	}
}

func TestMulMatchesTheLoopBitForBit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type shape struct{ m, n, k int }
	shapes := []shape{{1, 1, 1}, {4, 16, 1}, {4, 16, 64}, {5, 17, 3}, {3, 8, 7}, {7, 33, 65}, {32, 16, 32}, {13, 40, 256}, {4, 24, 9}, {9, 7, 5}, {2, 3, 0}}
	for _, s := range shapes {
		for _, trans := range []bool{false, true} {
			t.Run(fmt.Sprintf("%dx%dx%d/transA=%v", s.m, s.n, s.k, trans), func(t *testing.T) {
				// a is m×k (or stored k×m when trans), b is k×n; both and
				// c get padded leading dimensions.
				ai, al := s.k+3, 1
				na := s.m * (s.k + 3)
				if trans {
					ai, al = 1, s.m+2
					na = max(s.k, 1) * (s.m + 2)
				}
				ldb, ldc := s.n+5, s.n+1
				a := make([]float32, na)
				b := make([]float32, max(s.k, 1)*ldb)
				c := make([]float32, s.m*ldc)
				fill(rng, a)
				fill(rng, b)
				for i := range c {
					c[i] = 42 // must be overwritten, or kept between rows
				}
				Mul(s.m, s.n, s.k, a, ai, al, b, ldb, c, ldc)
				want := reference(s.m, s.n, s.k, a, ai, al, b, ldb)
				for i := range s.m {
					for j := range ldc {
						got := c[i*ldc+j]
						if j >= s.n {
							if got != 42 {
								t.Fatalf("c[%d][%d] outside the product was written: %v", i, j, got)
							}
							continue
						}
						if math.Float32bits(got) != math.Float32bits(want[i][j]) && !(got != got && want[i][j] != want[i][j]) {
							t.Fatalf("c[%d][%d] = %v (%#x), the loop gives %v (%#x)", i, j, got, math.Float32bits(got), want[i][j], math.Float32bits(want[i][j]))
						}
					}
				}
			})
		}
	}
}

func TestMulPanicsOnShortSlices(t *testing.T) {
	a, b, c := make([]float32, 4*8), make([]float32, 8*16), make([]float32, 4*16)
	cases := []struct {
		name string
		call func()
	}{
		{"a", func() { Mul(4, 16, 9, a, 8, 1, b, 16, c, 16) }},
		{"b", func() { Mul(4, 16, 8, a, 8, 1, b[:len(b)-1], 16, c, 16) }},
		{"c", func() { Mul(4, 16, 8, a, 8, 1, b, 16, c[:len(c)-1], 16) }},
		{"ldc", func() { Mul(4, 16, 8, a, 8, 1, b, 16, c, 15) }},
		{"negative", func() { Mul(-1, 16, 8, a, 8, 1, b, 16, c, 16) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			tc.call()
		})
	}
}

// BenchmarkMul compares Mul with the scalar loop on one attention head's
// score product (256×256×64) in the same run.
func BenchmarkMul(b *testing.B) {
	const T, HS = 256, 64
	rng := rand.New(rand.NewPCG(3, 4))
	q, kt, s := make([]float32, T*HS), make([]float32, HS*T), make([]float32, T*T)
	fill(rng, q)
	fill(rng, kt)
	b.Run("seqgemm", func(b *testing.B) {
		for b.Loop() {
			Mul(T, T, HS, q, HS, 1, kt, T, s, T)
		}
		b.ReportMetric(float64(T*T*HS)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
	})
	b.Run("loop", func(b *testing.B) {
		for b.Loop() {
			scalar(T, T, 0, HS, q, HS, 1, kt, T, s, T)
		}
		b.ReportMetric(float64(T*T*HS)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
	})
}
