// Package fakenccl is NCCL made of Go, for tests: it implements
// nccl.Lib and nccl.Device so that package nccl's backend — its issue
// queue, streams and markers, sub-communicators, grouped calls, PreMulSum
// reductions, timeouts, aborts and error reports — runs in `go test -race`
// with many ranks in one process, where one GPU could not run even two
// real NCCL ranks.
//
// A Net is the fake network: every rank of a test takes its Lib and its
// Device from the same Net (Rank). What it models:
//
//   - Communicators. CommInitRank with one id joins one fake world; the
//     world is an in-process comm (package inproc) of nranks ranks, and
//     each NCCL communicator is one rank's inproc communicator.
//     Initialisation is non-blocking: CommGetAsyncError says InProgress
//     until every rank has called CommInitRank. CommSplit is inproc's
//     Split, also InProgress (the parent too) until it completes.
//   - Memory and streams. The device addresses host memory directly: a
//     device pointer is a host address (Stage uses the host buffer
//     itself). Streams are goroutines that run their work in order;
//     markers complete when their stream reaches them.
//   - Collectives are queued on their stream and run there through
//     inproc, so the data moves in inproc's fixed rank order. Sum is
//     inproc's sum. A PreMulSum op multiplies each input by its scalar
//     (in float32, rounded to the dtype, as NCCL does) into a copy and
//     sums that; Avg is PreMulSum by 1/n, as NCCL averages floats.
//   - Groups: calls between GroupStart and GroupEnd (per Lib, that is per
//     rank, where NCCL keeps them per thread) are queued at GroupEnd, in
//     order.
//   - Failure. A collective that fails in inproc (a peer aborted or
//     left) puts the communicator in ncclRemoteError, with inproc's
//     message as ncclGetLastError. CommAbort ends the rank's inproc
//     rank: every communicator of that rank breaks (real NCCL breaks only
//     the one aborted, but package nccl aborts them all on a failure), its
//     peers' collectives fail, and the aborting rank's queued collectives
//     return at once. Options.Inject makes a collective fail or hang.
//
// The fake checks what NCCL would reject: unknown communicators and
// streams, calls on an aborted or destroyed communicator, an unknown
// reduction, mismatched world sizes for one id.
package fakenccl
