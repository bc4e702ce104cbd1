package device

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/mem"
	"github.com/google/go-cmp/cmp"
)

func newCPU(t *testing.T, rank int) *CPU {
	t.Helper()
	e, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		t.Fatal(err)
	}
	return NewCPU(mem.NewAccountant(rank), e)
}

func mustPanic(t *testing.T, name, want string, fn func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil || !strings.Contains(fmt.Sprint(r), want) {
			t.Errorf("%s: panic %v, want one mentioning %q", name, r, want)
		}
	}()
	fn()
}

func TestDType(t *testing.T) {
	for _, c := range []struct {
		d    DType
		size int
		name string
	}{{F32, 4, "fp32"}, {F16, 2, "fp16"}, {BF16, 2, "bf16"}} {
		if c.d.Size() != c.size || c.d.String() != c.name || !c.d.Valid() {
			t.Errorf("%d: Size %d String %q Valid %v", int(c.d), c.d.Size(), c.d.String(), c.d.Valid())
		}
	}
	if DType(9).Valid() || DType(9).String() != "DType(9)" {
		t.Errorf("DType(9) is valid or misnamed")
	}
	mustPanic(t, "Size of invalid dtype", "invalid DType", func() { DType(-1).Size() })
}

// TestParseDType: ParseDType reads back every String, and refuses
// anything else (other spellings, case, the empty name) with an error
// naming the input and the valid names.
func TestParseDType(t *testing.T) {
	for _, d := range []DType{F32, F16, BF16} {
		got, err := ParseDType(d.String())
		if err != nil || got != d {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", d.String(), got, err, d)
		}
	}
	for _, s := range []string{"", "FP16", "float16", "bfloat16", "fp8", "fp32 ", "DType(9)"} {
		if d, err := ParseDType(s); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", s)) || !strings.Contains(err.Error(), "fp32, fp16 or bf16") {
			t.Errorf("ParseDType(%q) = %v, %v; want an error naming it and the valid names", s, d, err)
		}
	}
}

// TestDTypeRounding: F32 does not round; F16 and BF16 round to nearest
// even at 10 and 7 fraction bits. 1 + 2^-8 + 2^-10 is an fp16 value; bf16
// rounds it up to 1 + 2^-7. 1 + 2^-11 + 2^-13 is fp16's halfway case
// plus a bit, rounded up to 1 + 2^-10.
func TestDTypeRounding(t *testing.T) {
	if F32.Rounding() != nil {
		t.Errorf("F32 rounds")
	}
	in := []float32{1 + 1.0/256 + 1.0/1024, 1 + 1.0/2048 + 1.0/8192}
	for _, c := range []struct {
		d    DType
		want []float32
	}{
		{F16, []float32{1 + 1.0/256 + 1.0/1024, 1 + 1.0/1024}},
		{BF16, []float32{1 + 1.0/128, 1}},
	} {
		x := slices.Clone(in)
		c.d.Rounding()(x)
		if !slices.Equal(x, c.want) {
			t.Errorf("%v rounds %v to %v, want %v", c.d, in, x, c.want)
		}
		for i, v := range in {
			if got := c.d.Nearest()(v); got != c.want[i] {
				t.Errorf("%v's Nearest(%v) = %v, want %v", c.d, v, got, c.want[i])
			}
		}
	}
	if F32.Nearest() != nil {
		t.Errorf("F32's Nearest rounds")
	}
	mustPanic(t, "Rounding of invalid dtype", "invalid DType", func() { DType(5).Rounding() })
	mustPanic(t, "Nearest of invalid dtype", "invalid DType", func() { DType(5).Nearest() })
}

// TestDTypeJSON: a DType in JSON is its DeepSpeed name, both ways; an
// invalid one neither marshals nor unmarshals.
func TestDTypeJSON(t *testing.T) {
	type plan struct {
		DType DType `json:"dtype"`
	}
	for _, c := range []struct {
		d    DType
		json string
	}{{F32, `{"dtype":"fp32"}`}, {F16, `{"dtype":"fp16"}`}, {BF16, `{"dtype":"bf16"}`}} {
		b, err := json.Marshal(plan{c.d})
		if err != nil || string(b) != c.json {
			t.Errorf("Marshal(%v) = %s, %v; want %s", c.d, b, err, c.json)
		}
		var back plan
		if err := json.Unmarshal([]byte(c.json), &back); err != nil || back.DType != c.d {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", c.json, back.DType, err, c.d)
		}
	}
	if b, err := json.Marshal(plan{DType(7)}); err == nil {
		t.Errorf("Marshal(DType(7)) = %s, want an error", b)
	}
	var p plan
	for _, in := range []string{`{"dtype":"half"}`, `{"dtype":1}`} {
		if err := json.Unmarshal([]byte(in), &p); err == nil {
			t.Errorf("Unmarshal(%s) = %v, want an error", in, p.DType)
		}
	}
}

