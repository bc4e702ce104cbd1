// Package inproc is the in-process comm backend: the n ranks of a World are
// goroutines of one process, and a collective moves data by reading and
// writing the other ranks' buffers directly.
//
//	w := inproc.New(4, inproc.Options{Timeout: time.Minute})
//	err := w.Run(func(c comm.Comm) error {
//		return c.AllReduce(ctx, comm.F32(grads), comm.Avg).Wait()
//	})
//
// How a collective runs. Each rank's Comm has a worker goroutine that runs
// its collectives one after another in issue order; the caller only queues
// them, so a collective overlaps with the caller's work until Wait. The
// members of a communicator share a group, and in it one round per
// sequence number. A collective is two barriers of that round with the
// data movement between them:
//
//  1. arrive: the rank publishes its buffers and waits for every rank.
//     The first arrival's call is the one every later arrival must match
//     (kind, dtype, lengths, op, root); buffers of different ranks must not
//     overlap.
//  2. move: each rank moves its share of the data, touching memory that no
//     other rank touches in this phase (see move in collectives.go). For
//     all_reduce, rank r reduces elements chunk(r) of all buffers, in rank
//     order, and writes the result into chunk(r) of all buffers: every
//     rank reads and writes the buffer's size once, the traffic of one
//     memcpy, and the n ranks work in parallel.
//  3. done: the rank waits until every rank has finished moving, so that
//     nobody still reads or writes its buffers once Wait returns.
//
// Barrier and Split need only the first barrier. With one rank every
// collective is a copy or nothing.
//
// Failure. A group keeps its first fault; setting it wakes every waiter of
// every round, and every later collective of the group fails at once. A
// fault comes from a rank's fn in World.Run (an error, a panic, or return
// while others still need it), from a timeout (naming the ranks that have
// not reached the barrier), from a cancelled context, from a mismatch, or
// from Options.Inject. A rank whose collective fails waits until no rank
// is inside its move phase, so an error, like success, hands the buffers
// back untouched by others. A rank that stops for good outside any
// collective cannot be ended from outside; once the job has failed, Run
// waits for it a bounded time (Options.Grace after a timeout named it) and
// returns without it, reporting it as stopped or hung.
//
// Fault injection. Options.Inject is asked before each collective on each
// rank; its Fault can delay the rank (Delay: a slow rank, or one that never
// arrives) and fail the collective there (Err). Tests combine it with
// random delays to show that results do not depend on timing.
package inproc
