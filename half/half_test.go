package half

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/x448/float16"
)

// f16Value is the value of an fp16 pattern computed from the IEEE 754
// definition in float64, independently of F32FromF16.
func f16Value(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h>>10) & 0x1F
	frac := float64(h & 0x3FF)
	switch e {
	case 0x1F:
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	case 0:
		return sign * math.Ldexp(frac, -24)
	default:
		return sign * math.Ldexp(1+frac/1024, e-15)
	}
}

func isF16NaN(h uint16) bool  { return h&0x7C00 == 0x7C00 && h&0x3FF != 0 }
func isBF16NaN(b uint16) bool { return b&0x7F80 == 0x7F80 && b&0x7F != 0 }

// TestF16AllPatterns widens every fp16 pattern and narrows it back.
func TestF16AllPatterns(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := F32FromF16(h)
		want := f16Value(h)
		if isF16NaN(h) {
			if !math.IsNaN(float64(f)) || math.Signbit(float64(f)) != (h&0x8000 != 0) {
				t.Fatalf("F32FromF16(%#04x) = %v (%#08x), want NaN with the same sign", h, f, math.Float32bits(f))
			}
			if got, w := F16FromF32(f), h&0x8000|F16NaN; got != w {
				t.Fatalf("F16FromF32(F32FromF16(%#04x)) = %#04x, want %#04x", h, got, w)
			}
			if got := NearestF16(f); math.Float32bits(got) != math.Float32bits(F32FromF16(h&0x8000|F16NaN)) {
				t.Fatalf("NearestF16(NaN %#04x) = %#08x", h, math.Float32bits(got))
			}
			continue
		}
		if float64(f) != want || math.Signbit(float64(f)) != math.Signbit(want) {
			t.Fatalf("F32FromF16(%#04x) = %v, want %v", h, f, want)
		}
		if x := float16.Frombits(h).Float32(); math.Float32bits(x) != math.Float32bits(f) {
			t.Fatalf("F32FromF16(%#04x) = %#08x, x448 gives %#08x", h, math.Float32bits(f), math.Float32bits(x))
		}
		if got := F16FromF32(f); got != h {
			t.Fatalf("F16FromF32(F32FromF16(%#04x)) = %#04x", h, got)
		}
		if got := NearestF16(f); math.Float32bits(got) != math.Float32bits(f) {
			t.Fatalf("NearestF16(%v) = %v, want it unchanged", f, got)
		}
	}
}

// TestBF16AllPatterns widens every bf16 pattern and narrows it back.
func TestBF16AllPatterns(t *testing.T) {
	for i := range 1 << 16 {
		b := uint16(i)
		f := F32FromBF16(b)
		if got := math.Float32bits(f); got != uint32(b)<<16 {
			t.Fatalf("F32FromBF16(%#04x) = %#08x, want %#08x", b, got, uint32(b)<<16)
		}
		want := b
		if isBF16NaN(b) {
			want = BF16NaN
		}
		if got := BF16FromF32(f); got != want {
			t.Fatalf("BF16FromF32(F32FromBF16(%#04x)) = %#04x, want %#04x", b, got, want)
		}
		if got := NearestBF16(f); math.Float32bits(got) != uint32(want)<<16 {
			t.Fatalf("NearestBF16(%#08x) = %#08x, want %#08x", math.Float32bits(f), math.Float32bits(got), uint32(want)<<16)
		}
	}
}

