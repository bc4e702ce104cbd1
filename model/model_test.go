package model

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fp16Ref rounds x to the nearest binary16 value (ties to even) by
// arithmetic in float64: the spacing of fp16 values near x is
// 2^(max(e,-14)-10), and x/spacing is exact in float64.
func fp16Ref(x float32) float64 {
	v := float64(x)
	if math.IsNaN(v) || math.IsInf(v, 0) || v == 0 {
		return v
	}
	_, e := math.Frexp(math.Abs(v)) // |v| = f·2^e, f in [0.5, 1)
	spacing := math.Ldexp(1, max(e-1, -14)-10)
	r := math.RoundToEven(v/spacing) * spacing
	if math.Abs(r) > 65504 {
		return math.Copysign(math.Inf(1), v)
	}
	return r
}

func TestRoundFP16AgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(x float32) {
		if math.IsNaN(float64(x)) {
			return
		}
		got := F16ToF32(F32ToF16(x))
		want := fp16Ref(x)
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Fatalf("fp16(%g [%08x]) = %g, want %g", x, math.Float32bits(x), got, want)
		}
	}
	special := []float32{0, 1, -1, 65504, 65519.99, 65520, -65520, 1e-8, 2.9802322e-08, 2.9802326e-08, 5.9604645e-08,
		6.097555e-05, 6.1035156e-05, 0.1, 1.0009765, 1.00048828125, 1.00146484375, 2049, 4097, 1e9,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Copysign(0, -1))}
	for _, x := range special {
		check(x)
	}
	for range 200000 {
		// random bit patterns across the whole range, and dense around fp16's range
		check(math.Float32frombits(rng.Uint32()))
		check(float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(44)-30))))
	}
	if h := F32ToF16(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("NaN became %04x", h)
	}
}

func TestF16WideningIsExact(t *testing.T) {
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := F32ToF16(f); back != uint16(h) {
			t.Fatalf("%04x -> %g -> %04x", h, f, back)
		}
	}
}

func TestBF16(t *testing.T) {
	cases := []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f808000, 0x3f80}, // tie, even stays
		{0x3f818000, 0x3f82}, // tie, odd rounds up
		{0x3f808001, 0x3f81}, // above the tie
		{0x7f7fffff, 0x7f80}, // max float rounds to +Inf
		{0xff800000, 0xff80}, // -Inf
		{0x7fc00001, 0x7fc0}, // NaN
		{0xffffffff, 0x7fc0}, // negative NaN: c10 returns 0x7FC0
		{0x80000000, 0x8000}, // -0
	}
	for _, c := range cases {
		if got := F32ToBF16(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("bf16(%08x) = %04x, want %04x", c.in, got, c.want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		x := math.Float32frombits(rng.Uint32())
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			continue
		}
		// The result is one of the two bf16 neighbours, the nearer one.
		b := math.Float32bits(x)
		lo, hi := float64(BF16ToF32(uint16(b>>16))), float64(BF16ToF32(uint16(b>>16)+1))
		got := float64(BF16ToF32(F32ToBF16(x)))
		if got != lo && got != hi && !math.IsInf(got, 0) {
			t.Fatalf("bf16(%g) = %g, not %g or %g", x, got, lo, hi)
		}
		if math.Abs(got-float64(x)) > math.Abs(lo+hi-2*got)+math.Abs(float64(x)-lo) && !math.IsInf(got, 0) {
			t.Fatalf("bf16(%g) = %g is not the nearer of %g, %g", x, got, lo, hi)
		}
	}
	s := []float32{1.00390625, 3.14159}
	RoundBF16(s)
	if s[0] != 1 || s[1] != 3.140625 {
		t.Errorf("RoundBF16 gave %v", s)
	}
}

func testLayout() Layout {
	var b LayoutBuilder
	b.Unit("a")
	b.Param("w", Init{Kind: InitNormal, Scale: 0.5}, 3, 5)
	b.Param("b", Init{Kind: InitZeros}, 5)
	b.Unit("b", 0)
	b.Param("g", Init{Kind: InitOnes}, 7)
	b.Param("u", Init{Kind: InitUniform, Scale: 0.25}, 1000)
	return b.Build()
}

func TestLayoutBuilder(t *testing.T) {
	l := testLayout()
	type spec struct {
		Name          string
		Offset, Numel int
		Unit          int
	}
	var got []spec
	for _, s := range l.Specs {
		got = append(got, spec{s.Name, s.Offset, s.Numel, s.Unit})
	}
	want := []spec{{"w", 0, 15, 0}, {"b", 15, 5, 0}, {"g", 20, 7, 1}, {"u", 27, 1000, 1}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("specs (-want +got):\n%s", d)
	}
	wantUnits := []Unit{{Name: "a", First: 0, Last: 1, Offset: 0, Numel: 20}, {Name: "b", First: 2, Last: 3, Offset: 20, Numel: 1007, Borrows: []int{0}}}
	if d := cmp.Diff(wantUnits, l.Units); d != "" || l.Numel != 1027 {
		t.Errorf("units (-want +got):\n%s numel %d", d, l.Numel)
	}
	if i, ok := l.Index("g"); !ok || i != 2 {
		t.Errorf("Index(g) = %d %v", i, ok)
	}
	buf := make([]float32, l.Numel)
	if v := l.View(buf, 1); len(v) != 5 || cap(v) != 5 || &v[0] != &buf[15] {
		t.Error("View does not alias the buffer with a capped length")
	}
}

