package kernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
)

// hostMem is a Memory over Go slices for the reference-kernel tests.
type hostMem struct {
	bufs []hostBuf
	next uint64
}

type hostBuf struct {
	addr uint64
	b    []byte
}

func (m *hostMem) Bytes(addr uint64, n int) ([]byte, error) {
	for _, b := range m.bufs {
		if addr >= b.addr && addr+uint64(n) <= b.addr+uint64(len(b.b)) {
			off := addr - b.addr
			return b.b[off : off+uint64(n)], nil
		}
	}
	return nil, fmt.Errorf("no allocation holds [%#x, %#x)", addr, addr+uint64(n))
}

// alloc places n bytes (8-aligned) at a fresh address.
func (m *hostMem) alloc(n int) (uint64, []byte) {
	if m.next == 0 {
		m.next = 0x7000_0000_0000
	}
	words := make([]uint64, (n+7)/8+1)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
	addr := m.next
	m.next += uint64(n+255) &^ 255
	m.next += 4096 // a gap, so an overrun faults
	m.bufs = append(m.bufs, hostBuf{addr, b})
	return addr, b
}

func (m *hostMem) f32(x []float32) uint64 {
	a, b := m.alloc(4 * len(x))
	copy(unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(x)), x)
	return a
}

func (m *hostMem) u16(x []uint16) uint64 {
	a, b := m.alloc(2 * len(x))
	copy(unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), len(x)), x)
	return a
}

func (m *hostMem) i32(x []int32) uint64 {
	a, b := m.alloc(4 * len(x))
	copy(unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(b))), len(x)), x)
	return a
}

func (m *hostMem) u64(x []uint64) uint64 {
	a, b := m.alloc(8 * len(x))
	copy(unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(x)), x)
	return a
}

// tensor puts x in memory as dtype dt (rounded) and returns its address.
func (m *hostMem) tensor(dt device.DType, x []float32) uint64 {
	if dt == device.F32 {
		return m.f32(x)
	}
	return m.u16(bits(dt, x))
}

func (m *hostMem) zeros(dt device.DType, n int) uint64 {
	a, _ := m.alloc(n * dt.Size())
	return a
}

// read returns n elements of dt at addr, widened.
func (m *hostMem) read(t *testing.T, dt device.DType, addr uint64, n int) []float32 {
	t.Helper()
	b, err := m.Bytes(addr, n*dt.Size())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n)
	if dt == device.F32 {
		copy(out, unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n))
		return out
	}
	h := unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), n)
	for i, v := range h {
		out[i] = widen(dt, v)
	}
	return out
}

func (m *hostMem) readBits(t *testing.T, addr uint64, n int) []uint16 {
	t.Helper()
	b, err := m.Bytes(addr, 2*n)
	if err != nil {
		t.Fatal(err)
	}
	return append([]uint16(nil), unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), n)...)
}

func (m *hostMem) readF64(t *testing.T, addr uint64, n int) []float64 {
	t.Helper()
	b, err := m.Bytes(addr, 8*n)
	if err != nil {
		t.Fatal(err)
	}
	return append([]float64(nil), unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(b))), n)...)
}

func bits(dt device.DType, x []float32) []uint16 {
	out := make([]uint16, len(x))
	for i, v := range x {
		if dt == device.BF16 {
			out[i] = half.BF16FromF32(v)
		} else {
			out[i] = half.F16FromF32(v)
		}
	}
	return out
}

func widen(dt device.DType, v uint16) float32 {
	if dt == device.BF16 {
		return half.F32FromBF16(v)
	}
	return half.F32FromF16(v)
}

// raw converts launcher-style Go values to Launch.Args by the spec's types.
func raw(t *testing.T, s *Spec, args ...any) []uint64 {
	t.Helper()
	if len(args) != len(s.Params) {
		t.Fatalf("%s: %d arguments for %d parameters", s.Name, len(args), len(s.Params))
	}
	out := make([]uint64, len(args))
	for i, a := range args {
		p := s.Params[i]
		switch v := a.(type) {
		case uint64:
			if !p.Type.Pointer() {
				t.Fatalf("%s: %s is %s, got an address", s.Name, p.Name, p.Type)
			}
			out[i] = v
		case int:
			switch p.Type {
			case I32:
				out[i] = uint64(uint32(int32(v)))
			case I64:
				out[i] = uint64(int64(v))
			default:
				if v != 0 || !p.Type.Pointer() {
					t.Fatalf("%s: %s is %s, got int %d", s.Name, p.Name, p.Type, v)
				}
			}
		case float32:
			if p.Type != F32 {
				t.Fatalf("%s: %s is %s, got a float", s.Name, p.Name, p.Type)
			}
			out[i] = uint64(math.Float32bits(v))
		default:
			t.Fatalf("%s: argument %d has type %T", s.Name, i, a)
		}
	}
	return out
}

// launch runs a reference kernel with a 1-D grid and block.
func launch(t *testing.T, m *hostMem, name string, grid, block int, args ...any) {
	t.Helper()
	if err := tryLaunch(t, m, name, driver.Dim3{X: uint32(grid), Y: 1, Z: 1}, driver.Dim3{X: uint32(block), Y: 1, Z: 1}, args...); err != nil {
		t.Fatal(err)
	}
}

func tryLaunch(t *testing.T, m *hostMem, name string, grid, block driver.Dim3, args ...any) error {
	t.Helper()
	tab := NewTable()
	s := tab.Lookup(name)
	if s == nil {
		t.Fatalf("no kernel %s", name)
	}
	return tab.Run(name, Launch{Grid: grid, Block: block, Args: raw(t, s, args...)}, m)
}

// randn returns n normal values of scale s from a fixed seed.
func randn(seed uint64, n int, s float64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64() * s)
	}
	return out
}

// roundAll rounds x to dt (what a dt tensor holds).
func roundAll(dt device.DType, x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = rnd(dt, v)
	}
	return out
}

// closeTo reports the first element of got more than tol·(1+|want|) away.
func closeTo(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); !(d <= tol*(1+math.Abs(want[i]))) {
			t.Fatalf("%s[%d] = %v, want %v (tolerance %g)", what, i, got[i], want[i], tol)
		}
	}
}

// dtTol is the relative tolerance of one rounding to dt, with headroom.
func dtTol(dt device.DType) float64 {
	switch dt {
	case device.BF16:
		return 1.6e-2
	case device.F16:
		return 2e-3
	}
	return 2e-6
}

func dim(x int) driver.Dim3 { return driver.Dim3{X: uint32(x), Y: 1, Z: 1} }

func errorsIs(err, target error) bool { return errors.Is(err, target) }