func TestF16Cases(t *testing.T) {
	f := math.Float32frombits
	cases := []struct {
		name string
		in   float32
		want uint16
	}{
		{"one", 1, 0x3C00},
		{"minus two", -2, 0xC000},
		{"zero", 0, 0x0000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"max finite", 65504, 0x7BFF},
		{"just below the overflow tie", f(0x477FEFFF), 0x7BFF},
		{"overflow tie 65520 rounds to even = Inf", 65520, 0x7C00},
		{"65535 overflows", 65535, 0x7C00},
		{"65536 overflows", 65536, 0x7C00},
		{"float32 max overflows", math.MaxFloat32, 0x7C00},
		{"negative overflow", -1e6, 0xFC00},
		{"+Inf", float32(math.Inf(1)), 0x7C00},
		{"-Inf", float32(math.Inf(-1)), 0xFC00},
		{"NaN", float32(math.NaN()), 0x7E00},
		{"negative NaN", f(0xFFC00000), 0xFE00},
		{"signalling NaN", f(0x7F800001), 0x7E00},
		{"NaN with payload", f(0x7FBFFFFF), 0x7E00},
		{"1+2^-11 ties to even 1", 1 + 0x1p-11, 0x3C00},
		{"1+3*2^-11 ties to even 1+2^-9", 1 + 3*0x1p-11, 0x3C02},
		{"just above the tie rounds up", f(0x3F801001), 0x3C01},
		{"smallest normal", 0x1p-14, 0x0400},
		{"largest subnormal", 1023 * 0x1p-24, 0x03FF},
		{"rounds up into the normals", 1023.5 * 0x1p-24, 0x0400},
		{"smallest subnormal", 0x1p-24, 0x0001},
		{"2^-25 ties to even 0", 0x1p-25, 0x0000},
		{"above 2^-25 rounds up", f(0x33000001), 0x0001},
		{"3*2^-25 ties to even 2*2^-24", 3 * 0x1p-25, 0x0002},
		{"5*2^-25 ties to even 2*2^-24", 5 * 0x1p-25, 0x0002},
		{"negative subnormal", -3 * 0x1p-24, 0x8003},
		{"negative underflow keeps sign", -1e-10, 0x8000},
		{"float32 subnormal underflows", f(0x00000001), 0x0000},
		{"0.1", 0.1, 0x2E66},
		{"1/3", 1.0 / 3, 0x3555},
	}
	for _, c := range cases {
		if got := F16FromF32(c.in); got != c.want {
			t.Errorf("%s: F16FromF32(%v [%#08x]) = %#04x, want %#04x", c.name, c.in, math.Float32bits(c.in), got, c.want)
		}
		if got, want := math.Float32bits(NearestF16(c.in)), math.Float32bits(F32FromF16(c.want)); got != want {
			t.Errorf("%s: NearestF16(%v) = %#08x, want %#08x", c.name, c.in, got, want)
		}
	}
}

func TestBF16Cases(t *testing.T) {
	f := math.Float32frombits
	cases := []struct {
		name string
		in   float32
		want uint16
	}{
		{"one", 1, 0x3F80},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"pi rounds down", math.Pi, 0x4049},
		{"0.1 rounds up", 0.1, 0x3DCD},
		{"1+2^-8 ties to even 1", 1 + 0x1p-8, 0x3F80},
		{"1+3*2^-8 ties to even 1+2^-6", 1 + 3*0x1p-8, 0x3F82},
		{"just above the tie rounds up", f(0x3F808001), 0x3F81},
		{"largest bf16", f(0x7F7F0000), 0x7F7F},
		{"below the overflow tie", f(0x7F7F7FFF), 0x7F7F},
		{"overflow tie rounds to Inf", f(0x7F7F8000), 0x7F80},
		{"float32 max overflows", math.MaxFloat32, 0x7F80},
		{"negative float32 max overflows", -math.MaxFloat32, 0xFF80},
		{"+Inf", float32(math.Inf(1)), 0x7F80},
		{"-Inf", float32(math.Inf(-1)), 0xFF80},
		{"NaN", float32(math.NaN()), 0x7FC0},
		{"negative NaN is 0x7FC0 as in torch", f(0xFFC00000), 0x7FC0},
		{"signalling NaN", f(0x7F800001), 0x7FC0},
		{"NaN that would carry into the sign", f(0x7FFFFFFF), 0x7FC0},
		{"subnormal tie to even 0", f(0x00008000), 0x0000},
		{"subnormal tie to even 2", f(0x00018000), 0x0002},
		{"subnormal rounds up into the normals", f(0x007FFFFF), 0x0080},
		{"negative subnormal", f(0x80010000), 0x8001},
	}
	for _, c := range cases {
		if got := BF16FromF32(c.in); got != c.want {
			t.Errorf("%s: BF16FromF32(%#08x) = %#04x, want %#04x", c.name, math.Float32bits(c.in), got, c.want)
		}
		if got := math.Float32bits(NearestBF16(c.in)); got != uint32(c.want)<<16 {
			t.Errorf("%s: NearestBF16(%#08x) = %#08x, want %#08x", c.name, math.Float32bits(c.in), got, uint32(c.want)<<16)
		}
	}
}

