// Package device is where tensors live and where work runs: the CPU today,
// a CUDA GPU later, behind one small interface.
//
// Vocabulary:
//
//   - DType: the element type of a buffer — F32 (float32), F16 (IEEE fp16)
//     or BF16 (bfloat16). Size is its width in bytes: 4, 2, 2. String is
//     DeepSpeed's name ("fp32", "fp16", "bf16"), ParseDType reads it back
//     (an error for any other), and JSON holds the name. It is also the
//     dtype a run trains in (dsconfig.Precision.DType).
//   - Buffer: one allocation of n elements of a DType, made by a Device and
//     accounted in that device's mem.Accountant under a mem.Category (what it
//     holds) and a mem.Tier (where it lives). An F32 buffer is seen as a
//     []float32; an F16 or BF16 buffer as the []uint16 bit patterns of
//     package half. CopyFromF32 and CopyToF32 convert, rounding to nearest
//     even on the way down. Views of parts of a buffer are plain re-slices:
//     a flat parameter buffer is cut into named tensors and ZeRO partitions
//     by offset arithmetic, never by more allocations.
//   - Free: returns a buffer's bytes to the accountant, exactly once. Freeing
//     twice, freeing on another device, or using a buffer after Free are
//     programmer errors and panic.
//   - Stream: an ordered queue of asynchronous work (a CUDA stream on a GPU).
//     Enqueue adds a function and returns at once; functions run one after
//     another in the order they were enqueued. Record returns an Event that
//     fires when everything enqueued before it has run. WaitEvent makes a
//     stream wait for another stream's event before running what follows;
//     this is how communication and compute overlap yet stay ordered (the
//     all-gather stream records, the compute stream waits). Wait blocks the
//     caller until the stream is idle. Close waits and retires the stream.
//   - Event: Wait blocks until it fires; Done reports whether it has.
//   - Kernels are not part of Device. Code that needs a matrix product
//     defines the one-method interface it calls (a Gemmer) where it uses it;
//     CPU.BLAS() returns the engine package blas chose, which satisfies it.
//
// Memory budgets: a --device-memory flag such as "4GiB" is read by
// ParseBytes and becomes the accountant's capacity for mem.Device, so an
// allocation beyond it fails with *mem.OOMError the way a GPU allocation
// fails.
//
// The CPU device allocates ordinary Go memory for every tier it serves
// (mem.Device and mem.PinnedHost). NVMe is not memory: swap files are
// accounted by the store that writes them, and Alloc refuses mem.NVMe.
package device
