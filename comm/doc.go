// Package comm is how dszero's ranks talk to each other: the collectives
// of data parallelism and ZeRO behind one small interface, the arithmetic
// they must agree on, and the launcher environment that says who is who.
//
// Vocabulary:
//
//   - Rank: one training process's (or goroutine's) place in the job, 0 to
//     n−1. Each rank holds its own copy or shard of the model state.
//   - World: all n ranks. Communicator: an ordered set of ranks that run
//     collectives together — the world, or a sub-group of it. A Comm is one
//     rank's handle on one communicator; Rank and Size are relative to it.
//   - Collective: an operation every rank of a communicator takes part in.
//     AllReduce leaves the reduction of everyone's buffer in everyone's
//     buffer (ZeRO-0/DDP gradients). ReduceScatter reduces and leaves chunk
//     r of the result on rank r (ZeRO-2 gradient partitions). AllGather
//     concatenates everyone's chunk into everyone's buffer (ZeRO-1/2
//     updated parameters, ZeRO-3 gathered parameters). Broadcast copies one
//     rank's buffer to all (initial weights). Barrier waits for all. The
//     semantics are torch.distributed's all_reduce, reduce_scatter_tensor,
//     all_gather_into_tensor, broadcast and barrier.
//   - Chunk: the equal part of a reduce-scatter input or an all-gather
//     output that belongs to one rank: chunk r is elements [r·m, (r+1)·m)
//     for chunk length m. Padding a flat buffer so it cuts into equal
//     chunks is the caller's job (ZeRO's partition arithmetic).
//   - Buffer: a dtype — fp32, fp16 or bf16, as device.DType — and a slice
//     (fp16 and bf16 as []uint16 bit patterns, package half). A Buffer is a
//     view, never a copy; Slice makes views of parts of it.
//   - Op: Sum, Avg or PreAvg. Reduction order: every backend reduces each
//     element in float32, in the fixed order rank 0, 1, …, n−1, rounding a
//     16-bit sum to its dtype after every addition (as gloo's and NCCL's
//     16-bit sums do), and divides once for Avg, or each rank's element
//     before the sum for PreAvg (Reduce is the definition). Results
//     are therefore bit-for-bit reproducible and independent of timing,
//     and equal a serial loop over ranks — which ZeRO parity tests rely on.
//   - Handle: every collective is asynchronous; it returns a Handle at
//     once, and Wait blocks until it completes and returns its error. The
//     buffers travel with the handle: from the call until Wait returns they
//     belong to the communicator, and the caller must not touch them.
//     Collectives of one Comm complete in the order they were issued;
//     waiting on a later handle does not make an earlier one complete any
//     sooner.
//   - Sequence number: the n-th collective issued on a communicator, from
//     1. The n-th collectives of all ranks meet each other, so every rank
//     must issue the same collectives in the same order. Errors name it.
//   - Sub-group: Split (MPI_Comm_split) and NewGroup (torch new_group) make
//     communicators of subsets of ranks. Mesh is the two-level layout of
//     hybrid sharding: shard groups of consecutive ranks, and replica groups
//     across them.
//   - Timeout and failure: every collective completes or fails within the
//     communicator's timeout (DefaultTimeout, 30 minutes as DeepSpeed's
//     and torch's, unless the backend's options say otherwise; dszero
//     train --comm-timeout). A rank that fails, panics, exits, stops or
//     never arrives makes the others' collectives return a *Error that
//     names the collective, its sequence number and the ranks at fault —
//     for a timeout, the ranks that did not arrive, and what they were
//     doing when the backend can tell (TimedOut) — wrapping ErrTimeout,
//     ErrRankFailed, ErrRankExited or ErrMismatch. Every live rank fails;
//     none waits silently for a rank that will not come. A communicator
//     that has failed stays failed; there is no recovery in place (as with
//     NCCL's abort). The step is the caller's to name: package train wraps
//     each error with it.
//   - Compressed all-reduce (Compressor.AllReduce): DeepSpeed's
//     1-bit exchange — signs packed 16 to a word and one float32 scale per
//     rank and per chunk, worker and server error feedback, an all_to_all
//     of the worker signs then an all_gather of the server's — ≈ 1/32 of an
//     fp32 all-reduce's bytes. all_to_all (AllToAller) is a collective the
//     in-process and MPI backends run; on another Comm the exchange falls
//     back to an all_gather.
//   - Traffic: what each rank moved, per communicator and per collective
//     kind, in the nominal bytes of NominalTraffic, so reports do not depend
//     on the backend.
//   - Rendezvous: ParseEnv reads a process's rank and world size from the
//     variables torchrun, DeepSpeed's launcher or Open MPI's mpirun set.
//
// Backends implement Comm: package inproc runs n ranks as goroutines of one
// process that exchange through shared memory (the single-machine default);
// package mpi runs ranks as processes under mpirun (Open MPI, build tag
// mpi), with the same reduction order and bits; package nccl runs them on
// GPUs over NCCL (one process per GPU, its bits NCCL's own order), with
// the NCCL id exchanged through package rendezvous's TCP store at
// MASTER_ADDR:MASTER_PORT. Nothing in the interface assumes that ranks share
// memory. Package commtest is the conformance suite every backend runs.
package comm