// TestAllocAccounts checks that every Alloc and Free shows in the
// accountant, by category and tier.
func TestAllocAccounts(t *testing.T) {
	d := newCPU(t, 2)
	master, err := d.Alloc(mem.MasterParams, mem.Device, F32, 100)
	if err != nil {
		t.Fatal(err)
	}
	p16, err := d.Alloc(mem.Params16, mem.Device, BF16, 10)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := d.Alloc(mem.OptimState, mem.PinnedHost, F32, 50)
	if err != nil {
		t.Fatal(err)
	}
	if master.Bytes() != 400 || p16.Bytes() != 20 || opt.Bytes() != 200 {
		t.Errorf("Bytes = %d %d %d, want 400 20 200", master.Bytes(), p16.Bytes(), opt.Bytes())
	}
	if len(master.F32()) != 100 || len(p16.Bits()) != 10 || master.Len() != 100 {
		t.Errorf("views have the wrong length")
	}
	s := d.Accountant().Snapshot()
	if s.LiveBytes(mem.Device, mem.MasterParams) != 400 || s.LiveBytes(mem.Device, mem.Params16) != 20 ||
		s.LiveBytes(mem.PinnedHost, mem.OptimState) != 200 || s.LiveTotal[mem.Device] != 420 {
		t.Errorf("after Alloc: %+v", s)
	}
	d.Free(master)
	d.Free(p16)
	d.Free(opt)
	s = d.Accountant().Snapshot()
	if s.LiveTotal[mem.Device] != 0 || s.LiveTotal[mem.PinnedHost] != 0 {
		t.Errorf("after Free: live %v", s.LiveTotal)
	}
	if s.PeakTotal[mem.Device] != 420 || s.PeakBytes(mem.Device, mem.MasterParams) != 400 {
		t.Errorf("peaks lost: %v", s.PeakTotal)
	}
}

func TestAllocBeyondCapacityIsOOM(t *testing.T) {
	d := newCPU(t, 5)
	budget, err := ParseBytes("1KiB")
	if err != nil {
		t.Fatal(err)
	}
	d.Accountant().SetCapacity(mem.Device, budget)
	keep, err := d.Alloc(mem.Grads, mem.Device, F16, 300) // 600 B
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Alloc(mem.Activations, mem.Device, F32, 200) // 800 B more
	var oom *mem.OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("Alloc beyond capacity: %v, want *mem.OOMError", err)
	}
	if oom.Requested != 800 || oom.Live != 600 || oom.Rank != 5 || oom.Category != mem.Activations {
		t.Errorf("OOMError %+v", oom)
	}
	if !strings.Contains(err.Error(), "200 × fp32") {
		t.Errorf("error %q does not say what was allocated", err)
	}
	if got := d.Accountant().Snapshot().LiveTotal[mem.Device]; got != 600 {
		t.Errorf("failed Alloc changed live bytes to %d", got)
	}
	d.Free(keep)
}

func TestFreeMisuse(t *testing.T) {
	d := newCPU(t, 0)
	other := newCPU(t, 1)
	b, err := d.Alloc(mem.Temp, mem.Device, F32, 4)
	if err != nil {
		t.Fatal(err)
	}
	mustPanic(t, "free on another device", "belongs to rank 0", func() { other.Free(b) })
	d.Free(b)
	mustPanic(t, "double free", "freed twice", func() { d.Free(b) })
	mustPanic(t, "use after free", "freed buffer", func() { b.F32() })
	if got := d.Accountant().Snapshot().LiveTotal[mem.Device]; got != 0 {
		t.Errorf("live after misuse = %d", got)
	}
}

