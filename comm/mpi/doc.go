// Package mpi is the MPI comm backend: the ranks are processes started by
// Open MPI's mpirun, on one machine or several, and a collective moves data
// through MPI.
//
//	w, err := mpi.Init(mpi.Options{Timeout: 30 * time.Minute})
//	if err != nil { … }
//	defer w.Finalize()
//	c := w.Comm() // the world: rank and size from mpirun
//	err = c.AllReduce(ctx, comm.F32(grads), comm.Avg).Wait()
//
//	mpirun -np 4 dszero train …
//
// Build. The binding is cgo against Open MPI, behind the build tag mpi:
//
//	apt-get install openmpi-bin libopenmpi-dev   # Debian
//	go build -tags mpi ./...
//	go test -tags mpi ./comm/mpi                 # runs itself under mpirun -np 2 and -np 3
//
// Without the tag the package still compiles, and Init returns ErrNoMPI,
// which says how to rebuild, so `go build ./...` and `go test ./...` work on
// machines without MPI. Open MPI's handles (MPI_COMM_WORLD, MPI_FLOAT,
// MPI_IN_PLACE) are macros that cgo cannot evaluate; binding.go wraps every
// MPI call it needs in a small C function.
//
// Semantics are those of comm.Comm, bit for bit the in-process backend's:
// the same results, errors (*comm.Error naming the collective and its
// sequence number) and traffic counts (comm.NominalTraffic). What differs
// is failure, below.
//
// Reduction order. MPI_Allreduce and MPI_Reduce_scatter add in an order the
// implementation chooses (it changes with the algorithm, the message size
// and the number of ranks), and round 16-bit data after every addition.
// This backend uses MPI only to move bytes and does the arithmetic itself
// with comm.Reduce, so every element is summed in float32 in rank order 0,
// 1, …, n−1 and rounded once, exactly as package inproc does:
//
//   - all_reduce: MPI_Alltoallv sends chunk r of each rank's buffer to rank
//     r; rank r reduces its chunk in rank order; MPI_Allgather(v) in place
//     returns every reduced chunk to every rank. Each rank sends and
//     receives 2·(n−1)/n of the buffer, as a ring all-reduce does.
//   - reduce_scatter: MPI_Alltoallv of the chunks, then comm.Reduce into out.
//   - all_gather: MPI_Allgather (MPI_IN_PLACE when in is chunk Rank() of out).
//   - broadcast: MPI_Bcast. barrier: MPI_Barrier. Split: MPI_Comm_split
//     (ties of key ordered by rank, as comm.Comm wants; NoColor is
//     MPI_UNDEFINED).
//
// fp16 and bf16 travel as MPI_UINT16_T; no MPI reduction op is ever used.
// MPI counts are C ints, so one MPI call moves at most 2^28 elements (1 GiB
// of fp32, well inside both the 2^31−1 count and the 2 GiB message size
// that some transports mishandle); larger collectives are cut into
// segments, which changes no bit of an element-wise result. Scratch memory:
// an all-reduce or a reduce-scatter receives (n−1)/n of its buffer (of a
// segment) into scratch, kept per communicator and reused from call to
// call; collectives are cut into segments whose scratch stays within 2^20
// elements (4 MiB of fp32), so that one large collective does not leave
// its size resident for the rest of the run.
//
// Threads. Each communicator has a worker goroutine that runs its
// collectives one after another in issue order, each a blocking MPI call;
// the caller only queues them, so a collective overlaps with the caller's
// work until Wait, and communicators progress independently (a shard group
// and a replica group may be issued in different orders on different
// ranks, as with inproc). MPI calls therefore come from several threads at
// once, and Init requires MPI_THREAD_MULTIPLE (Debian's Open MPI provides
// it) and fails, naming the level provided, otherwise. MPI_Init_thread and
// MPI_Finalize run on one goroutine locked to its OS thread, MPI's "main
// thread". Go installs its signal handlers before MPI_Init and Open MPI
// leaves installed handlers alone, so Go's nil-pointer panics keep working.
// Note that mpirun binds each rank to a core by default, so Go sees
// GOMAXPROCS=1; pass --bind-to none (or --map-by slot:PE=k) for ranks with
// several threads.
//
// The one global. MPI can be initialised once per process, so Init guards
// MPI_Init_thread with a sync.Once and fails when called again. Everything
// else — the world communicator, the options, the split communicators — is
// in the *World that Init returns. Finalize runs the queued collectives to
// completion and calls MPI_Finalize, which every process must reach.
//
// Failure. MPI has no timeouts and cannot cancel a collective that has
// started: a rank blocked in MPI_Alltoallv stays blocked until its peers
// arrive. So every collective runs under a watchdog: a timer (Options.
// Timeout, comm.DefaultTimeout's 30 minutes unless set, or the context's
// deadline when earlier) and the context's cancellation. When one fires
// while the collective is still inside MPI:
//
//  1. A timed-out rank asks the other members, on a control channel of
//     its own (control.go), how far they got, and waits up to a second for
//     the answers. Wait then returns a *comm.Error naming the collective,
//     its sequence number and the ranks that did not arrive, with what
//     each was doing: stopped or hung (no answer: SIGSTOP, a debugger),
//     busy outside collectives, or waiting in another communicator's
//     collective — followed there to the ranks it waits for, the root of
//     the stall. It wraps comm.ErrTimeout (timer, deadline) or
//     comm.ErrRankFailed (cancellation).
//  2. The communicator is broken: the collectives queued behind fail with
//     the same cause, and later ones fail at once.
//  3. The rank tells every other rank (an abort notice on the control
//     channel): each fails its own collectives in flight with that cause,
//     so every live rank reports the failure, naming the ranks at fault,
//     instead of waiting in a collective until the job is killed.
//  4. The message is written to Options.Log, and after Options.AbortGrace
//     the rank calls MPI_Abort(MPI_COMM_WORLD, AbortCode): mpirun kills
//     every process of the job, a stopped one too, and exits with
//     status 124. The peers may be blocked in the same collective
//     forever; ending the job is the only way that never hangs.
//     World.AwaitAbort lets a failing rank wait for it, so that its peers
//     have the time to report.
//     During the grace period a collective stuck in MPI may still write its
//     buffers (a collective that is not stuck stops at its next step, see
//     gone): use the grace to log, not to compute.
//
// An MPI call that returns an error (communicators use MPI_ERRORS_RETURN)
// fails the collective with comm.ErrRankFailed and the MPI error, and also
// aborts the job, since the peers' state is unknown. A process that dies or
// exits non-zero makes mpirun end the job without waiting for any timeout.
//
// Mismatched collectives (different kinds, dtypes, lengths, ops or roots
// under one sequence number) are undefined behaviour in MPI. With
// Options.Verify every collective is preceded by an MPI_Allgather of its
// signature; a mismatch then fails that collective on every rank with
// comm.ErrMismatch naming rank 0 and the first rank that differs, breaks the
// communicator, and — since every rank knows — aborts nothing.
//
// Tests. The conformance suite of package commtest, a bit-for-bit
// comparison with package inproc on the same inputs, sub-communicators,
// segmenting (at 100 elements per MPI call), and the failure scenarios
// (timeout, a stopped rank, cancellation, a dying rank) run on real mpirun
// jobs that the test launches itself (mpi_test.go explains how).
package mpi
