// Package nvme swaps tensors between host memory and files on a local
// disk: the storage under ZeRO-Infinity's NVMe offload. Stage 3 keeps
// optimizer-state sub-groups and parameter partitions in swap files and
// reads each back shortly before it is needed.
//
// # How DeepSpeed swaps
//
// DeepSpeed (deepspeed/runtime/swap_tensor/) has three pieces:
//
//   - An aio handle (csrc/aio, built on libaio) that reads or writes a
//     whole tensor to a file asynchronously: async_pread / async_pwrite
//     return at once and wait() blocks until every request issued so far
//     has completed. Files are opened with O_DIRECT, so the tensor must sit
//     in page-locked, 4096-byte-aligned memory and its length is padded to
//     the alignment. The handle runs intra_op_parallelism threads; each
//     takes a contiguous 1/intra_op_parallelism of every request and keeps
//     up to queue_depth I/Os of block_size bytes in flight in its libaio
//     context. single_submit and overlap_events choose how a thread submits
//     and reaps those I/Os.
//   - Swap buffers: a pool of buffer_count pinned buffers
//     (SwapBufferManager; AsyncPartitionedParameterSwapper.buffers), sized
//     to the largest optimizer sub-group or to offload_param.buffer_size
//     elements. A tensor being used lives in a view of a buffer; nothing is
//     copied between the disk and its use.
//   - Swappers that decide what moves when. PartitionedOptimizerSwapper
//     keeps, per sub-group, the fp32 master partition and its Adam state in
//     one file per tensor under <nvme_path>/zero_stage_3/optimizer/rank<R>/:
//     before a sub-group's step it swaps them in, after it swaps them out.
//     PipelinedOptimizerSwapper (offload_optimizer.pipeline_read and
//     pipeline_write) reads sub-group i+1 while i steps and writes i while
//     i+1 steps: double buffering. AsyncPartitionedParameterSwapper keeps
//     each fp16 parameter partition in
//     <nvme_path>/zero_stage_3/fp16params/rank<R>/<id>_param.tensor.swp and
//     reads partitions ahead of their use along the recorded trace
//     (INFLIGHT → AVAILABLE). It removes the folder at start; files are not
//     kept across runs.
//
// (Read at DeepSpeed commit 38327e0, February 2025.) DeepSpeed swaps only
// tensors of at least max(1 MiB, block_size) bytes (swappable_tensor) and
// keeps smaller ones in memory: a choice for the stage, not this package.
//
// # How this package maps to it
//
//   - Options carry the aio block and the offload knobs; OptimizerOptions
//     and ParamOptions fill them from a dsconfig.Plan. pin_memory is not a
//     swapper knob: DeepSpeed pins swap buffers whatever it says, and here
//     they are accounted in the pinned-host tier.
//   - FS is the filesystem: OSFS (O_DIRECT on Linux, buffered with the
//     reason recorded where the filesystem refuses it, as tmpfs does),
//     MemFS and FaultFS (short writes, EIO, ENOSPC, slow I/O) for tests.
//   - Swapper is one rank's swapper: the folder
//     <nvme_path>/dszero_rank<R>/<name>/ with one file <key>.swp per key (a
//     sub-group's tensor, a parameter partition), the buffer pool, and the
//     engine. The engine runs intra_op_parallelism × queue_depth workers
//     that take block_size pieces of the queued requests in order, oldest
//     first: the same number of I/Os in flight as DeepSpeed's threads and
//     libaio slots. Each worker blocked in pread/pwrite holds an OS
//     thread; goroutines have no submit or reap step, so single_submit and
//     overlap_events change nothing. The queue is first in, first out: a
//     read issued after a large write waits behind it, so issue prefetches
//     before the writes they should overtake.
//   - Requests are asynchronous and return a *Handle whose Wait returns
//     the error. Requests on one key run in issue order, so a read issued
//     after a write reads what was written without waiting in between.
//
// # Buffers and double buffering
//
// A Buffer is owned by exactly one party at a time (the state machine in
// buffer.go): the pool (free), a caller (held), or an I/O (in flight).
//
//	Acquire  free → held        Release  held → free
//	Write    held → in flight → free   (the write takes the buffer)
//	Read     held → in flight → held   (the caller gets it back)
//
// The zero-copy path a stage uses is Acquire, fill Buffer.F32 (or U16 for
// 16-bit values), Write; and Prefetch (Acquire + Read), Wait, use, Release.
// An optimizer step over sub-groups is then
//
//	next, _ := s.Prefetch(key(0))
//	for i := range groups {
//		cur := next
//		if i+1 < len(groups) {
//			next, _ = s.Prefetch(key(i + 1)) // read i+1 while i steps
//		}
//		cur.Wait()
//		step(cur.Buffer().F32())
//		s.Write(key(i), cur.Buffer()) // written while i+1 steps
//	}
//
// A caller that reads ahead further (stage 3's parameter read-ahead along
// its trace) holds at most BufferCount − 1 buffers, so that SwapIn and
// SwapOut always find one, and can tell with Handle.Done whether a read
// landed before it was needed.
//
// SwapOut and SwapIn are the same with a copy through a pool buffer, for
// slices that are not swap buffers. Acquire waits while buffers are in
// flight; when every buffer is held by callers it fails with ErrNoBuffer
// at once instead of waiting forever (DeepSpeed asserts there).
//
// # Files, errors and memory
//
// New refuses to create nvme_path (a missing mount must not fill the
// wrong disk), creates the rank folder, removes every *.swp an earlier
// run left in it (swap files are never trusted across runs; resuming
// rewrites them from the checkpoint), and writes Options.Preflight bytes
// to a scratch file: a missing, unwritable or too small nvme_path fails
// there with a *PreflightError naming the path, the bytes needed and the
// fix. An I/O that fails later returns an *IOError naming the key, the
// file and the offset; a short write (the disk took fewer bytes and said
// nothing) is ErrShortWrite. Every block written carries a CRC-32C, kept
// with the key in memory and checked when the block is read back
// (checksum.go): a file whose bytes changed on disk fails the read with
// ErrChecksum, naming the byte range, instead of handing back garbage to
// train on or save; so does a file cut short (ErrShortRead) or deleted
// under the run. Close waits for everything in flight and removes the
// files and folders.
//
// The buffer pool is accounted with the rank's mem.Accountant in tier
// PinnedHost and the swap files in tier NVMe (their padded sizes), both
// under Options.Category.
package nvme
