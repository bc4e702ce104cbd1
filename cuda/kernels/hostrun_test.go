package kernels

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/device"
	"github.com/ebitengine/purego"
)

// TestSourcesOnHost compiles the CUDA sources as host C++ (with the shim)
// and runs every kernel the way a GPU would — blocks in turn, one OS
// thread per CUDA thread, __syncthreads a barrier — on the same inputs as
// its Go reference, and requires the same bits (a few ulps for the Approx
// kernels, whose expf/logf/tanhf here are the host's). This checks the
// sources' arithmetic and order against the references without a GPU;
// the GPU run then checks the GPU's.

// realMem is a Memory over real host addresses (the kernels' pointers
// are the buffers' own addresses).
type realMem struct{ bufs [][]byte }

func (m *realMem) alloc(n int) []byte {
	words := make([]uint64, (n+7)/8+1)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
	m.bufs = append(m.bufs, b)
	return b
}

func (m *realMem) Bytes(addr uint64, n int) ([]byte, error) {
	for _, b := range m.bufs {
		base := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
		if addr >= base && addr+uint64(n) <= base+uint64(len(b)) {
			return b[addr-base : addr-base+uint64(n)], nil
		}
	}
	return nil, fmt.Errorf("[%#x, +%d) is not a test buffer", addr, n)
}

// hostKernels is the host-compiled kernel library.
type hostKernels struct {
	launch uintptr
	thunks map[string]uintptr
}

func buildHostKernels(t *testing.T, tab *Table) *hostKernels {
	t.Helper()
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++")
	}
	var b strings.Builder
	b.WriteString(Source())
	b.WriteString("\n#include <stdint.h>\nstatic inline float u2f(unsigned u) { float f; memcpy(&f, &u, 4); return f; }\n")
	for _, s := range tab.Specs() {
		fmt.Fprintf(&b, "extern \"C\" void thunk_%s(const unsigned long long* a) { %s(", s.Name, s.Name)
		for i, p := range s.Params {
			if i > 0 {
				b.WriteString(", ")
			}
			switch {
			case p.Type.Pointer():
				fmt.Fprintf(&b, "(%s)(uintptr_t)a[%d]", p.Type, i)
			case p.Type == I32:
				fmt.Fprintf(&b, "(int)(unsigned)a[%d]", i)
			case p.Type == I64:
				fmt.Fprintf(&b, "(long long)a[%d]", i)
			case p.Type == F32:
				fmt.Fprintf(&b, "u2f((unsigned)a[%d])", i)
			}
		}
		b.WriteString("); }\n")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "kernels.cpp")
	if err := os.WriteFile(src, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	shim, _ := filepath.Abs("testdata/cuda_shim.h")
	launch, _ := filepath.Abs("testdata/host_launch.cpp")
	lib := filepath.Join(dir, "libkernels.so")
	cmd := exec.Command(gxx, "-std=c++17", "-O1", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-pthread",
		"-include", shim, src, launch, "-o", lib)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	hk := &hostKernels{thunks: map[string]uintptr{}}
	if hk.launch, err = purego.Dlsym(h, "host_launch"); err != nil {
		t.Fatal(err)
	}
	for _, s := range tab.Specs() {
		if hk.thunks[s.Name], err = purego.Dlsym(h, "thunk_"+s.Name); err != nil {
			t.Fatal(err)
		}
	}
	return hk
}

// bufArg is a buffer of a host-run case.
type bufArg struct {
	dt   device.DType // element type of vals
	size int          // element width in bytes: 2, 4 or 8
	vals []float32    // initial values (rounded to dt); nil: zeros
	ints []int32
	n    int   // elements
	ptrs []int // a pointer array holding the addresses of these extra buffers
}

// hcase builds one launch: pointer parameters are buffers, scalars stay.
type hcase struct {
	dt          device.DType
	grid, block driver.Dim3
	args        []any     // *bufArg, int, float32, or nil (a null pointer)
	extra       []*bufArg // buffers reached only through a pointer array
}