// nearestByDistance rounds |v| to the nearer of two neighbouring 16-bit
// patterns lo and lo+1 (values vlo and vhi, with vhi the unbounded next
// value so overflow is decided like IEEE), ties to the even pattern.
func nearestByDistance(a float64, lo uint16, vlo, vhi float64) uint16 {
	dlo, dhi := a-vlo, vhi-a
	switch {
	case dlo < dhi:
		return lo
	case dhi < dlo:
		return lo + 1
	case lo&1 == 0:
		return lo
	default:
		return lo + 1
	}
}

// refF16 rounds f to fp16 by searching the finite fp16 values for the
// neighbours of |f| and comparing distances in float64.
func refF16(f float32) uint16 {
	if math.IsNaN(float64(f)) {
		if math.Signbit(float64(f)) {
			return 0xFE00
		}
		return 0x7E00
	}
	var sign uint16
	if math.Signbit(float64(f)) {
		sign = 0x8000
	}
	a := math.Abs(float64(f))
	if math.IsInf(a, 0) {
		return sign | 0x7C00
	}
	// Largest positive finite pattern with value <= a (patterns 0..0x7BFF
	// are increasing in value).
	n := sort.Search(0x7C00, func(i int) bool { return f16Value(uint16(i)) > a })
	lo := uint16(n - 1)
	vlo := f16Value(lo)
	vhi := f16Value(lo + 1)
	if lo == 0x7BFF {
		vhi = 65536 // the next value if the exponent range went on
	}
	return sign | nearestByDistance(a, lo, vlo, vhi)
}

// refBF16 rounds f to bf16 the same way: truncation gives the lower
// neighbour, and float64 distances decide.
func refBF16(f float32) uint16 {
	if math.IsNaN(float64(f)) {
		return 0x7FC0
	}
	x := math.Float32bits(f)
	sign := uint16(x>>16) & 0x8000
	a := math.Abs(float64(f))
	if math.IsInf(a, 0) {
		return sign | 0x7F80
	}
	lo := uint16(x>>16) & 0x7FFF
	vlo := float64(math.Float32frombits(uint32(lo) << 16))
	e := int(lo >> 7)
	ulp := math.Ldexp(1, max(e, 1)-127-7) // subnormals share exponent 1's ulp
	return sign | nearestByDistance(a, lo, vlo, vlo+ulp)
}

// sample returns float32 values that exercise rounding: random bit
// patterns, random values in the fp16 range, and for every positive finite
// fp16 value h the exact midpoint to the next value and its float32
// neighbours, with both signs.
func sample() []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	var out []float32
	for range 1 << 15 {
		out = append(out, math.Float32frombits(r.Uint32()))
		out = append(out, float32(r.NormFloat64()*math.Exp2(float64(r.IntN(50)-30))))
	}
	for h := uint16(0); h < 0x7C00; h++ {
		lo := f16Value(h)
		hi := 65536.0
		if h < 0x7BFF {
			hi = f16Value(h + 1)
		}
		mid := float32((lo + hi) / 2) // exact: 12 significant bits
		for _, v := range []float32{float32(lo), mid} {
			b := math.Float32bits(v)
			for _, w := range []uint32{b - 1, b, b + 1} {
				x := math.Float32frombits(w)
				out = append(out, x, -x)
			}
		}
	}
	// Every bf16 value's midpoint to the next and its neighbours.
	for b := uint32(0); b < 0x7F80; b += 7 {
		mid := b<<16 | 0x8000
		out = append(out, math.Float32frombits(mid-1), math.Float32frombits(mid), math.Float32frombits(mid+1))
	}
	return out
}

func TestF16AgainstReferences(t *testing.T) {
	xs := sample()
	bad := 0
	for _, f := range xs {
		got := F16FromF32(f)
		want := refF16(f)
		if got != want {
			t.Errorf("F16FromF32(%#08x) = %#04x, distance reference gives %#04x", math.Float32bits(f), got, want)
			bad++
		}
		if !math.IsNaN(float64(f)) {
			if x := float16.Fromfloat32(f).Bits(); got != x {
				t.Errorf("F16FromF32(%#08x) = %#04x, x448 gives %#04x", math.Float32bits(f), got, x)
				bad++
			}
		}
		if a, b := math.Float32bits(NearestF16(f)), math.Float32bits(F32FromF16(got)); a != b {
			t.Errorf("NearestF16(%#08x) = %#08x, want %#08x", math.Float32bits(f), a, b)
			bad++
		}
		if bad > 20 {
			t.Fatal("too many failures")
		}
	}
}

