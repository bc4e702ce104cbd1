// Package nccl is the GPU comm backend: one process per GPU, and the
// collectives of comm.Comm run by NVIDIA's NCCL on the communicator's own
// CUDA stream.
//
//	j, err := nccl.Join(ctx, env, nccl.Options{Lib: l.Lib, Device: nccl.NewCUDADevice(gpu)})
//	defer j.Close(ctx)
//	err = j.Comm().AllReduce(ctx, comm.F32(grads), comm.Avg).Wait()
//
//	torchrun --nproc_per_node=8 dszero train …   # LOCAL_RANK picks the GPU
//
// # Layers
//
//   - The binding (Lib). Load finds libnccl.so.2 at run time, like the
//     CUDA libraries (--cuda-lib-dir, LD_LIBRARY_PATH, the loader cache,
//     system folders, and the nvidia/nccl/lib folder of a Python
//     environment's nvidia-nccl wheel, which torch installs), and calls it
//     through purego: no cgo, no NCCL at build time. NCCL 2.18 or newer is
//     required (ncclCommSplit). The 128-byte ncclUniqueId goes by pointer
//     through ncclCommInitRankScalable where the library has it (2.23),
//     and otherwise by value through ncclCommInitRankConfig, laid out by
//     hand for the amd64 and arm64 calling conventions (binding.go says
//     how); stub libraries built with cc at test time check every
//     argument of every wrapper, that call included. Package fakenccl
//     implements Lib in Go over package inproc.
//   - The device (Device, Stream, Marker, Staged): where NCCL calls are
//     made (the GPU's worker thread, cuda.Device.Do), the streams the
//     collectives run on, the events that say when they completed, and
//     the staging of host memory. CUDADevice implements it over package
//     cuda; package fakenccl over host memory.
//   - The backend (World, Comm): the issue queue, timeouts, failure
//     reports, sub-communicators and the comm.Comm adapter.
//
// # How a collective runs
//
// Each Comm has a worker goroutine that takes its calls in issue order,
// stages host buffers, makes the NCCL calls inside Device.Run (several as
// one ncclGroupStart … ncclGroupEnd for Group), and records a marker on
// the stream; and a completer goroutine that waits for each marker, in
// order, then hands the results back and counts the traffic
// (comm.NominalTraffic, as every backend). The caller only queues, so a
// collective overlaps with the caller's work until Wait; on the GPU,
// Group takes a marker of the producer's stream to wait for (the
// gradients' event, EventMarker) and Grouped.Issued gives a marker at the
// group's end for a consumer stream (EventOf), so collectives overlap
// with compute through events without the host waiting.
//
// Communicators are non-blocking (ncclConfig_t.blocking = 0): no NCCL call
// waits for a peer, so a rank can always give up. After each call the
// worker polls ncclCommGetAsyncError until NCCL leaves ncclInProgress, as
// NCCL requires of non-blocking communicators.
//
// # Host buffers and device views
//
// comm.Buffer wraps Go slices today, so the comm.Comm methods (host.go)
// stage each buffer through a pinned block into device memory on the
// communicator's stream and copy the results back after the collective:
// correct, and as slow as two PCIe copies per collective. The reductions
// keep comm's definition where NCCL allows: Avg is ncclSum followed by a
// float32 division on the host (DeepSpeed's post-division; ncclAvg
// pre-multiplies instead), PreAvg is ncclRedOpCreatePreMulSum by 1/n when
// n is a power of two (then exactly x/n) and a host division before
// ncclSum otherwise. Sums follow NCCL's order: equal to package inproc's
// bits for two ranks (a + b = b + a), and for more ranks equal up to the
// order of additions, as on any NCCL job. Empty collectives are not
// given to NCCL (it discards them).
//
// When device views land (the engine's buffer/view interface), the
// collectives that carry device memory skip the staging: they go
// straight to Group's path, which takes device pointers, a dtype, a count
// and an after-marker, so nothing is copied and the GPU never waits for
// the host. Avg and PreAvg there are NCCL's own (ncclAvg, PreMulSum by
// 1/n), which equal comm's bits for power-of-two n; exact division for
// other n needs a division kernel on the stream (package cuda's kernels),
// the one change left for that step.
//
// # Sub-communicators
//
// Split (and comm.NewGroup, comm.Mesh for HYBRID_SHARD, MiCS and hpZ
// groups) first all-gathers every rank's color and key on the parent, so
// that each member knows the new communicator's world ranks (errors name
// them: "group[3 1 2]"), then calls ncclCommSplit and waits until the new
// communicator is ready. It drains the parent's collectives first.
//
// # Failure
//
// Every collective completes or fails within Options.Timeout (30 minutes
// by default, comm.DefaultTimeout), counted from when it starts (after the
// one before it on the communicator). While it waits, the completer
// polls the stream's marker, the communicator's asynchronous error and
// the context. When one says failure:
//
//  1. Timeout: the rank reads the job's progress records (monitor.go)
//     and names the ranks that did not arrive and what each was doing
//     (busy elsewhere, stopped or hung, exited, never started), or says
//     every rank arrived when NCCL itself stalled (comm.TimedOut). An
//     NCCL error fails the rank's own collective with NCCL's message;
//     ncclRemoteError (a peer's failure) first waits two heartbeats for
//     that peer's own notice. A cancelled context fails the rank.
//  2. The communicator is aborted (ncclCommAbort), which stops its
//     kernels, and after them every communicator of the rank: the job
//     cannot go on. Queued and later collectives fail at once with the
//     same cause (comm.WaitAll reports it once).
//  3. The rank writes a notice under the job's abort key in the store;
//     every rank reads that key each heartbeat and fails its own
//     collectives with that cause, naming the same ranks, so that every
//     live rank returns an error naming the collective, its sequence
//     number and the ranks at fault — never a silent hang. The step is
//     train's to add.
//
// Without a store (a job not started by a launcher) a rank learns of a
// failure only from its own timeout, and a timeout cannot name the
// missing ranks; the message says so.
package nccl