func TestInitRangeIndependentOfCuts(t *testing.T) {
	l := testLayout()
	full := make([]float32, l.Numel)
	l.InitRange(7, full, 0)
	for _, cuts := range [][]int{{0, 1, l.Numel}, {0, 14, 16, 20, 21, 500, l.Numel}, {0, 513, l.Numel}} {
		parts := make([]float32, 0, l.Numel)
		for i := 0; i+1 < len(cuts); i++ {
			p := make([]float32, cuts[i+1]-cuts[i])
			l.InitRange(7, p, cuts[i])
			parts = append(parts, p...)
		}
		if !slices.Equal(parts, full) {
			t.Errorf("cuts %v give other values than a full init", cuts)
		}
	}
	other := make([]float32, l.Numel)
	l.InitRange(8, other, 0)
	if slices.Equal(other[:15], full[:15]) {
		t.Error("seed does not change the values")
	}
	if !slices.Equal(full[15:20], make([]float32, 5)) || slices.ContainsFunc(full[20:27], func(v float32) bool { return v != 1 }) {
		t.Errorf("zeros/ones init wrong: %v", full[15:27])
	}
	for _, v := range full[27:] {
		if v < -0.25 || v > 0.25 {
			t.Fatalf("uniform value %v outside ±0.25", v)
		}
	}
}

func TestNormalAtStatistics(t *testing.T) {
	const n = 200000
	var s, ss, s4 float64
	for i := range uint64(n) {
		z := NormalAt(42, i)
		s += z
		ss += z * z
		s4 += z * z * z * z
	}
	mean, vr, kurt := s/n, ss/n, s4/n
	if math.Abs(mean) > 0.01 || math.Abs(vr-1) > 0.01 || math.Abs(kurt-3) > 0.05 {
		t.Errorf("mean %.4f var %.4f fourth moment %.4f, want 0 1 3", mean, vr, kurt)
	}
	u := UniformAt(42, 5)
	if u <= -1 || u >= 1 {
		t.Errorf("UniformAt = %v", u)
	}
}

func TestSafetensorsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	a := []float32{1, 2, 3, 4, 5, 6}
	b := []float32{-1.5, float32(math.Inf(1))}
	meta := map[string]string{"format": "pt", "note": `quote " and \ backslash`}
	err := WriteSafetensors(path, []Tensor{
		{Name: "a.t", Shape: []int{3, 2}, Data: a, Transpose: true}, // written as (3, 2) from a (2, 3)
		{Name: "b", Shape: []int{2}, Data: b},
		{Name: "scalar", Shape: []int{}, Data: []float32{7}},
	}, meta)
	if err != nil {
		t.Fatal(err)
	}
	f, err := OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if d := cmp.Diff(meta, f.Metadata); d != "" {
		t.Errorf("metadata (-want +got):\n%s", d)
	}
	var names []string
	for _, ti := range f.Tensors {
		names = append(names, ti.Name)
	}
	if d := cmp.Diff([]string{"a.t", "b", "scalar"}, names); d != "" {
		t.Errorf("order (-want +got):\n%s", d)
	}
	got := make([]float32, 6)
	if err := f.ReadFloat32("a.t", got); err != nil {
		t.Fatal(err)
	}
	// a is (2, 3) [[1 2 3] [4 5 6]]; its transpose (3, 2) is [[1 4] [2 5] [3 6]].
	if d := cmp.Diff([]float32{1, 4, 2, 5, 3, 6}, got); d != "" {
		t.Errorf("transposed tensor (-want +got):\n%s", d)
	}
	if err := f.ReadFloat32("b", got[:2]); err != nil || !slices.Equal(got[:2], b) {
		t.Errorf("b = %v, %v", got[:2], err)
	}
	if err := f.ReadFloat32("b", got[:3]); err == nil || !strings.Contains(err.Error(), `tensor "b" has 2 elements`) {
		t.Errorf("length mismatch: %v", err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}
}

func TestSafetensorsBadFiles(t *testing.T) {
	dir := t.TempDir()
	file := func(name string, header string, data int) string {
		p := filepath.Join(dir, name)
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
		b = append(append(b, header...), make([]byte, data)...)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, header string
		data         int
		want         string
	}{
		{"short", "", -1, "not a safetensors file"},
		{"not json", "[1,2]   ", 0, "not a JSON object"},
		{"dtype", `{"x":{"dtype":"Q8","shape":[1],"data_offsets":[0,1]}}`, 1, `unknown dtype "Q8"`},
		{"size", `{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 8, "needs 8 bytes"},
		{"outside", `{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4, "outside the 4 data bytes"},
		{"overlap", `{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8, "overlap"},
		{"negative shape", `{"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}`, 0, "bad shape"},
	} {
		var p string
		if tc.data < 0 {
			p = filepath.Join(dir, tc.name)
			os.WriteFile(p, []byte{1, 2, 3}, 0o644)
		} else {
			p = file(tc.name, tc.header, tc.data)
		}
		_, err := OpenSafetensors(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want an error naming the file and %q", tc.name, err, tc.want)
		}
	}
}

// TestInitRangeParallel checks that a large range, which InitRange splits
// over goroutines, equals the same range initialised in small serial
// pieces.
func TestInitRangeParallel(t *testing.T) {
	var b LayoutBuilder
	b.Unit("big")
	b.Param("w", Init{Kind: InitNormal, Scale: 0.02}, 1500, 1999)
	b.Param("v", Init{Kind: InitUniform, Scale: 1}, 1<<20)
	l := b.Build()
	full := make([]float32, l.Numel)
	l.InitRange(3, full, 0)
	piece := make([]float32, 333331)
	for lo := 0; lo < l.Numel; lo += len(piece) {
		p := piece[:min(len(piece), l.Numel-lo)]
		l.InitRange(3, p, lo)
		if !slices.Equal(p, full[lo:lo+len(p)]) {
			t.Fatalf("piece at %d differs from the parallel full init", lo)
		}
	}
}
