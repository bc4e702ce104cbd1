package half

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRoundVecMatchesScalar: RoundBF16 and RoundF16 (eight lanes at a
// time where the CPU has AVX2) give NearestBF16's and NearestF16's bits
// for every float32 bit pattern on a stride through all 2^32 of them,
// every pattern near the fp16 and bf16 boundaries (zero, the subnormal
// limit, the overflow threshold, Inf, NaN, both signs), and random
// slices of mixed values at every length up to 40 and offsets that
// split the eights.
func TestRoundVecMatchesScalar(t *testing.T) {
	pats := testPatterns()
	check := func(name string, round func([]float32), near func(float32) float32, in []float32) {
		t.Helper()
		got := append([]float32(nil), in...)
		round(got)
		for i, f := range in {
			if w := near(f); math.Float32bits(got[i]) != math.Float32bits(w) {
				t.Fatalf("%s(%#08x) = %#08x, Nearest gives %#08x", name, math.Float32bits(f), math.Float32bits(got[i]), math.Float32bits(w))
			}
		}
	}
	in := make([]float32, len(pats))
	for i, p := range pats {
		in[i] = math.Float32frombits(p)
	}
	check("RoundBF16", RoundBF16, NearestBF16, in)
	check("RoundF16", RoundF16, NearestF16, in)

	rng := rand.New(rand.NewPCG(1, 2))
	pool := []float32{0, float32(math.Copysign(0, -1)), 1e-6, -3e-7, 65519, 65520, 70000, float32(math.Inf(1)), float32(math.NaN())}
	for n := 0; n <= 40; n++ {
		for off := range 8 {
			x := make([]float32, off+n)
			for i := range x {
				if rng.IntN(6) == 0 {
					x[i] = pool[rng.IntN(len(pool))]
				} else {
					x[i] = float32(rng.NormFloat64() * 10)
				}
			}
			check("RoundBF16", RoundBF16, NearestBF16, x[off:])
			check("RoundF16", RoundF16, NearestF16, x[off:])
		}
	}
	t.Logf("vector rounding: %v", haveRoundVec)
}

// testPatterns are float32 bit patterns on a stride through all 2^32 and
// around every fp16 and bf16 boundary, both signs.
func testPatterns() []uint32 {
	var pats []uint32
	for p := uint64(0); p < 1<<32; p += 4099 {
		pats = append(pats, uint32(p))
	}
	for _, edge := range []uint32{0, 0x00000001, 0x387FFFFF, 0x38800000, 0x477FEFFF, 0x477FF000, 0x47800000,
		0x7F7FFFFF, 0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0x33000000, 0x33000001, 0x3F808000, 0x3F818000} {
		for d := uint32(0); d < 64; d++ {
			for _, s := range []uint32{0, 0x80000000} {
				pats = append(pats, (edge+d)|s, (edge-d)|s)
			}
		}
	}
	return pats
}

// TestConvertVecMatchesScalar: F32ToBF16, BF16ToF32, PackBF16 and
// UnpackBF16 (eight at a time with AVX2), and their fp16 twins (with
// F16C), give the scalar BF16FromF32/F32FromBF16 and F16FromF32/F32FromF16
// bits on testPatterns, on every 16-bit pattern widened, and on every
// length up to 40, and Unpack of parts [lo, hi) of a packed buffer
// restores exactly that part, whatever its alignment.
func TestConvertVecMatchesScalar(t *testing.T) {
	pats := testPatterns()
	src := make([]float32, len(pats))
	for i, p := range pats {
		src[i] = math.Float32frombits(p)
	}
	all16 := make([]uint16, 1<<16)
	for i := range all16 {
		all16[i] = uint16(i)
	}
	for _, tc := range []struct {
		name   string
		conv   func([]uint16, []float32)
		widenS func([]float32, []uint16)
		pack   func([]float32) []uint16
		unpack func([]float32, int, int)
		narrow func(float32) uint16
		widen  func(uint16) float32
	}{
		{"bf16", F32ToBF16, BF16ToF32, PackBF16, UnpackBF16, BF16FromF32, F32FromBF16},
		{"fp16", F32ToF16, F16ToF32, PackF16, UnpackF16, F16FromF32, F32FromF16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := make([]uint16, len(src))
			for i, f := range src {
				want[i] = tc.narrow(f)
			}
			got := make([]uint16, len(src))
			tc.conv(got, src)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("conversion of %#08x = %#04x, want %#04x", pats[i], got[i], want[i])
				}
			}
			back := make([]float32, len(all16))
			tc.widenS(back, all16)
			for i, b := range all16 {
				if w := tc.widen(b); math.Float32bits(back[i]) != math.Float32bits(w) {
					t.Fatalf("widening %#04x = %#08x, want %#08x", b, math.Float32bits(back[i]), math.Float32bits(w))
				}
			}
			x := append([]float32(nil), src...)
			if p := tc.pack(x); !slices.Equal(p, want) {
				t.Fatal("Pack differs from the scalar conversion")
			}
			tc.unpack(x, 0, len(x))
			for i, b := range want {
				if w := tc.widen(b); math.Float32bits(x[i]) != math.Float32bits(w) {
					t.Fatalf("Unpack element %d = %#08x, want %#08x", i, math.Float32bits(x[i]), math.Float32bits(w))
				}
			}
			rng := rand.New(rand.NewPCG(3, 4))
			for n := 1; n <= 40; n++ {
				for range 4 {
					lo := rng.IntN(n)
					hi := lo + rng.IntN(n-lo+1)
					in := make([]float32, n)
					for i := range in {
						in[i] = float32(rng.NormFloat64())
					}
					x := append([]float32(nil), in...)
					tc.pack(x)
					tc.unpack(x, lo, hi)
					for i := lo; i < hi; i++ {
						if w := tc.widen(tc.narrow(in[i])); math.Float32bits(x[i]) != math.Float32bits(w) {
							t.Fatalf("n %d, part [%d, %d): element %d = %v, want %v", n, lo, hi, i, x[i], w)
						}
					}
				}
			}
		})
	}
	t.Logf("AVX2 %v, F16C %v", haveRoundVec, haveF16C)
}
