// Package fakecu is a CUDA driver, NVRTC and cuBLASLt made of Go, for
// tests: it implements the interfaces of package cuda/driver, so all of
// package cuda — device setup, the memory pool, pinned host buffers,
// streams and events, kernel compilation and its disk cache, launches,
// GEMMs — runs in `go test -race` on a machine without a GPU.
//
// What it models, and checks:
//
//   - Device memory is Go memory behind fake, never-reused addresses:
//     touching memory outside a live allocation in a kernel or copy is a
//     CUDA_ERROR_ILLEGAL_ADDRESS, and it is sticky — every later call
//     fails, as on a GPU. Copies validate their ranges when called
//     (CUDA_ERROR_INVALID_VALUE).
//   - The default memory pool of each device, with a capacity (Options.Memory),
//     CUDA_ERROR_OUT_OF_MEMORY beyond it, used and reserved bytes and the
//     release threshold (reserved shrinks to it at synchronisations).
//     Driver.FailNext injects failures into any call.
//   - Pinned host memory (cuMemHostAlloc) with an optional limit. A copy
//     from or to pinned memory runs when the stream reaches it; from or to
//     pageable memory it is staged or synchronous, as the driver does.
//   - Streams are goroutines running their work in order; events complete
//     when their stream reaches the record; cuStreamWaitEvent waits for the
//     latest record at the time of the call. A data race between streams
//     not ordered by events is a data race the race detector sees.
//   - Contexts are per OS thread (on Linux): a call from a thread without
//     the primary context current fails with CUDA_ERROR_INVALID_CONTEXT,
//     which catches callers that do not keep a locked thread.
//   - "Modules" come from the fake NVRTC (NewNVRTC), which records the
//     extern "C" kernels of the source for one architecture; loading one
//     for another architecture fails with CUDA_ERROR_NO_BINARY_FOR_GPU.
//     A launch copies its parameters at once and runs the kernel's Go
//     reference (package cuda/kernels) on the stream.
//   - The fake cuBLASLt (NewBlasLt) runs column-major matmuls with float64
//     accumulation and accepts only CUBLAS_COMPUTE_32F.
package fakecu