func TestAllocMisuse(t *testing.T) {
	d := newCPU(t, 0)
	mustPanic(t, "negative length", "-1 elements", func() { d.Alloc(mem.Temp, mem.Device, F32, -1) })
	mustPanic(t, "invalid dtype", "invalid", func() { d.Alloc(mem.Temp, mem.Device, DType(7), 1) })
	mustPanic(t, "NVMe tier", "nvme", func() { d.Alloc(mem.OptimState, mem.NVMe, F32, 1) })
	b, _ := d.Alloc(mem.Temp, mem.Device, BF16, 2)
	mustPanic(t, "F32 view of bf16", "F32 view", func() { b.F32() })
	mustPanic(t, "short copy", "CopyFromF32 of 3", func() { b.CopyFromF32(make([]float32, 3)) })
	f, _ := d.Alloc(mem.Temp, mem.Device, F32, 2)
	mustPanic(t, "Bits view of fp32", "Bits view", func() { f.Bits() })
	d.Free(b)
	d.Free(f)
}

// TestConversions stores values that each format must round, then reads
// them back.
func TestConversions(t *testing.T) {
	d := newCPU(t, 0)
	in := []float32{1, 3, 1 + 0x1p-11, 1 + 0x1p-8, 65520, -0x1p-25}
	want := map[DType][]float32{
		F32:  in,
		F16:  {1, 3, 1, 1 + 0x1p-8, float32(math.Inf(1)), float32(math.Copysign(0, -1))}, // ties to even; overflow; underflow keeps the sign
		BF16: {1, 3, 1, 1, 65536, -0x1p-25},                                              // 1+2^-8 is a tie; 65520 rounds to 65536
	}
	for dt, w := range want {
		b, err := d.Alloc(mem.Params16, mem.Device, dt, len(in))
		if err != nil {
			t.Fatal(err)
		}
		b.CopyFromF32(in)
		got := make([]float32, len(in))
		b.CopyToF32(got)
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("%v round trip (-want +got):\n%s", dt, diff)
		}
		if math.Signbit(float64(got[5])) != math.Signbit(float64(w[5])) {
			t.Errorf("%v lost the sign of %v", dt, in[5])
		}
		d.Free(b)
	}
}

// gemmer is the interface a model package defines where it multiplies.
type gemmer interface {
	Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
}

func TestCPUExposesBLAS(t *testing.T) {
	e, err := blas.New(blas.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := NewCPU(mem.NewAccountant(0), e)
	t.Logf("%s: %s", d.Name(), d.BLAS().Description())
	var g gemmer = d.BLAS()
	a := []float32{1, 2, 3, 4} // [[1 2] [3 4]]
	b := []float32{5, 6, 7, 8} // [[5 6] [7 8]]
	c := make([]float32, 4)
	g.Sgemm(false, false, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2)
	if diff := cmp.Diff([]float32{19, 22, 43, 50}, c); diff != "" {
		t.Errorf("A·B (-want +got):\n%s", diff)
	}
}

func TestParseBytes(t *testing.T) {
	good := []struct {
		in   string
		want int64
	}{
		{"4GiB", 4 << 30},
		{"4 GiB", 4 << 30},
		{"4gib", 4 << 30},
		{"1.5GiB", 3 << 29},
		{"512MiB", 512 << 20},
		{"64KiB", 64 << 10},
		{"2TiB", 2 << 40},
		{"4GB", 4_000_000_000},
		{"1.5 MB", 1_500_000},
		{"3KB", 3000},
		{"1TB", 1_000_000_000_000},
		{"100B", 100},
		{"0", 0},
		{"1073741824", 1 << 30},
		{"  7  ", 7},
		{".5KiB", 512},
		{"9223372036854775807", math.MaxInt64},
		{"8388607.9999999999990905052982270717620849609375TiB", math.MaxInt64}, // (2^63-1)/2^40 exactly
	}
	for _, c := range good {
		got, err := ParseBytes(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, msg string }{
		{"", "want a number"},
		{"GiB", "want a number"},
		{"-4GiB", "want a number"},
		{"4G", "ambiguous; write GB (powers of 1000) or GiB"},
		{"4Gi", "ambiguous"},
		{"4 gigs", `unknown unit "gigs"`},
		{"4XB", "unknown unit"},
		{"1.2.3MB", "malformed number"},
		{".", "malformed number"},
		{"0.5B", "not a whole number"},
		{"1.0000001KB", "not a whole number"},
		{"9223372036854775808", "more than"},
		{"8EiB", "unknown unit"},
		{"9000000TiB", "more than"},
	}
	for _, c := range bad {
		got, err := ParseBytes(c.in)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseBytes(%q) = %d, %v; want an error mentioning %q", c.in, got, err, c.msg)
		}
	}
}