func TestBF16AgainstReference(t *testing.T) {
	bad := 0
	for _, f := range sample() {
		got := BF16FromF32(f)
		if want := refBF16(f); got != want {
			t.Errorf("BF16FromF32(%#08x) = %#04x, distance reference gives %#04x", math.Float32bits(f), got, want)
			bad++
		}
		if a, b := math.Float32bits(NearestBF16(f)), uint32(got)<<16; a != b {
			t.Errorf("NearestBF16(%#08x) = %#08x, want %#08x", math.Float32bits(f), a, b)
			bad++
		}
		if bad > 20 {
			t.Fatal("too many failures")
		}
	}
}

// TestSlicesMatchScalars checks every slice function element by element.
func TestSlicesMatchScalars(t *testing.T) {
	xs := sample()
	n := len(xs)
	h16 := make([]uint16, n)
	b16 := make([]uint16, n)
	back := make([]float32, n)
	F32ToF16(h16, xs)
	F32ToBF16(b16, xs)
	for i, f := range xs {
		if h16[i] != F16FromF32(f) || b16[i] != BF16FromF32(f) {
			t.Fatalf("element %d (%#08x): slice gives %#04x/%#04x", i, math.Float32bits(f), h16[i], b16[i])
		}
	}
	F16ToF32(back, h16)
	for i, h := range h16 {
		if math.Float32bits(back[i]) != math.Float32bits(F32FromF16(h)) {
			t.Fatalf("F16ToF32 element %d differs", i)
		}
	}
	BF16ToF32(back, b16)
	for i, b := range b16 {
		if math.Float32bits(back[i]) != math.Float32bits(F32FromBF16(b)) {
			t.Fatalf("BF16ToF32 element %d differs", i)
		}
	}
	r := append([]float32(nil), xs...)
	RoundF16(r)
	for i, f := range xs {
		if math.Float32bits(r[i]) != math.Float32bits(NearestF16(f)) {
			t.Fatalf("RoundF16 element %d differs", i)
		}
	}
	copy(r, xs)
	RoundBF16(r)
	for i, f := range xs {
		if math.Float32bits(r[i]) != math.Float32bits(NearestBF16(f)) {
			t.Fatalf("RoundBF16 element %d differs", i)
		}
	}
}

func TestLengthMismatchPanics(t *testing.T) {
	for name, fn := range map[string]func(){
		"F32ToF16":  func() { F32ToF16(make([]uint16, 2), make([]float32, 3)) },
		"F16ToF32":  func() { F16ToF32(make([]float32, 3), make([]uint16, 2)) },
		"F32ToBF16": func() { F32ToBF16(make([]uint16, 1), make([]float32, 0)) },
		"BF16ToF32": func() { BF16ToF32(make([]float32, 0), make([]uint16, 1)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with mismatched lengths did not panic", name)
				}
			}()
			fn()
		}()
	}
}

// TestPackInPlace: Pack leaves in x's own memory the patterns the
// out-of-place conversion writes, and Unpack of any part brings back the
// rounded values of that part.
func TestPackInPlace(t *testing.T) {
	src := []float32{0, float32(math.Copysign(0, -1)), 1, -1.5, 3.14159, 65504, 70000, 1e-8, 6e-8, 1e38,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1 + 1.0/256, 2.5e-39, -123.456}
	for _, tc := range []struct {
		name   string
		pack   func([]float32) []uint16
		unpack func([]float32, int, int)
		conv   func([]uint16, []float32)
		widen  func(uint16) float32
	}{
		{"bf16", PackBF16, UnpackBF16, F32ToBF16, F32FromBF16},
		{"fp16", PackF16, UnpackF16, F32ToF16, F32FromF16},
	} {
		want := make([]uint16, len(src))
		tc.conv(want, src)
		for _, part := range [][2]int{{0, len(src)}, {5, 11}, {1, 2}, {len(src) - 1, len(src)}, {7, 7}} {
			x := slices.Clone(src)
			if got := tc.pack(x); !slices.Equal(got, want) {
				t.Fatalf("%s: packed %#04x, want %#04x", tc.name, got, want)
			}
			tc.unpack(x, part[0], part[1])
			for i := part[0]; i < part[1]; i++ {
				if w := tc.widen(want[i]); math.Float32bits(x[i]) != math.Float32bits(w) {
					t.Errorf("%s: unpack %v: x[%d] = %v, want %v", tc.name, part, i, x[i], w)
				}
			}
		}
	}
}
