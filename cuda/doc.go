// Package cuda runs dszero's work on an NVIDIA GPU: a Device with its
// memory pool, pinned host buffers, streams and events, dszero's own
// kernels compiled at first use, and GEMMs through cuBLASLt. It is the
// layer the engine's device and Ops interfaces are implemented on.
//
// # Opening a device
//
// Open loads libcuda, NVRTC and cuBLASLt at run time (package
// cuda/driver: no cgo, no toolkit at build time) and opens a GPU. On a
// machine that cannot run CUDA it returns one error wrapping ErrNoCUDA that
// says why and lists every path searched; `--device cuda` reports it and
// stops. OpenWith opens a device on given libraries, which is how the tests
// run all of this package on the fake driver of package cuda/fakecu.
//
// # Threads, contexts and the worker
//
// A device is used through its primary context (the one the CUDA runtime,
// cuBLAS and NCCL share). CUDA keeps the current context per OS thread, so
// each Device has one worker goroutine, locked to its thread, with the
// context made current once; every operation is a function run there by
// Do. This gives one place that issues work in order for the device, and
// lets the issue state (the pinned launch-argument arena, the GEMM plan
// cache, the pinned-memory cache) be plain fields without locks. A hand-off
// costs about a microsecond; Do runs any number of operations in one, so
// a layer's dozen launches cost one. Blocking waits (Stream.Synchronize,
// Event.Synchronize) run instead on the waiting goroutine's own locked
// thread after cuCtxSetCurrent, so a long wait never stops other
// goroutines from issuing work.
//
// # Memory
//
// Device memory comes from the device's stream-ordered pool
// (cuMemAllocFromPoolAsync, cuMemFreeAsync): an allocation and its free
// are ordered in a stream like kernels, and with the release threshold at
// its default (keep everything) freed memory stays cached in the pool, as
// in PyTorch's caching allocator, so a training step allocates without
// going to the OS. MemStats reports used against reserved bytes. An
// allocation that does not fit is an *OOMError. Mem is a device range, an
// allocation or a view of part of one.
//
// Pinned host memory (HostBuffer) is page-locked memory outside the Go
// heap that copies run against asynchronously. Pinning is slow, so freed
// buffers are cached by size class and reused once the GPU is done with
// them (FreeHost records an event on the stream that used them).
//
// # Streams and events
//
// Streams are non-blocking (they never synchronise with the legacy
// default stream); events are created without timing. Record and
// WaitEvent order streams; Synchronize and Done wait for and poll them.
//
// # Kernels
//
// LoadKernels compiles package cuda/kernels' sources with NVRTC into a
// CUBIN for this GPU's architecture (never PTX, which a driver older than
// NVRTC cannot load), caches it on disk under a hash of architecture,
// options, NVRTC version and source, and loads it. Launch checks every
// argument against the kernel's parameters in the launcher table; the
// typed launchers (Fill, LayerNormFwd, Adam, …) pick the dtype variant and
// the launch shape.
//
// # GEMMs
//
// Issuer.Gemm is a row-major, optionally strided-batched product through
// cuBLASLt, always with CUBLAS_COMPUTE_32F (fp32 accumulation, no TF32).
// The algorithm is chosen once per shape (and per alignment of the three
// addresses, so a view at any offset gets an algorithm that accepts it) and
// reused, so a step's results do not change from one step to the next.
//
// # Errors
//
// Failed calls return *Error (the library, function, code and message). A
// sticky error — a kernel that faulted — makes the device unusable: that
// call and every later one return a *DeviceFailedError.
package cuda