func (c *hcase) add(b *bufArg) { c.args = append(c.args, b) }
func (c *hcase) t(vals []float32) {
	c.add(&bufArg{dt: c.dt, size: c.dt.Size(), vals: vals, n: len(vals)})
}
func (c *hcase) z(n int) { c.add(&bufArg{dt: c.dt, size: c.dt.Size(), n: n}) }
func (c *hcase) f(vals []float32) {
	c.add(&bufArg{dt: device.F32, size: 4, vals: vals, n: len(vals)})
}
func (c *hcase) fz(n int)          { c.add(&bufArg{dt: device.F32, size: 4, n: n}) }
func (c *hcase) dz(n int)          { c.add(&bufArg{size: 8, n: n}) }
func (c *hcase) uz(n int)          { c.add(&bufArg{size: 4, n: n}) }
func (c *hcase) i(v []int32)       { c.add(&bufArg{size: 4, ints: v, n: len(v)}) }
func (c *hcase) null()             { c.args = append(c.args, nil) }
func (c *hcase) s(v ...any)        { c.args = append(c.args, v...) }
func (c *hcase) shape(g, b uint32) { c.grid, c.block = dim(int(g)), dim(int(b)) }
func (c *hcase) shape2(gx, gy, b uint32) {
	c.grid, c.block = driver.Dim3{X: gx, Y: gy, Z: 1}, dim(int(b))
}

