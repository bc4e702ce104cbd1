// Package driver is dszero's binding to the three CUDA libraries it uses,
// loaded at run time: the driver API (libcuda.so.1), the run-time compiler
// NVRTC (libnvrtc.so) and cuBLASLt (libcublasLt.so). It needs no C
// compiler, no CUDA toolkit and no cgo: `go build` with CGO_ENABLED=0
// produces a binary that runs on a GPU machine and fails cleanly anywhere
// else.
//
// # How a call is made
//
// Load finds each library (package cuda/internal/libpath lists the
// places), opens it with purego.Dlopen and fills a table of C function
// pointers. A wrapper such as (*cuDriver).MemFreeAsync converts its Go
// arguments to integers and calls binding.call, which checks the count
// against the symbol table and calls purego.SyscallN. Every function bound
// takes integers and pointers only — alpha and beta go by pointer — so
// the System V integer registers and stack slots carry everything, which
// is exactly what SyscallN does (it is documented not to handle mixed
// float and integer arguments). The C status code is the low 32 bits of
// the return register; a non-zero code becomes an *Error with the
// library's own name and description of it (cuGetErrorName,
// nvrtcGetErrorString, cublasLtGetStatusName).
//
// Why purego rather than cgo: cgo would make the compiler check the
// prototypes and save about 0.2 µs a call, but it needs a C toolchain
// wherever dszero is built and leaves CGO_ENABLED=0 builds without a GPU.
// purego ≥ v0.11 passes up to 32 arguments (cublasLtMatmul takes 16,
// cuLaunchKernel 11); SyscallN costs ~0.1–0.3 µs against a kernel
// launch's 4–6 µs in the driver. The prototypes are instead checked by
// tests: Symbols records each one, a test parses the wrappers and checks
// every call's argument count, and where a C compiler exists another
// builds stub libraries from the prototypes and checks every argument and
// out-parameter of every wrapper.
//
// # Versions
//
// Driver entry points are resolved with cuGetProcAddress_v2(name, &fn,
// ABIVersion, ...): asking by base name for the CUDA 12.0 ABI returns the
// variant the 12.0 headers mean (cuMemGetInfo → cuMemGetInfo_v2), never a
// legacy entry. Drivers older than CUDA 12.0 are refused. NVRTC and
// cuBLASLt whose major version is newer than the driver's are skipped
// (their output needs the newer driver) and the search goes on.
//
// # The interfaces
//
// Driver, NVRTC and BlasLt are the Go-typed surface. Package cuda is
// written against them only, so the fake driver (package fakecu), which
// implements them over Go memory, runs all of package cuda's code in
// `go test`. Driver calls act on the calling thread's current context: the
// caller runs them on one locked OS thread per device.
//
// Errors: *Error for a failed call (OutOfMemory and Sticky classify it);
// *NoCUDAError, wrapping ErrNoCUDA, when a library cannot be loaded — it
// lists every path tried and why each failed.
package driver
