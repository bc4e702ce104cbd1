package driver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/google/go-cmp/cmp"
)

// stubLib is a handle on one stub library's recorder.
type stubLib struct {
	t *testing.T
	h uintptr
}

func openStub(t *testing.T, path string) stubLib {
	t.Helper()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	return stubLib{t, h}
}

func (s stubLib) fn(name string) uintptr {
	p, err := purego.Dlsym(s.h, name)
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

// last returns the most recent recorded call.
func (s stubLib) last() (string, []uint64) {
	var name [64]byte
	var args [32]uint64
	n, _, _ := purego.SyscallN(s.fn("stub_last"), uintptr(unsafe.Pointer(&name[0])), uintptr(unsafe.Pointer(&args[0])))
	return goString(&name[0]), args[:int32(n)]
}

// snap returns the bytes the last call snapshotted.
func (s stubLib) snap() []byte {
	var buf [4096]byte
	n, _, _ := purego.SyscallN(s.fn("stub_snap"), uintptr(unsafe.Pointer(&buf[0])))
	return append([]byte(nil), buf[:int32(n)]...)
}

func (s stubLib) reset() { purego.SyscallN(s.fn("stub_reset")) }

func (s stubLib) fail(name string, code int) {
	c := cString(name)
	purego.SyscallN(s.fn("stub_fail"), uintptr(unsafe.Pointer(&c[0])), uintptr(code))
}

// anyPtr in an expected argument list accepts any non-zero value (the
// address of a Go out-variable).
const anyPtr uint64 = math.MaxUint64 - 1

// loadStubs builds the stubs and loads them through the real loader, with
// the stub folder as the only --cuda-lib-dir.
func loadStubs(t *testing.T, o stubOptions) (*Libs, string) {
	t.Helper()
	dir := buildStubs(t, o)
	l, err := load(isolatedEnv(dir), isolatedLibs())
	if err != nil {
		t.Fatalf("loading the stubs: %v", err)
	}
	return l, dir
}

type abiCase struct {
	name string
	sym  string                           // the C function the stub should have recorded
	call func() ([]uint64, error)         // the wrapper call; returns its results as integers
	args []uint64                         // expected arguments as the callee saw them
	outs []uint64                         // expected results
	snap []byte                           // expected snapshot (nil: not checked)
	lib  func(cu, nv, lt stubLib) stubLib // which stub records it
}

func TestABIWrappers(t *testing.T) {
	l, dir := loadStubs(t, stubOptions{})
	cu := openStub(t, filepath.Join(dir, "libcuda.so.1"))
	nv := openStub(t, filepath.Join(dir, "libnvrtc.so.12"))
	lt := openStub(t, filepath.Join(dir, "libcublasLt.so.12"))
	d, n, b := l.Driver, l.NVRTC, l.BlasLt
	m := uint64(stubMark)
	u := func(v ...any) []uint64 {
		out := make([]uint64, len(v))
		for i, x := range v {
			out[i] = reflect.ValueOf(x).Convert(reflect.TypeFor[uint64]()).Uint()
		}
		return out
	}
	buf := make([]byte, 64)
	bufAddr := uint64(uintptr(unsafe.Pointer(&buf[0])))
	image := []byte("IMAGE")
	imageAddr := uint64(uintptr(unsafe.Pointer(&image[0])))
	onCU := func(cu, nv, lt stubLib) stubLib { return cu }
	onNV := func(cu, nv, lt stubLib) stubLib { return nv }
	onLT := func(cu, nv, lt stubLib) stubLib { return lt }
	le64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

	cases := []abiCase{
		{"Init", "cuInit", func() ([]uint64, error) { return nil, d.Init() }, u(0), nil, nil, onCU},
		{"DeviceCount", "cuDeviceGetCount", func() ([]uint64, error) { v, err := d.DeviceCount(); return u(v), err }, u(anyPtr), u(m), nil, onCU},
		{"DeviceGet", "cuDeviceGet", func() ([]uint64, error) { v, err := d.DeviceGet(3); return u(v), err }, u(anyPtr, 3), u(m), nil, onCU},
		{"DeviceGetNegative", "cuDeviceGet", func() ([]uint64, error) { _, err := d.DeviceGet(-2); return nil, err }, u(anyPtr, uint64(math.MaxUint64-1)), nil, nil, onCU},
		{"DeviceName", "cuDeviceGetName", func() ([]uint64, error) {
			s, err := d.DeviceName(7)
			if s != "Stub GPU" {
				t.Errorf("DeviceName = %q", s)
			}
			return nil, err
		}, u(anyPtr, 255, 7), nil, nil, onCU},
		{"DeviceAttribute", "cuDeviceGetAttribute", func() ([]uint64, error) { v, err := d.DeviceAttribute(AttrComputeCapabilityMajor, 2); return u(v), err }, u(anyPtr, 75, 2), u(m), nil, onCU},
		{"DeviceTotalMem", "cuDeviceTotalMem_v2", func() ([]uint64, error) { v, err := d.DeviceTotalMem(5); return u(v), err }, u(anyPtr, 5), u(m), nil, onCU},
		{"PrimaryCtxRetain", "cuDevicePrimaryCtxRetain", func() ([]uint64, error) { v, err := d.PrimaryCtxRetain(4); return u(v), err }, u(anyPtr, 4), u(m), nil, onCU},
		{"PrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", func() ([]uint64, error) { return nil, d.PrimaryCtxRelease(4) }, u(4), nil, nil, onCU},
		{"CtxSetCurrent", "cuCtxSetCurrent", func() ([]uint64, error) { return nil, d.CtxSetCurrent(0xC0FFEE) }, u(0xC0FFEE), nil, nil, onCU},
		{"CtxSynchronize", "cuCtxSynchronize", func() ([]uint64, error) { return nil, d.CtxSynchronize() }, u(), nil, nil, onCU},
		{"MemGetInfo", "cuMemGetInfo_v2", func() ([]uint64, error) { f, tot, err := d.MemGetInfo(); return u(f, tot), err }, u(anyPtr, anyPtr), u(m, m+1), nil, onCU},
		{"DeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool", func() ([]uint64, error) { v, err := d.DeviceGetDefaultMemPool(1); return u(v), err }, u(anyPtr, 1), u(m), nil, onCU},
		{"MemPoolSetAttribute", "cuMemPoolSetAttribute", func() ([]uint64, error) { return nil, d.MemPoolSetAttribute(0x900, PoolReleaseThreshold, 1<<40) }, u(0x900, 4, anyPtr), nil, le64(1 << 40), onCU},
		{"MemPoolGetAttribute", "cuMemPoolGetAttribute", func() ([]uint64, error) { v, err := d.MemPoolGetAttribute(0x900, PoolUsedMemCurrent); return u(v), err }, u(0x900, 7, anyPtr), u(m + 2), nil, onCU},
		{"MemPoolTrimTo", "cuMemPoolTrimTo", func() ([]uint64, error) { return nil, d.MemPoolTrimTo(0x900, 1<<33) }, u(0x900, uint64(1)<<33), nil, nil, onCU},
		{"MemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", func() ([]uint64, error) { v, err := d.MemAllocFromPoolAsync(1<<35, 0x900, 0x77); return u(v), err }, u(anyPtr, uint64(1)<<35, 0x900, 0x77), u(m), nil, onCU},
		{"MemFreeAsync", "cuMemFreeAsync", func() ([]uint64, error) { return nil, d.MemFreeAsync(0xD00D, 0x77) }, u(0xD00D, 0x77), nil, nil, onCU},
		{"MemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2", func() ([]uint64, error) { return nil, d.MemcpyHtoDAsync(0xD00D, unsafe.Pointer(&buf[0]), 1<<33, 0x77) }, u(0xD00D, bufAddr, uint64(1)<<33, 0x77), nil, nil, onCU},
		{"MemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2", func() ([]uint64, error) { return nil, d.MemcpyDtoHAsync(unsafe.Pointer(&buf[0]), 0xD00D, 64, 0x77) }, u(bufAddr, 0xD00D, 64, 0x77), nil, nil, onCU},
		{"MemcpyDtoDAsync", "cuMemcpyDtoDAsync_v2", func() ([]uint64, error) { return nil, d.MemcpyDtoDAsync(0xD1, 0xD2, 1<<34, 0x77) }, u(0xD1, 0xD2, uint64(1)<<34, 0x77), nil, nil, onCU},
		{"MemsetD8Async", "cuMemsetD8Async", func() ([]uint64, error) { return nil, d.MemsetD8Async(0xD1, 0xAB, 1000, 0x77) }, u(0xD1, 0xAB, 1000, 0x77), nil, nil, onCU},
		{"MemsetD32Async", "cuMemsetD32Async", func() ([]uint64, error) { return nil, d.MemsetD32Async(0xD1, 0xDEADBEEF, 1000, 0x77) }, u(0xD1, 0xDEADBEEF, 1000, 0x77), nil, nil, onCU},
		{"MemHostAlloc", "cuMemHostAlloc", func() ([]uint64, error) {
			p, err := d.MemHostAlloc(1<<30, HostAllocPortable)
			return u(uintptr(p)), err
		}, u(anyPtr, uint64(1)<<30, 1), u(m), nil, onCU},
		{"MemFreeHost", "cuMemFreeHost", func() ([]uint64, error) { return nil, d.MemFreeHost(unsafe.Pointer(&buf[0])) }, u(bufAddr), nil, nil, onCU},
		{"StreamCreate", "cuStreamCreate", func() ([]uint64, error) { v, err := d.StreamCreate(StreamNonBlocking); return u(v), err }, u(anyPtr, 1), u(m), nil, onCU},
		{"StreamDestroy", "cuStreamDestroy_v2", func() ([]uint64, error) { return nil, d.StreamDestroy(0x77) }, u(0x77), nil, nil, onCU},
		{"StreamSynchronize", "cuStreamSynchronize", func() ([]uint64, error) { return nil, d.StreamSynchronize(0x77) }, u(0x77), nil, nil, onCU},
		{"StreamQuery", "cuStreamQuery", func() ([]uint64, error) { ok, err := d.StreamQuery(0x77); return u(b2u(ok)), err }, u(0x77), u(1), nil, onCU},
		{"StreamWaitEvent", "cuStreamWaitEvent", func() ([]uint64, error) { return nil, d.StreamWaitEvent(0x77, 0xE1) }, u(0x77, 0xE1, 0), nil, nil, onCU},
		{"EventCreate", "cuEventCreate", func() ([]uint64, error) { v, err := d.EventCreate(EventDisableTiming); return u(v), err }, u(anyPtr, 2), u(m), nil, onCU},
		{"EventDestroy", "cuEventDestroy_v2", func() ([]uint64, error) { return nil, d.EventDestroy(0xE1) }, u(0xE1), nil, nil, onCU},
		{"EventRecord", "cuEventRecord", func() ([]uint64, error) { return nil, d.EventRecord(0xE1, 0x77) }, u(0xE1, 0x77), nil, nil, onCU},
		{"EventSynchronize", "cuEventSynchronize", func() ([]uint64, error) { return nil, d.EventSynchronize(0xE1) }, u(0xE1), nil, nil, onCU},
		{"EventQuery", "cuEventQuery", func() ([]uint64, error) { ok, err := d.EventQuery(0xE1); return u(b2u(ok)), err }, u(0xE1), u(1), nil, onCU},
		{"ModuleLoadData", "cuModuleLoadData", func() ([]uint64, error) { v, err := d.ModuleLoadData(image); return u(v), err }, u(anyPtr, imageAddr), u(m), nil, onCU},
		{"ModuleUnload", "cuModuleUnload", func() ([]uint64, error) { return nil, d.ModuleUnload(0x30) }, u(0x30), nil, nil, onCU},
		{"ModuleGetFunction", "cuModuleGetFunction", func() ([]uint64, error) { v, err := d.ModuleGetFunction(0x30, "adamw_f32"); return u(v), err }, u(anyPtr, 0x30, anyPtr), u(m), []byte("adamw_f32\x00"), onCU},

		{"NVRTCVersion", "", func() ([]uint64, error) { a, b, err := n.Version(); return u(a, b), err }, nil, u(12, 4), nil, onNV},
		{"SupportedArchs", "", func() ([]uint64, error) { a, err := n.SupportedArchs(); return u(a[0], a[1]), err }, nil, u(80, 90), nil, onNV},

		{"LtVersion", "", func() ([]uint64, error) { return u(b.Version()), nil }, nil, u(120400), nil, onLT},
		{"LtCreate", "cublasLtCreate", func() ([]uint64, error) { v, err := b.Create(); return u(v), err }, u(anyPtr), u(m), nil, onLT},
		{"LtDestroy", "cublasLtDestroy", func() ([]uint64, error) { return nil, b.Destroy(0x41) }, u(0x41), nil, nil, onLT},
		{"MatmulDescCreate", "cublasLtMatmulDescCreate", func() ([]uint64, error) { v, err := b.MatmulDescCreate(Compute32F, R32F); return u(v), err }, u(anyPtr, 68, 0), u(m), nil, onLT},
		{"MatmulDescDestroy", "cublasLtMatmulDescDestroy", func() ([]uint64, error) { return nil, b.MatmulDescDestroy(0x42) }, u(0x42), nil, nil, onLT},
		{"MatmulDescSetAttribute", "cublasLtMatmulDescSetAttribute", func() ([]uint64, error) { return nil, b.MatmulDescSetAttribute(0x42, LtDescTransB, Int32Attr(OpT)) }, u(0x42, 4, anyPtr, 4), nil, []byte{1, 0, 0, 0}, onLT},
		{"MatrixLayoutCreate", "cublasLtMatrixLayoutCreate", func() ([]uint64, error) { v, err := b.MatrixLayoutCreate(R16BF, 768, 1<<33, -5); return u(v), err }, u(anyPtr, 14, 768, uint64(1)<<33, uint64(math.MaxUint64-4)), u(m), nil, onLT},
		{"MatrixLayoutDestroy", "cublasLtMatrixLayoutDestroy", func() ([]uint64, error) { return nil, b.MatrixLayoutDestroy(0x43) }, u(0x43), nil, nil, onLT},
		{"MatrixLayoutSetAttribute", "cublasLtMatrixLayoutSetAttribute", func() ([]uint64, error) {
			return nil, b.MatrixLayoutSetAttribute(0x43, LtLayoutStridedOffset, Int64Attr(1<<40))
		}, u(0x43, 6, anyPtr, 8), nil, le64(1 << 40), onLT},
		{"MatmulPreferenceCreate", "cublasLtMatmulPreferenceCreate", func() ([]uint64, error) { v, err := b.MatmulPreferenceCreate(); return u(v), err }, u(anyPtr), u(m), nil, onLT},
		{"MatmulPreferenceDestroy", "cublasLtMatmulPreferenceDestroy", func() ([]uint64, error) { return nil, b.MatmulPreferenceDestroy(0x44) }, u(0x44), nil, nil, onLT},
		{"MatmulPreferenceSetAttribute", "cublasLtMatmulPreferenceSetAttribute", func() ([]uint64, error) {
			return nil, b.MatmulPreferenceSetAttribute(0x44, LtPrefMaxWorkspaceBytes, Uint64Attr(32<<20))
		}, u(0x44, 1, anyPtr, 8), nil, le64(32 << 20), onLT},
		{"MatmulAlgoGetHeuristic", "cublasLtMatmulAlgoGetHeuristic", func() ([]uint64, error) {
			res, err := b.MatmulAlgoGetHeuristic(0x41, 0x42, 0x43, 0x45, 0x46, 0x47, 0x44, 4)
			var out []uint64
			for _, r := range res {
				out = append(out, r.Algo.Data[0], r.Algo.Data[7], r.WorkspaceSize, uint64(r.State), uint64(math.Float32bits(r.WavesCount)))
			}
			return out, err
		}, u(0x41, 0x42, 0x43, 0x45, 0x46, 0x47, 0x44, 4, anyPtr, anyPtr),
			u(0xA160, 0xA167, 4096, 0, math.Float32bits(1.5), 0xA170, 0xA177, 8192, 0, math.Float32bits(2.5)), nil, onLT},
	}

	// cuLaunchKernel: 11 arguments, and the parameter values behind kernelParams.
	var p0 uint64 = 0x1122334455667788
	var p1 int32 = -7
	var p2 float32 = 0.25
	params := []unsafe.Pointer{unsafe.Pointer(&p0), unsafe.Pointer(&p1), unsafe.Pointer(&p2)}
	sizes := []int32{8, 4, 4}
	purego.SyscallN(cu.fn("stub_set_params"), 3, uintptr(unsafe.Pointer(&sizes[0])))
	var want []byte
	want = binary.LittleEndian.AppendUint64(want, p0)
	want = binary.LittleEndian.AppendUint32(want, uint32(p1))
	want = binary.LittleEndian.AppendUint32(want, math.Float32bits(p2))
	cases = append(cases, abiCase{"LaunchKernel", "cuLaunchKernel", func() ([]uint64, error) {
		return nil, d.LaunchKernel(0xF1, Dim3{1, 2, 3}, Dim3{4, 5, 6}, 7, 0x77, params)
	}, u(0xF1, 1, 2, 3, 4, 5, 6, 7, 0x77, uint64(uintptr(unsafe.Pointer(&params[0]))), 0), nil, want, onCU})

	// cublasLtMatmul: 16 arguments, alpha and beta by pointer, the
	// 64-byte algorithm struct by pointer.
	alpha, beta := float32(1.5), float32(-2)
	var algo LtAlgo
	for i := range algo.Data {
		algo.Data[i] = 0x0101010101010101 * uint64(i+1)
	}
	want = binary.LittleEndian.AppendUint32(nil, math.Float32bits(alpha))
	want = binary.LittleEndian.AppendUint32(want, math.Float32bits(beta))
	for _, v := range algo.Data {
		want = binary.LittleEndian.AppendUint64(want, v)
	}
	cases = append(cases, abiCase{"Matmul", "cublasLtMatmul", func() ([]uint64, error) {
		return nil, b.Matmul(0x41, 0x42, &alpha, 0xA0, 0x43, 0xB0, 0x45, &beta, 0xC0, 0x46, 0xD0, 0x47, &algo, 0xE0, 1<<33, 0x77)
	}, u(0x41, 0x42, anyPtr, 0xA0, 0x43, 0xB0, 0x45, anyPtr, 0xC0, 0x46, 0xD0, 0x47, anyPtr, 0xE0, uint64(1)<<33, 0x77), nil, want, onLT})

	covered := map[string]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.lib(cu, nv, lt)
			s.reset()
			outs, err := c.call()
			if err != nil {
				t.Fatalf("%v", err)
			}
			if d := cmp.Diff(c.outs, outs); len(c.outs)+len(outs) > 0 && d != "" {
				t.Errorf("results (-want +got):\n%s", d)
			}
			if c.sym == "" {
				return
			}
			covered[c.sym] = true
			name, args := s.last()
			if name != c.sym {
				t.Fatalf("stub recorded %q, want %q", name, c.sym)
			}
			if len(args) != len(c.args) {
				t.Fatalf("%d arguments recorded, want %d", len(args), len(c.args))
			}
			for i, w := range c.args {
				if (w == anyPtr && args[i] == 0) || (w != anyPtr && args[i] != w) {
					t.Errorf("argument %d = %#x, want %#x", i, args[i], w)
				}
			}
			if c.snap != nil {
				if got := s.snap(); !bytes.Equal(got, c.snap) {
					t.Errorf("pointed-to bytes = %x, want %x", got, c.snap)
				}
			}
		})
	}
	// Every wrapper method of every interface has a case (or, for the
	// loader's own symbols, is exercised by loading).
	for _, it := range []reflect.Type{reflect.TypeFor[Driver](), reflect.TypeFor[NVRTC](), reflect.TypeFor[BlasLt]()} {
		for i := range it.NumMethod() {
			m := it.Method(i).Name
			found := false
			for _, c := range cases {
				found = found || c.name == m || c.name == "Lt"+m || c.name == "NVRTC"+m
			}
			if !found && m != "DriverVersion" && m != "Compile" {
				t.Errorf("%s.%s has no ABI case", it.Name(), m)
			}
		}
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// TestABIErrors checks the error path: the status in the low 32 bits, the
// library's own name and description, and the classification.
func TestABIErrors(t *testing.T) {
	l, dir := loadStubs(t, stubOptions{})
	cu := openStub(t, filepath.Join(dir, "libcuda.so.1"))
	lt := openStub(t, filepath.Join(dir, "libcublasLt.so.12"))

	cu.fail("cuMemAllocFromPoolAsync", int(ErrOutOfMemory))
	_, err := l.Driver.MemAllocFromPoolAsync(1<<40, 1, 2)
	want := &Error{Lib: LibCUDA, Func: "cuMemAllocFromPoolAsync", Code: 2, Name: "STUB_CUDA_ERROR_2", Msg: "stub description of 2"}
	var e *Error
	if !errors.As(err, &e) || *e != *want {
		t.Errorf("MemAllocFromPoolAsync = %v, want %v", err, want)
	}
	if !IsOutOfMemory(err) {
		t.Error("CUDA_ERROR_OUT_OF_MEMORY is not OutOfMemory")
	}

	cu.reset()
	cu.fail("cuStreamQuery", int(ErrNotReady))
	if done, err := l.Driver.StreamQuery(5); done || err != nil {
		t.Errorf("StreamQuery on a busy stream = %v, %v; want false, nil", done, err)
	}
	cu.fail("cuStreamQuery", int(ErrIllegalAddress))
	if _, err := l.Driver.StreamQuery(5); !IsSticky(err) {
		t.Errorf("StreamQuery after a fault = %v, want a sticky error", err)
	}
	cu.reset()

	lt.fail("cublasLtCreate", 3)
	_, err = l.BlasLt.Create()
	if !errors.As(err, &e) || e.Name != "CUBLAS_STATUS_ALLOC_FAILED" || e.Msg != "stub status string" || !e.OutOfMemory() {
		t.Errorf("cublasLtCreate = %v", err)
	}
	lt.reset()
}

func TestABINVRTC(t *testing.T) {
	l, dir := loadStubs(t, stubOptions{})
	nv := openStub(t, filepath.Join(dir, "libnvrtc.so.12"))
	if l.BuiltinsPath != filepath.Join(dir, "libnvrtc-builtins.so.12.4") {
		t.Errorf("BuiltinsPath = %q", l.BuiltinsPath)
	}
	cubin, log, err := l.NVRTC.Compile(`extern "C" __global__ void k() {}`, "k.cu", []string{"-arch=sm_90", "--fmad=false"})
	if err != nil {
		t.Fatalf("Compile: %v (log %q)", err, log)
	}
	if string(cubin) != "CUBIN: -arch=sm_90 --fmad=false" || log != "stub log" {
		t.Errorf("Compile = %q, log %q", cubin, log)
	}

	purego.SyscallN(nv.fn("stub_fail_compile"), 1)
	_, log, err = l.NVRTC.Compile("bad", "k.cu", nil)
	var e *Error
	if !errors.As(err, &e) || e.Lib != LibNVRTC || e.Func != "nvrtcCompileProgram" || e.Name != "NVRTC_ERROR_COMPILATION" {
		t.Errorf("failed Compile = %v", err)
	}
	if log != "k.cu(1): error: stub failure" {
		t.Errorf("failed Compile log = %q", log)
	}
	purego.SyscallN(nv.fn("stub_fail_compile"), 0)
}

// TestABIBuiltinsPreload: NVRTC that finds no builtins library loaded
// fails its first compilation, as a pip wheel's does when nobody preloads it.
func TestABIBuiltinsPreload(t *testing.T) {
	l, _ := loadStubs(t, stubOptions{builtinsSoname: "libnvrtc-builtins.so.12.9", noBuiltins: true})
	if l.BuiltinsPath != "" {
		t.Errorf("BuiltinsPath = %q with no builtins library beside NVRTC", l.BuiltinsPath)
	}
	_, log, err := l.NVRTC.Compile("k", "k.cu", nil)
	if err == nil || !strings.Contains(log, "failed to open libnvrtc-builtins.so.12.9") {
		t.Errorf("Compile without builtins = %v, log %q", err, log)
	}
}

func TestABILoaderRefusals(t *testing.T) {
	t.Run("old driver", func(t *testing.T) {
		dir := buildStubs(t, stubOptions{driverVersion: 11080})
		_, err := load(isolatedEnv(dir), isolatedLibs())
		var nc *NoCUDAError
		if !errors.As(err, &nc) || nc.Lib != LibCUDA || !strings.Contains(err.Error(), "driver supports CUDA 11.8; dszero needs CUDA 12.0") {
			t.Errorf("load = %v", err)
		}
	})
	t.Run("missing symbol", func(t *testing.T) {
		dir := buildStubs(t, stubOptions{tag: "hidden symbol"})
		cu := openStub(t, filepath.Join(dir, "libcuda.so.1"))
		name := cString("cuMemFreeAsync")
		purego.SyscallN(cu.fn("stub_hide"), uintptr(unsafe.Pointer(&name[0])))
		_, err := load(isolatedEnv(dir), isolatedLibs())
		if !errors.Is(err, ErrNoCUDA) || !strings.Contains(err.Error(), "cuGetProcAddress(cuMemFreeAsync, 12000) failed") {
			t.Errorf("load = %v", err)
		}
	})
	t.Run("NVRTC newer than the driver", func(t *testing.T) {
		newer := buildStubs(t, stubOptions{nvrtcMajor: 13})
		older := buildStubs(t, stubOptions{})
		l, err := load(isolatedEnv(newer, older), isolatedLibs())
		if err != nil {
			t.Fatal(err)
		}
		if l.NVRTCPath != filepath.Join(older, "libnvrtc.so.12") || l.NVRTCVersion != [2]int{12, 4} {
			t.Errorf("took NVRTC %v from %s, want 12.4 from %s", l.NVRTCVersion, l.NVRTCPath, older)
		}
		_, err = load(isolatedEnv(newer), isolatedLibs())
		if !errors.Is(err, ErrNoCUDA) || !strings.Contains(err.Error(), "NVRTC 13.4 is newer than the driver (CUDA 12)") {
			t.Errorf("load with only NVRTC 13 = %v", err)
		}
	})
}

// TestABIRawCalls checks purego's calling convention itself at the widths
// the binding relies on: 19 and 32 integer arguments (the stack slots
// beyond the six registers, a 32-bit int last) and a 128-byte struct by
// pointer (ncclUniqueId's shape).
func TestABIRawCalls(t *testing.T) {
	dir := buildStubs(t, stubOptions{})
	lt := openStub(t, filepath.Join(dir, "libcublasLt.so.12"))
	args := make([]uintptr, 32)
	want := make([]uint64, 32)
	for i := range args {
		args[i] = uintptr(0x1000000000*uint64(i+1) + uint64(i))
		want[i] = uint64(args[i])
	}
	args[18] = uintptr(0xFFFFFFFF_FFFFFFF9) // int -7 in the 19th slot
	r, _, _ := purego.SyscallN(lt.fn("stub_echo19"), args[:19]...)
	name, got := lt.last()
	want19 := append([]uint64(nil), want[:19]...)
	want19[18] = math.MaxUint64 - 6
	if name != "stub_echo19" || !slices64Equal(got, want19) || uint64(r) != want19[0]^want19[18] {
		t.Errorf("19 arguments: %s %x -> %x, want %x", name, got, r, want19)
	}
	r, _, _ = purego.SyscallN(lt.fn("stub_echo32"), args...)
	want[18] = uint64(args[18])
	if _, got := lt.last(); !slices64Equal(got, want) || uint64(r) != want[31] {
		t.Errorf("32 arguments: %x -> %x, want %x", got, r, want)
	}

	var id [128]byte
	for i := range id {
		id[i] = byte(i*7 + 3)
	}
	var comm uintptr
	r, _, _ = purego.SyscallN(lt.fn("stub_struct128"), uintptr(unsafe.Pointer(&comm)), 4, uintptr(unsafe.Pointer(&id)), 3)
	if _, got := lt.last(); int32(r) != 0 || got[1] != 4 || got[3] != 3 || comm != stubMark {
		t.Errorf("struct128: r=%d args %x comm %#x", r, got, comm)
	}
	if got := lt.snap(); !bytes.Equal(got, id[:]) {
		t.Errorf("struct128 bytes = %x, want %x", got, id)
	}
}

func slices64Equal(a, b []uint64) bool { return cmp.Equal(a, b) }

// TestABIMissingNVRTC: a driver but no NVRTC anywhere is a NoCUDAError
// for NVRTC that lists the driver's folder (searched for it too) and says
// how to install it.
func TestABIMissingNVRTC(t *testing.T) {
	stubs := buildStubs(t, stubOptions{})
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(stubs, "libcuda.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "libcuda.so.1"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = load(isolatedEnv(dir), isolatedLibs())
	var nc *NoCUDAError
	if !errors.As(err, &nc) || nc.Lib != LibNVRTC {
		t.Fatalf("load = %v, want a NoCUDAError for NVRTC", err)
	}
	if !strings.Contains(err.Error(), filepath.Join(dir, "libnvrtc.so.*")+" (--cuda-lib-dir): not found") ||
		!strings.Contains(err.Error(), "pip install nvidia-cuda-nvrtc-cu12") {
		t.Errorf("error:\n%v", err)
	}
}