// materialize lays the buffers out in m; it returns the raw arguments and
// every buffer holding data (extras, then parameters; not the pointer
// arrays, whose addresses differ from one layout to another), for
// comparison.
func (c *hcase) materialize(t *testing.T, s *Spec, m *realMem) ([]uint64, [][]byte) {
	t.Helper()
	fill := func(b *bufArg) []byte {
		mem := m.alloc(b.n * b.size)
		switch {
		case b.vals != nil && b.dt == device.F32:
			copy(unsafe.Slice((*float32)(unsafe.Pointer(&mem[0])), b.n), b.vals)
		case b.vals != nil:
			copy(unsafe.Slice((*uint16)(unsafe.Pointer(&mem[0])), b.n), bits(b.dt, b.vals))
		case b.ints != nil:
			copy(unsafe.Slice((*int32)(unsafe.Pointer(&mem[0])), b.n), b.ints)
		}
		return mem
	}
	addr := func(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
	var all [][]byte
	var extra []uint64
	for _, b := range c.extra {
		mem := fill(b)
		all = append(all, mem)
		extra = append(extra, addr(mem))
	}
	raw := make([]uint64, len(c.args))
	for i, a := range c.args {
		switch v := a.(type) {
		case *bufArg:
			if v == nil {
				continue
			}
			mem := fill(v)
			for k, j := range v.ptrs {
				*(*uint64)(unsafe.Pointer(&mem[8*k])) = extra[j]
			}
			raw[i] = addr(mem)
			if v.ptrs == nil {
				all = append(all, mem)
			}
		case int:
			if s.Params[i].Type == I32 {
				raw[i] = uint64(uint32(int32(v)))
			} else {
				raw[i] = uint64(int64(v))
			}
		case float32:
			raw[i] = uint64(math.Float32bits(v))
		case nil:
		default:
			t.Fatalf("%s: argument %d is a %T", s.Name, i, a)
		}
	}
	if len(raw) != len(s.Params) {
		t.Fatalf("%s: %d arguments for %d parameters", s.Name, len(raw), len(s.Params))
	}
	return raw, all
}

// hostCases are launches of every family; blocks of 32 or 64 threads so
// the trees reduce across real threads.
func hostCases(dt device.DType) map[string]func(c *hcase) {
	const n = 300
	x := func(seed uint64, k int, s float64) []float32 { return roundAll(dt, randn(seed, k, s)) }
	const N, C = 5, 70
	return map[string]func(c *hcase){
		"fill_*":           func(c *hcase) { c.z(n); c.s(n, float32(2.7)); c.shape(2, 32) },
		"cast_f32_*":       func(c *hcase) { c.z(n); c.f(append(randn(1, n-3, 1e4), 65520, 3e-8, -1e-45)); c.s(n); c.shape(2, 32) },
		"cast_*_f32":       func(c *hcase) { c.fz(n); c.t(x(2, n, 1)); c.s(n); c.shape(2, 32) },
		"scale_*":          func(c *hcase) { c.t(x(3, n, 1)); c.s(n, float32(1.7)); c.shape(2, 32) },
		"scale_dev_*":      func(c *hcase) { c.t(x(3, n, 1)); c.s(n); c.f([]float32{-0.3}); c.shape(2, 32) },
		"div_*":            func(c *hcase) { c.t(x(4, n, 1)); c.s(n, float32(3)); c.shape(2, 32) },
		"add_*":            func(c *hcase) { c.z(n); c.t(x(5, n, 1)); c.t(x(6, n, 1)); c.s(n); c.shape(2, 32) },
		"accumulate_*":     func(c *hcase) { c.t(x(7, n, 1)); c.t(x(8, n, 1)); c.s(n); c.shape(2, 32) },
		"accumulate_*_f32": func(c *hcase) { c.f(randn(7, n, 1)); c.t(x(8, n, 1)); c.s(n); c.shape(2, 32) },
		"reduce_sum_*":     func(c *hcase) { c.dz(3); c.t(x(9, 1001, 1)); c.s(1001, 1); c.shape(3, 32) },
		"all_finite_*": func(c *hcase) {
			v := x(10, n, 1)
			v[200] = float32(math.Inf(1))
			c.uz(1)
			c.t(v)
			c.s(n)
			c.shape(2, 32)
		},
		"reduce_n_*": func(c *hcase) {
			for k := range 3 {
				c.extra = append(c.extra, &bufArg{dt: dt, size: dt.Size(), vals: x(uint64(11+k), n, 1), n: n})
			}
			c.z(n)
			c.add(&bufArg{size: 8, n: 3, ptrs: []int{0, 1, 2}})
			c.s(3, n, 2)
			c.shape(2, 32)
		},
		"layernorm_fwd_*": func(c *hcase) {
			c.z(N * C)
			c.fz(N)
			c.fz(N)
			c.t(x(20, N*C, 2))
			c.t(x(21, C, 1))
			c.t(x(22, C, 1))
			c.s(N, C, float32(1e-5))
			c.shape(2, 32)
		},
		"layernorm_bwd_*": func(c *hcase) {
			c.z(N * C)
			c.t(x(23, N*C, 1))
			c.t(x(20, N*C, 2))
			c.t(x(21, C, 1))
			c.f(randn(24, N, 0.1))
			c.f(roundAll(device.F32, []float32{1.1, 0.9, 1.3, 0.7, 1}))
			c.s(N, C)
			c.shape(3, 64)
		},
		"layernorm_bwd_partial_*": func(c *hcase) {
			c.dz(3 * 2 * C)
			c.t(x(23, N*C, 1))
			c.t(x(20, N*C, 2))
			c.f(randn(24, N, 0.1))
			c.f([]float32{1.1, 0.9, 1.3, 0.7, 1})
			c.s(N, C, 2)
			c.shape2(3, 2, 32)
		},
		"bias_grad_partial_*": func(c *hcase) { c.dz(3 * C); c.t(x(25, N*C, 1)); c.s(N, C, 2); c.shape2(3, 3, 32) },
		"colsum_finish_*":     func(c *hcase) { c.t(x(26, C, 1)); c.f64(randn(27, 3*C, 1)); c.s(3, C, C, 1); c.shape(2, 32) },
		"rmsnorm_fwd_*": func(c *hcase) {
			c.z(N * C)
			c.fz(N)
			c.t(x(28, N*C, 2))
			c.t(x(29, C, 1))
			c.s(N, C, float32(1e-6))
			c.shape(2, 64)
		},
		"rmsnorm_bwd_*": func(c *hcase) {
			c.z(N * C)
			c.t(x(30, N*C, 1))
			c.t(x(28, N*C, 2))
			c.t(x(29, C, 1))
			c.f([]float32{0.5, 0.7, 1.1, 0.9, 2})
			c.s(N, C)
			c.shape(2, 32)
		},
		"rmsnorm_bwd_partial_*": func(c *hcase) {
			c.dz(2 * C)
			c.t(x(30, N*C, 1))
			c.t(x(28, N*C, 2))
			c.f([]float32{0.5, 0.7, 1.1, 0.9, 2})
			c.s(N, C, 3)
			c.shape2(3, 2, 32)
		},
		"gelu_fwd_*":   func(c *hcase) { c.z(n); c.t(x(31, n, 2)); c.s(n); c.shape(2, 32) },
		"gelu_bwd_*":   func(c *hcase) { c.z(n); c.t(x(31, n, 2)); c.t(x(32, n, 1)); c.s(n); c.shape(2, 32) },
		"swiglu_fwd_*": func(c *hcase) { c.z(n); c.t(x(33, n, 2)); c.t(x(34, n, 1)); c.s(n); c.shape(2, 32) },
		"swiglu_bwd_*": func(c *hcase) {
			c.z(n)
			c.z(n)
			c.t(x(33, n, 2))
			c.t(x(34, n, 1))
			c.t(x(35, n, 1))
			c.s(n)
			c.shape(2, 32)
		},
		"rope_*": func(c *hcase) {
			c.z(6 * 2 * 8)
			c.t(x(36, 6*2*8, 1))
			c.f(randn(37, 3*4, 1))
			c.f(randn(38, 3*4, 1))
			c.s(6, 3, 2, 8, 1, 0)
			c.shape(2, 32)
		},
		"permute_0213_*": func(c *hcase) { c.z(2 * 3 * 4 * 5); c.t(x(39, 120, 1)); c.s(2, 3, 4, 5); c.shape(2, 32) },
		"qkv_split_*": func(c *hcase) {
			c.z(2 * 4 * 3 * 5)
			c.z(2 * 2 * 3 * 5)
			c.z(2 * 2 * 3 * 5)
			c.t(x(40, 2*3*8*5, 1))
			c.s(2, 3, 4, 2, 5)
			c.shape(2, 32)
		},
		"qkv_merge_*": func(c *hcase) {
			c.z(2 * 3 * 8 * 5)
			c.t(x(41, 2*4*3*5, 1))
			c.t(x(42, 2*2*3*5, 1))
			c.t(x(43, 2*2*3*5, 1))
			c.s(2, 3, 4, 2, 5)
			c.shape(2, 32)
		},
		"repeat_kv_*":     func(c *hcase) { c.z(2 * 4 * 15); c.t(x(44, 2*2*15, 1)); c.s(2, 2, 2, 15); c.shape(2, 32) },
		"repeat_kv_bwd_*": func(c *hcase) { c.z(2 * 2 * 15); c.t(x(45, 2*4*15, 1)); c.s(2, 2, 2, 15); c.shape(2, 32) },
		"softmax_causal_fwd_*": func(c *hcase) {
			c.z(2 * 9 * 9)
			c.t(x(46, 2*9*9, 3))
			c.s(2, 9, float32(0.3))
			c.shape(4, 32)
		},
		"softmax_causal_bwd_*": func(c *hcase) {
			c.z(2 * 9 * 9)
			c.t(x(47, 2*9*9, 1))
			c.t(x(48, 2*9*9, 0.1))
			c.s(2, 9, float32(0.3))
			c.shape(4, 32)
		},
		"xent_fwd_bwd_*": func(c *hcase) {
			c.z(4 * 40)
			c.fz(4)
			c.t(x(49, 4*40, 3))
			c.i([]int32{3, -100, 33, 0})
			c.s(4, 37, 40, float32(0.25), -100)
			c.shape(2, 32)
		},
		"embedding_fwd_*": func(c *hcase) {
			c.z(6 * 4)
			c.i([]int32{1, 4, 0, 2, 9, 1})
			c.t(x(50, 5*4, 1))
			c.t(x(51, 3*4, 1))
			c.s(6, 3, 4, 5)
			c.uz(1)
			c.shape(1, 32)
		},
		"embedding_bwd_tok_*": func(c *hcase) {
			order, starts, uniq := TokenBuckets([]int32{1, 4, 1, 2, 4, 1})
			c.t(x(52, 5*4, 1))
			c.t(x(53, 6*4, 1))
			c.i(order)
			c.i(starts)
			c.i(uniq)
			c.s(len(uniq), 4)
			c.shape2(1, 2, 32)
		},
		"embedding_bwd_pos_*": func(c *hcase) { c.t(x(54, 3*4, 1)); c.t(x(55, 2*3*4, 1)); c.s(2, 3, 4); c.shape(1, 32) },
		"sum_f64":             func(c *hcase) { c.dz(1); c.f64(randn(56, 77, 1)); c.s(77); c.shape(1, 64) },
		"adam_f32": func(c *hcase) {
			c.f(randn(57, n, 1))
			c.f(randn(58, n, 0.1))
			c.f(randn(59, n, 0.01))
			c.f(absAll(randn(60, n, 0.001)))
			c.add(&bufArg{dt: device.BF16, size: 2, n: n})
			c.s(n, 5, 1, float32(0.9), float32(0.1), float32(0.999), float32(0.001), float32(30), float32(1e-8),
				float32(-1e-3), float32(-1e-5), float32(0.01))
			c.shape(2, 32)
		},
		"sgd_f32": func(c *hcase) {
			c.f(randn(61, n, 1))
			c.f(randn(62, n, 0.1))
			c.f(randn(63, n, 0.1))
			c.add(&bufArg{dt: device.F16, size: 2, n: n})
			c.s(n, 2, 1, 1, 1, 0, float32(0.01), float32(0.9), float32(1), float32(-0.1))
			c.shape(2, 32)
		},
	}
}

func (c *hcase) f64(v []float32) {
	d := make([]float32, 2*len(v)) // float64 values laid out as pairs of float32 words
	b := &bufArg{dt: device.F32, size: 4, n: 2 * len(v), vals: d}
	w := unsafe.Slice((*float64)(unsafe.Pointer(&d[0])), len(v))
	for i, x := range v {
		w[i] = float64(x) * 1.0000001
	}
	c.add(b)
}

func absAll(x []float32) []float32 {
	for i := range x {
		x[i] = float32(math.Abs(float64(x[i])))
	}
	return x
}

func TestSourcesOnHost(t *testing.T) {
	tab := NewTable()
	hk := buildHostKernels(t, tab)
	covered := map[string]bool{}
	for _, s := range tab.Specs() {
		mk := hostCases(s.DType)[s.Family]
		if mk == nil {
			t.Errorf("%s: no host-run case", s.Name)
			continue
		}
		covered[s.Name] = true
		t.Run(s.Name, func(t *testing.T) {
			c := &hcase{dt: s.DType}
			mk(c)
			var refMem, hostMem realMem
			refArgs, refBufs := c.materialize(t, s, &refMem)
			hostArgs, hostBufs := c.materialize(t, s, &hostMem)
			if err := tab.Run(s.Name, Launch{Grid: c.grid, Block: c.block, Args: refArgs}, &refMem); err != nil {
				t.Fatal(err)
			}
			purego.SyscallN(hk.launch, hk.thunks[s.Name], uintptr(unsafe.Pointer(&hostArgs[0])),
				uintptr(c.grid.X), uintptr(c.grid.Y), uintptr(c.grid.Z), uintptr(c.block.X))
			for i := range refBufs {
				if bytes.Equal(refBufs[i], hostBufs[i]) {
					continue
				}
				if s.Approx && closeBits(refBufs[i], hostBufs[i], s.DType) {
					continue
				}
				t.Errorf("buffer %d differs between the Go reference and the CUDA source run on the host:\n ref  %x\n host %x",
					i, head(refBufs[i]), head(hostBufs[i]))
			}
		})
	}
}

// closeBits compares two buffers of dt values within a few ulps.
func closeBits(a, b []byte, dt device.DType) bool {
	if len(a) != len(b) {
		return false
	}
	n := len(a) / dt.Size()
	for i := range n {
		var x, y float64
		if dt == device.F32 {
			x = float64(*(*float32)(unsafe.Pointer(&a[4*i])))
			y = float64(*(*float32)(unsafe.Pointer(&b[4*i])))
		} else {
			x = float64(widen(dt, *(*uint16)(unsafe.Pointer(&a[2*i]))))
			y = float64(widen(dt, *(*uint16)(unsafe.Pointer(&b[2*i]))))
		}
		// Host and Go transcendentals differ by an ulp or so, which GELU's
		// and SiLU's formulas amplify near their zeros.
		u := 32.0 / (1 << 23)
		if dt != device.F32 {
			u = 2.0 / 128
		}
		if x != y && !(math.Abs(x-y) <= u*math.Max(math.Abs(x), 1e-2)) {
			return false
		}
	}
	return true
}

func head(b []byte) []byte { return b[:min(len(b), 48)] }
