package driver

import (
	"errors"
	"fmt"
	"strings"
)

// Library names carried by Error.Lib and NoCUDAError.Lib.
const (
	LibCUDA     = "cuda"     // libcuda.so.1, the driver API
	LibNVRTC    = "nvrtc"    // libnvrtc.so, the run-time compiler
	LibCublasLt = "cublasLt" // libcublasLt.so
)

// Result is a status code: CUresult, nvrtcResult or cublasStatus_t
// (which one is Error.Lib's business).
type Result int32

// CUresult codes the binding and the fake driver name.
const (
	Success                 Result = 0
	ErrInvalidValue         Result = 1
	ErrOutOfMemory          Result = 2
	ErrNotInitialized       Result = 3
	ErrDeinitialized        Result = 4
	ErrNoDevice             Result = 100
	ErrInvalidDevice        Result = 101
	ErrInvalidImage         Result = 200
	ErrInvalidContext       Result = 201
	ErrNoBinaryForGPU       Result = 209
	ErrECCUncorrectable     Result = 214
	ErrUnsupportedPTX       Result = 222
	ErrInvalidSource        Result = 300
	ErrInvalidHandle        Result = 400
	ErrNotFound             Result = 500
	ErrNotReady             Result = 600
	ErrIllegalAddress       Result = 700
	ErrLaunchOutOfResources Result = 701
	ErrLaunchTimeout        Result = 702
	ErrContextIsDestroyed   Result = 709
	ErrAssert               Result = 710
	ErrHardwareStack        Result = 714
	ErrIllegalInstruction   Result = 715
	ErrMisalignedAddress    Result = 716
	ErrInvalidAddressSpace  Result = 717
	ErrInvalidPC            Result = 718
	ErrLaunchFailed         Result = 719
	ErrNotSupported         Result = 801
	ErrUnknown              Result = 999
)

// cuResultNames are the CUresult names of the codes above, for the fake
// driver (the real one asks cuGetErrorName).
var cuResultNames = map[Result][2]string{
	Success:                 {"CUDA_SUCCESS", "no error"},
	ErrInvalidValue:         {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	ErrOutOfMemory:          {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	ErrNotInitialized:       {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	ErrDeinitialized:        {"CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	ErrNoDevice:             {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	ErrInvalidDevice:        {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	ErrInvalidImage:         {"CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	ErrInvalidContext:       {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	ErrNoBinaryForGPU:       {"CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
	ErrECCUncorrectable:     {"CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
	ErrUnsupportedPTX:       {"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
	ErrInvalidSource:        {"CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
	ErrInvalidHandle:        {"CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	ErrNotFound:             {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	ErrNotReady:             {"CUDA_ERROR_NOT_READY", "device not ready"},
	ErrIllegalAddress:       {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	ErrLaunchOutOfResources: {"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
	ErrLaunchTimeout:        {"CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
	ErrContextIsDestroyed:   {"CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
	ErrAssert:               {"CUDA_ERROR_ASSERT", "device-side assert triggered"},
	ErrHardwareStack:        {"CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"},
	ErrIllegalInstruction:   {"CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
	ErrMisalignedAddress:    {"CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
	ErrInvalidAddressSpace:  {"CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space"},
	ErrInvalidPC:            {"CUDA_ERROR_INVALID_PC", "invalid program counter"},
	ErrLaunchFailed:         {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	ErrNotSupported:         {"CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	ErrUnknown:              {"CUDA_ERROR_UNKNOWN", "unknown error"},
}

// CUResultName returns the CUresult name and description of a code the
// table above knows, and a generic pair for others.
func CUResultName(r Result) (name, msg string) {
	if p, ok := cuResultNames[r]; ok {
		return p[0], p[1]
	}
	return fmt.Sprintf("CUresult(%d)", int32(r)), "unrecognized error code"
}

// Error is a failed call into one of the CUDA libraries.
type Error struct {
	Lib  string // LibCUDA, LibNVRTC or LibCublasLt
	Func string // the C function, e.g. "cuMemAllocFromPoolAsync"
	Code Result // its status code
	Name string // the code's name, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Msg  string // the library's description of the code
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s failed: %s (%s = %d)", e.Lib, e.Func, e.Msg, e.Name, int32(e.Code))
}

// OutOfMemory reports whether the call failed for lack of device (or
// pinned host) memory: CUDA_ERROR_OUT_OF_MEMORY, or cuBLAS's
// CUBLAS_STATUS_ALLOC_FAILED. Callers map it to *mem.OOMError.
func (e *Error) OutOfMemory() bool {
	switch e.Lib {
	case LibCUDA:
		return e.Code == ErrOutOfMemory
	case LibCublasLt:
		return e.Code == 3 // CUBLAS_STATUS_ALLOC_FAILED
	case LibNVRTC:
		return e.Code == 1 // NVRTC_ERROR_OUT_OF_MEMORY
	}
	return false
}

// Sticky reports whether the error has corrupted the CUDA context: after
// a faulting kernel (an illegal address, a device assert, a launch
// failure) every later call in the process fails the same way, and only
// a new process recovers. The device that saw it is marked failed.
func (e *Error) Sticky() bool {
	if e.Lib != LibCUDA {
		return false
	}
	switch e.Code {
	case ErrIllegalAddress, ErrLaunchTimeout, ErrAssert, ErrHardwareStack, ErrIllegalInstruction,
		ErrMisalignedAddress, ErrInvalidAddressSpace, ErrInvalidPC, ErrLaunchFailed,
		ErrECCUncorrectable, ErrContextIsDestroyed:
		return true
	}
	return false
}

// IsOutOfMemory reports whether err wraps an *Error that is OutOfMemory.
func IsOutOfMemory(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.OutOfMemory()
}

// IsSticky reports whether err wraps an *Error that is Sticky.
func IsSticky(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Sticky()
}

// ErrNoCUDA is wrapped by every error that means "this machine cannot run
// CUDA": a library that is not installed or too old, a driver without a
// GPU. errors.Is(err, ErrNoCUDA) tells it from a failure of CUDA itself.
var ErrNoCUDA = errors.New("no usable CUDA installation")

// Attempt is one candidate the loader tried.
type Attempt struct {
	Path   string // the file, or a bare soname given to the dynamic loader
	Source string // why it was tried: "--cuda-lib-dir", "LD_LIBRARY_PATH", ...
	Err    string // what went wrong: "not found", the dlopen error, "too old"
}

// NoCUDAError says that a library could not be loaded, listing every
// path tried, in order, and what was wrong with each.
type NoCUDAError struct {
	Lib   string // LibCUDA, LibNVRTC or LibCublasLt
	File  string // what was looked for, e.g. "libcuda.so.1"
	Tried []Attempt
	Hint  string // what to do about it
}

func (e *NoCUDAError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cannot load %s (%s): tried %d places:", e.File, e.Lib, len(e.Tried))
	for _, a := range e.Tried {
		fmt.Fprintf(&b, "\n  %s (%s): %s", a.Path, a.Source, a.Err)
	}
	if e.Hint != "" {
		fmt.Fprintf(&b, "\n%s", e.Hint)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrNoCUDA) true.
func (e *NoCUDAError) Unwrap() error { return ErrNoCUDA }
