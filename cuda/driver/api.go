package driver

import "unsafe"

// Driver is the part of the CUDA driver API dszero uses, with Go types.
// The purego binding (Load) and the fake driver (package fakecu)
// implement it; package cuda is written against it alone.
//
// Calls that take no context act on the calling OS thread's current
// context (cuCtxSetCurrent): the caller keeps one locked thread per
// device. Every error is an *Error.
type Driver interface {
	Init() error
	DriverVersion() (int, error) // 12080 for CUDA 12.8
	DeviceCount() (int, error)
	DeviceGet(ordinal int) (Device, error)
	DeviceName(d Device) (string, error)
	DeviceAttribute(a DeviceAttr, d Device) (int, error)
	DeviceTotalMem(d Device) (uint64, error)

	PrimaryCtxRetain(d Device) (Context, error)
	PrimaryCtxRelease(d Device) error
	CtxSetCurrent(c Context) error
	CtxSynchronize() error
	MemGetInfo() (free, total uint64, err error)

	DeviceGetDefaultMemPool(d Device) (MemPool, error)
	MemPoolSetAttribute(p MemPool, a PoolAttr, v uint64) error
	MemPoolGetAttribute(p MemPool, a PoolAttr) (uint64, error)
	MemPoolTrimTo(p MemPool, keep uint64) error
	MemAllocFromPoolAsync(n uint64, p MemPool, s Stream) (DevicePtr, error)
	MemFreeAsync(ptr DevicePtr, s Stream) error

	// The host side of a copy is a pointer the caller keeps valid (and,
	// for Go memory, pinned) until the copy has completed on s.
	MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n uint64, s Stream) error
	MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, n uint64, s Stream) error
	MemcpyDtoDAsync(dst, src DevicePtr, n uint64, s Stream) error
	MemsetD8Async(dst DevicePtr, v uint8, n uint64, s Stream) error
	MemsetD32Async(dst DevicePtr, v uint32, n uint64, s Stream) error

	// MemHostAlloc returns page-locked host memory outside the Go heap.
	MemHostAlloc(n uint64, flags uint32) (unsafe.Pointer, error)
	MemFreeHost(p unsafe.Pointer) error

	StreamCreate(flags uint32) (Stream, error)
	StreamDestroy(s Stream) error
	StreamSynchronize(s Stream) error
	StreamQuery(s Stream) (done bool, err error)
	StreamWaitEvent(s Stream, e Event) error

	EventCreate(flags uint32) (Event, error)
	EventDestroy(e Event) error
	EventRecord(e Event, s Stream) error
	EventSynchronize(e Event) error
	EventQuery(e Event) (done bool, err error)

	ModuleLoadData(image []byte) (Module, error)
	ModuleUnload(m Module) error
	ModuleGetFunction(m Module, name string) (Function, error)

	// LaunchKernel runs f on s. params[i] points at the value of the
	// kernel's i-th parameter; the driver copies the values before it
	// returns, so the caller may reuse them at once.
	LaunchKernel(f Function, grid, block Dim3, sharedMem uint32, s Stream, params []unsafe.Pointer) error
}

// NVRTC is the run-time CUDA C++ compiler. Every error is an *Error; a
// failed compilation returns the compiler's log with it.
type NVRTC interface {
	Version() (major, minor int, err error)
	// SupportedArchs lists the sm_XY values (as XY) it can generate code for.
	SupportedArchs() ([]int, error)
	// Compile compiles one translation unit (no headers) with opts and
	// returns the CUBIN; opts must name a real architecture
	// (-arch=sm_XY), for which NVRTC emits SASS, not PTX.
	Compile(src, name string, opts []string) (cubin []byte, log string, err error)
}

// BlasLt is the part of cuBLASLt dszero uses. Attribute values are the
// little-endian bytes of the attribute's C type (Int32Attr, Int64Attr, Uint64Attr).
type BlasLt interface {
	Version() int // cublasLtGetVersion: 120804 for 12.8.4
	Create() (LtHandle, error)
	Destroy(h LtHandle) error
	MatmulDescCreate(compute ComputeType, scale DataType) (LtDesc, error)
	MatmulDescDestroy(d LtDesc) error
	MatmulDescSetAttribute(d LtDesc, a LtDescAttr, v []byte) error
	MatrixLayoutCreate(t DataType, rows, cols uint64, ld int64) (LtLayout, error)
	MatrixLayoutDestroy(l LtLayout) error
	MatrixLayoutSetAttribute(l LtLayout, a LtLayoutAttr, v []byte) error
	MatmulPreferenceCreate() (LtPref, error)
	MatmulPreferenceDestroy(p LtPref) error
	MatmulPreferenceSetAttribute(p LtPref, a LtPrefAttr, v []byte) error
	// MatmulAlgoGetHeuristic returns up to n candidate algorithms, best first.
	MatmulAlgoGetHeuristic(h LtHandle, d LtDesc, a, b, c, dd LtLayout, p LtPref, n int) ([]LtHeuristic, error)
	// Matmul computes D = alpha·op(A)·op(B) + beta·C on s; alpha and beta
	// point at host float32 values (the scale type is always CUDA_R_32F).
	Matmul(h LtHandle, d LtDesc, alpha *float32, a DevicePtr, ad LtLayout, b DevicePtr, bd LtLayout,
		beta *float32, c DevicePtr, cd LtLayout, dst DevicePtr, dd LtLayout,
		algo *LtAlgo, workspace DevicePtr, workspaceSize uint64, s Stream) error
}

// Attribute encoders: the value bytes of an int32, uint32, int64 or
// uint64 attribute.
func Int32Attr(v int32) []byte {
	return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}
}

func Int64Attr(v int64) []byte { return Uint64Attr(uint64(v)) }

func Uint32Attr(v uint32) []byte { return Int32Attr(int32(v)) }

func Uint64Attr(v uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return b
}
