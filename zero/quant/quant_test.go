package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dszero/dszero/half"
)

// The float64 model of symmetric block quantization, from the algorithm
// (quantization_utils.h's Params<Symmetric>), not from this package: a
// group of max |x| = m has the step m·2/2^bits; x's level is x/step
// rounded half to even and clamped to the bits' range; x' = level·step.
func model64(x []float64, bits int) (levels []int, step float64) {
	m := 0.0
	for _, v := range x {
		m = math.Max(m, math.Abs(v))
	}
	step = 1
	if m != 0 {
		step = 2 * m / math.Exp2(float64(bits))
	}
	lo, hi := -math.Exp2(float64(bits-1)), math.Exp2(float64(bits-1))-1
	for _, v := range x {
		levels = append(levels, int(math.Max(lo, math.Min(hi, math.RoundToEven(v/step)))))
	}
	return levels, step
}

// nearHalf reports whether v is within tol of a rounding boundary, where
// float32 and float64 may round differently.
func nearHalf(v, tol float64) bool {
	f := v - math.Floor(v)
	return math.Abs(f-0.5) < tol
}

func fp16Values(rng *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = half.NearestF16(float32(rng.NormFloat64() * scale))
	}
	return x
}

func TestQuantizeMatchesFloat64Model(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	// Ragged sizes: group lengths that are not powers of two, groups of 2,
	// a whole tensor in one group, an all-zero group.
	for _, c := range []struct{ n, groups, bits int }{
		{8, 1, 8}, {24, 3, 8}, {1000, 8, 8}, {7992, 1, 8}, {50, 25, 4}, {4096, 16, 4}, {6, 3, 4}, {96, 2, 8},
	} {
		x := fp16Values(rng, c.n, 0.02)
		if c.n == 96 {
			clear(x[:48]) // one group all zero: scale 1, levels 0
		}
		q := make([]byte, PackedLen(c.n, c.bits))
		scales := make([]float32, c.groups)
		Quantize(q, scales, x, c.bits)
		per := c.n / c.groups
		flips := 0
		for g := range c.groups {
			x64 := make([]float64, per)
			for i := range x64 {
				x64[i] = float64(x[g*per+i])
			}
			levels, step := model64(x64, c.bits)
			if got := float64(scales[g]); math.Abs(got-step) > 1e-6*step {
				t.Errorf("n=%d g=%d: scale %g, want %g", c.n, g, got, step)
			}
			for i, want := range levels {
				got := int(Value(q, g*per+i, c.bits))
				if got == want {
					continue
				}
				if d := got - want; (d == 1 || d == -1) && nearHalf(x64[i]/step, 1e-4) {
					flips++ // float32's x·s and float64's x/step round apart
					continue
				}
				t.Errorf("n=%d bits=%d: element %d = %g: level %d, want %d", c.n, c.bits, g*per+i, x64[i], got, want)
			}
		}
		if flips > c.n/100+1 {
			t.Errorf("n=%d: %d boundary flips", c.n, flips)
		}
		// Dequantized within half a step (the clamped maximum within one).
		deq := make([]float32, c.n)
		Dequantize(deq, q, scales, c.bits, half.NearestF16)
		for i, v := range deq {
			step := float64(scales[i/per])
			if e := math.Abs(float64(v) - float64(x[i])); e > step+1e-3*math.Abs(float64(x[i]))+1e-7 {
				t.Errorf("n=%d: element %d: %g dequantized to %g (step %g)", c.n, i, x[i], v, step)
			}
		}
	}
}

func TestQuantizeNonFinite(t *testing.T) {
	x := []float32{1, 2, float32(math.Inf(1)), 3, 4, 5, 6, 7}
	q := make([]byte, 8)
	s := make([]float32, 1)
	Quantize(q, s, x, 8)
	d := make([]float32, 8)
	Dequantize(d, q, s, 8, nil)
	for i, v := range d {
		if !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) {
			t.Errorf("element %d of an overflowed group dequantized to %g: the overflow must stay visible", i, v)
		}
	}
}

func TestWeightGroups(t *testing.T) {
	// By hand from CUDAQuantizer.quantize's loops (partition_parameters.py).
	for _, c := range []struct{ n, want int }{
		{8, 1}, {16, 1}, {8000, 1}, {8008, 7}, // ⌈8008/8000⌉=2: 8008%16≠0; 3: %24≠0; ... 7: 8008 = 56·143
		{24000, 3}, {1 << 22, 1024}, {16000, 2}, {32000, 4},
		{8 * 20011, 20011}, // 20011 is prime: the first g that divides leaves groups of 8
	} {
		got, err := WeightGroups(c.n)
		if err != nil || got != c.want {
			t.Errorf("WeightGroups(%d) = %d, %v; want %d", c.n, got, err, c.want)
		}
	}
	for _, n := range []int{0, 12, 1001} {
		if _, err := WeightGroups(n); err == nil {
			t.Errorf("WeightGroups(%d): no error", n)
		}
	}
	// Every n a multiple of 8: groups divide it in multiples of 8 of under 16k.
	for n := 8; n < 200000; n += 8 * 97 {
		g, err := WeightGroups(n)
		if err != nil {
			continue
		}
		if n%(8*g) != 0 || n/g >= 16000 {
			t.Errorf("WeightGroups(%d) = %d", n, g)
		}
	}
}

func TestWordsRoundTrip(t *testing.T) {
	for _, nb := range []int{0, 1, 2, 7, 64} {
		b := make([]byte, nb)
		for i := range b {
			b[i] = byte(i*37 + 200)
		}
		sc := []float32{1.5, float32(math.Inf(-1)), -3e-8}
		w := make([]uint16, WordsFor(nb, len(sc)))
		PutWords(w, b, sc)
		b2, sc2 := make([]byte, nb), make([]float32, len(sc))
		GetWords(b2, sc2, w)
		for i := range b {
			if b[i] != b2[i] {
				t.Fatalf("%d bytes: byte %d: %d, want %d", nb, i, b2[i], b[i])
			}
		}
		for i := range sc {
			if math.Float32bits(sc[i]) != math.Float32bits(sc2[i]) {
				t.Fatalf("scale %d: %g, want %g", i, sc2[i], sc[i])
			}
		}
	}
}

// TestInt4Packing: element 2i in the high nibble, 2i+1 in the low one,
// both two's complement (PackedInt4 {high:4, low:4}).
func TestInt4Packing(t *testing.T) {
	x := []float32{-8, 7, 1, -1, 0, 4, -4, 2} // m = 8: s = 16/16 = 1
	q := make([]byte, 4)
	s := make([]float32, 1)
	Quantize(q, s, x, 4)
	want := []byte{0x87, 0x1F, 0x04, 0xC2}
	for i := range want {
		if q[i] != want[i] {
			t.Errorf("byte %d: %#02x, want %#02x", i, q[i], want[i])
		}
	}
}
