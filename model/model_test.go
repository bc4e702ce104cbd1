package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/half"
)

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

// TestSafetensors16BitWidening reads every F16 and BF16 bit pattern and
// checks that each non-NaN value is widened exactly (it narrows back to
// its pattern) and each NaN stays a NaN.
func TestSafetensors16BitWidening(t *testing.T) {
	const n = 1 << 16
	header := fmt.Sprintf(`{"f16":{"dtype":"F16","shape":[%d],"data_offsets":[0,%d]},"bf16":{"dtype":"BF16","shape":[%d],"data_offsets":[%d,%d]}}`,
		n, 2*n, n, 2*n, 4*n)
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	for range 2 {
		for h := range n {
			b = binary.LittleEndian.AppendUint16(b, uint16(h))
		}
	}
	path := filepath.Join(t.TempDir(), "16bit.safetensors")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct {
		name   string
		inf    uint16 // patterns above it, sign aside, are NaN
		narrow func(float32) uint16
	}{{"f16", half.F16Inf, half.F16FromF32}, {"bf16", half.BF16Inf, half.BF16FromF32}} {
		got := make([]float32, n)
		if err := f.ReadFloat32(tc.name, got); err != nil {
			t.Fatal(err)
		}
		for h, v := range got {
			isNaN := uint16(h)&0x7fff > tc.inf
			if math.IsNaN(float64(v)) != isNaN || !isNaN && tc.narrow(v) != uint16(h) {
				t.Fatalf("%s %04x widened to %g [%08x]", tc.name, h, v, math.Float32bits(v))
			}
		}
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
