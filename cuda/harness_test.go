package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
)

// harness runs conformance cases on one device: inputs are uploaded from
// float32 values rounded to the case's dtype, outputs downloaded widened.
type harness struct {
	t    *testing.T
	d    *Device
	k    *Kernels
	s    *Stream
	mems []Mem
}

func newHarness(t *testing.T, d *Device) *harness {
	t.Helper()
	k, err := d.LoadKernels()
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, d: d, k: k, s: s}
	t.Cleanup(func() {
		for _, m := range h.mems {
			d.Free(m, s)
		}
		s.Synchronize()
		s.Destroy()
	})
	return h
}

func (h *harness) alloc(bytes int) Mem {
	h.t.Helper()
	m, err := h.d.Alloc(int64(max(bytes, 8)), h.s)
	if err != nil {
		h.t.Fatal(err)
	}
	h.mems = append(h.mems, m)
	return m.Slice(0, int64(bytes))
}

// in uploads x as dtype dt.
func (h *harness) in(dt device.DType, x []float32) Mem {
	h.t.Helper()
	m := h.alloc(len(x) * dt.Size())
	if err := h.s.Synchronize(); err != nil { // allocation is stream-ordered on h.s
		h.t.Fatal(err)
	}
	if err := h.d.UploadF32(m, dt, x); err != nil {
		h.t.Fatal(err)
	}
	return m
}

func (h *harness) ints(x []int32) Mem {
	h.t.Helper()
	m := h.alloc(4 * len(x))
	h.s.Synchronize()
	if err := h.d.Upload(m, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))); err != nil {
		h.t.Fatal(err)
	}
	return m
}

func (h *harness) zeros(dt device.DType, n int) Mem {
	h.t.Helper()
	m := h.alloc(n * dt.Size())
	if err := h.d.Do(func(q *Issuer) error { return q.Memset8(h.s, m, 0) }); err != nil {
		h.t.Fatal(err)
	}
	return m
}

// out downloads m as dtype dt after the harness stream's work.
func (h *harness) out(dt device.DType, m Mem) []float32 {
	h.t.Helper()
	x, err := h.d.DownloadF32(m, dt, h.s)
	if err != nil {
		h.t.Fatal(err)
	}
	return x
}

func (h *harness) f64(m Mem) []float64 {
	h.t.Helper()
	b := make([]byte, m.n)
	if err := h.d.Download(b, m, h.s); err != nil {
		h.t.Fatal(err)
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(b))), m.n/8)
}

// do runs fn on the worker and fails the test on error.
func (h *harness) do(fn func(q *Issuer) error) {
	h.t.Helper()
	if err := h.d.Do(fn); err != nil {
		h.t.Fatal(err)
	}
}

// output is one result of a case: what came back, and what it should be.
type output struct {
	name string
	dt   device.DType
	got  []float32
	want []float64 // nil: compared across devices only
	tol  float64   // relative tolerance against want
}

func randn(seed uint64, n int, s float64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x51f15e))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64() * s)
	}
	return out
}

func rounded(dt device.DType, x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = roundTo(dt, v)
	}
	return out
}

func f64s(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// ulp16 is the relative rounding step of dt, the tolerance unit.
func ulp(dt device.DType) float64 {
	switch dt {
	case device.BF16:
		return 1.0 / 128
	case device.F16:
		return 1.0 / 1024
	}
	return 1.0 / (1 << 23)
}

// check compares an output with its expectation: |got - want| ≤
// tol·(|want| + scale), with scale the output's RMS (so values near zero
// after cancellation are judged against the output's size).
func (o output) check(t *testing.T, prefix string) {
	t.Helper()
	if o.want == nil {
		return
	}
	if len(o.got) != len(o.want) {
		t.Errorf("%s%s: %d values, want %d", prefix, o.name, len(o.got), len(o.want))
		return
	}
	var rms float64
	finite := 0
	for _, w := range o.want {
		if !math.IsNaN(w) && !math.IsInf(w, 0) {
			rms += w * w
			finite++
		}
	}
	rms = math.Sqrt(rms / float64(max(1, finite)))
	bad := 0
	for i := range o.got {
		g, w := float64(o.got[i]), o.want[i]
		if (math.IsNaN(w) && math.IsNaN(g)) || g == w {
			continue
		}
		if !(math.Abs(g-w) <= o.tol*(math.Abs(w)+rms)) {
			if bad < 3 {
				t.Errorf("%s%s[%d] = %v, want %v (tolerance %.3g)", prefix, o.name, i, g, w, o.tol)
			}
			bad++
		}
	}
	if bad > 3 {
		t.Errorf("%s%s: %d of %d values out of tolerance", prefix, o.name, bad, len(o.got))
	}
}

// bitsOf are the stored bits of the values as dtype dt (exact comparison).
func bitsOf(dt device.DType, x []float32) []uint32 {
	out := make([]uint32, len(x))
	for i, v := range x {
		switch dt {
		case device.BF16:
			out[i] = uint32(half.BF16FromF32(v))
		case device.F16:
			out[i] = uint32(half.F16FromF32(v))
		default:
			out[i] = math.Float32bits(v)
		}
	}
	return out
}

func (o output) String() string { return fmt.Sprintf("%s(%v, %d)", o.name, o.dt, len(o.got)) }
