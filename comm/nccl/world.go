package nccl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dszero/dszero/comm"
)

// Options configure one rank's NCCL world.
type Options struct {
	Lib    Lib    // Load's, or package fakenccl's
	Device Device // NewCUDADevice's, or package fakenccl's
	// Rank and Size are this process's place in the job (comm.ParseEnv).
	Rank, Size int
	// ID names the world communicator: rank 0's GetUniqueID, handed to
	// every rank by package rendezvous.
	ID UniqueID
	// Timeout bounds each collective on each rank, from the moment it
	// starts (after the collectives queued before it on the same
	// communicator), and the communicator's initialisation; a context
	// deadline that comes earlier wins. Zero is comm.DefaultTimeout.
	Timeout time.Duration
	// Store is the job's store (rendezvous.Session.Store). With it, a
	// timed-out collective names the ranks that did not arrive, and a
	// failure on one rank fails every rank's collectives at once; without
	// it (nil), each rank only learns of a failure from its own timeout.
	Store Store
	// Heartbeat is how often this rank publishes its progress in Store;
	// zero is DefaultHeartbeat.
	Heartbeat time.Duration
}

// World is one rank's NCCL state: the library, the device, the world
// communicator and the communicators split from it, and the monitor.
type World struct {
	opts  Options
	lib   Lib
	dev   Device
	world *Comm
	mon   *monitor // nil without a store

	mu     sync.Mutex
	comms  []*Comm          // every communicator, world first
	fault  *comm.FaultError // the job's failure, once there is one
	closed bool
}

// NewWorld creates this rank's world communicator (a non-blocking
// ncclCommInitRankConfig) and waits until every rank has joined, within
// the timeout.
func NewWorld(ctx context.Context, opts Options) (*World, error) {
	if opts.Lib == nil || opts.Device == nil {
		panic("nccl: NewWorld without a Lib or a Device")
	}
	if opts.Size < 1 || opts.Rank < 0 || opts.Rank >= opts.Size {
		return nil, fmt.Errorf("nccl: rank %d of a world of %d", opts.Rank, opts.Size)
	}
	var err error
	if opts.Timeout, err = comm.CheckTimeout("nccl: timeout", opts.Timeout); err != nil {
		return nil, err
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	w := &World{opts: opts, lib: opts.Lib, dev: opts.Device}
	var h RawComm
	err = w.dev.Run(func() (err error) {
		h, err = w.lib.CommInitRank(opts.Size, opts.ID, opts.Rank, Config{Blocking: false})
		return err
	})
	if err != nil && !Pending(err) {
		if h != 0 {
			w.dev.Run(func() error { return w.lib.CommAbort(h) })
		}
		return nil, fmt.Errorf("nccl: rank %d of %d: creating the world communicator: %w", opts.Rank, opts.Size, err)
	}
	if err := w.ready(ctx, h, time.Now().Add(opts.Timeout)); err != nil {
		return nil, fmt.Errorf("nccl: rank %d of %d: creating the world communicator: %w", opts.Rank, opts.Size, err)
	}
	members := make([]int, opts.Size)
	for r := range members {
		members[r] = r
	}
	if w.world, err = w.newComm(h, "world", "world", members, opts.Rank); err != nil {
		return nil, err
	}
	if opts.Store != nil {
		w.mon = newMonitor(w, opts.Store, opts.Heartbeat)
		w.mon.start()
	}
	return w, nil
}

// ready polls a non-blocking communicator until it is ready; on failure
// or at the deadline it aborts it.
func (w *World) ready(ctx context.Context, h RawComm, deadline time.Time) error {
	p := newPoller()
	for {
		var st Result
		err := w.dev.Run(func() (err error) {
			st, err = w.lib.CommGetAsyncError(h)
			return err
		})
		switch {
		case err == nil && st == Success:
			return nil
		case err == nil && st == InProgress:
		default:
			if err == nil {
				err = w.asyncError(st, h)
			}
			w.dev.Run(func() error { return w.lib.CommAbort(h) })
			return err
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			w.dev.Run(func() error { return w.lib.CommAbort(h) })
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: the communicator was not ready within %v: a rank did not join (set NCCL_DEBUG=INFO to see where NCCL waits)", comm.ErrTimeout, w.opts.Timeout)
		}
		p.wait()
	}
}

// asyncError is the *Error of a communicator's asynchronous failure.
func (w *World) asyncError(st Result, h RawComm) error {
	return &Error{Func: "ncclCommGetAsyncError", Code: st, Msg: w.lib.ErrorString(st), Last: w.lib.LastError(h)}
}

// Comm is this rank's world communicator.
func (w *World) Comm() *Comm { return w.world }

// Rank and Size are this process's place in the world.
func (w *World) Rank() int { return w.opts.Rank }
func (w *World) Size() int { return w.opts.Size }

// newComm registers a communicator and starts its goroutines.
func (w *World) newComm(h RawComm, id, name string, members []int, rank int) (*Comm, error) {
	st, err := w.dev.NewStream()
	if err != nil {
		w.dev.Run(func() error { return w.lib.CommDestroy(h) })
		return nil, fmt.Errorf("nccl: a stream for communicator %s: %w", name, err)
	}
	c := newComm(w, h, st, id, name, members, rank)
	w.mu.Lock()
	w.comms = append(w.comms, c)
	f := w.fault
	w.mu.Unlock()
	if f != nil {
		c.breakWith(f, nil)
	}
	return c, nil
}

// progress is every communicator's progress, for the monitor.
func (w *World) progress() map[string]commProgress {
	w.mu.Lock()
	comms := slices.Clone(w.comms)
	w.mu.Unlock()
	out := make(map[string]commProgress, len(comms))
	for _, c := range comms {
		out[c.id] = c.progress()
	}
	return out
}

// fail records the job's failure, found by this rank on c: every
// communicator of this rank breaks with f (c's peers are peers; the
// others get the same world ranks, as members of theirs), and the other
// ranks are told.
func (w *World) fail(c *Comm, x *call, f *comm.FaultError, peers []int) {
	worldPeers := make([]int, len(peers))
	for i, p := range peers {
		worldPeers[i] = c.members[p]
	}
	if !w.breakAll(f, worldPeers) {
		return // another failure came first
	}
	if w.mon != nil {
		w.mon.announce(notice{From: w.opts.Rank, Timeout: errors.Is(f, comm.ErrTimeout), Group: c.name, Kind: x.kind, Seq: x.seq,
			Msg: f.Error(), Peers: worldPeers})
	}
}

// relay is a notice from another rank: every communicator breaks with
// its cause, naming the same ranks at fault, so that which rank saw a
// failure first does not change what the others report.
func (w *World) relay(n notice) {
	kind := comm.ErrRankFailed
	if n.Timeout {
		kind = comm.ErrTimeout
	}
	f := &comm.FaultError{Msg: fmt.Sprintf("rank %d's %v #%d on %s failed: %s", n.From, n.Kind, n.Seq, n.Group, n.Msg), Kind: kind}
	peers := n.Peers
	if len(peers) == 0 && !n.Timeout {
		// The sender failed. A timeout without peers is NCCL stalling
		// after every rank arrived: no rank is at fault, the sender
		// only saw it first.
		peers = []int{n.From}
	}
	w.breakAll(f, peers)
}

// breakAll breaks every communicator with f, naming worldPeers in each
// (as its own ranks); false when the job had failed already.
func (w *World) breakAll(f *comm.FaultError, worldPeers []int) bool {
	w.mu.Lock()
	if w.fault != nil {
		w.mu.Unlock()
		return false
	}
	w.fault = f
	comms := slices.Clone(w.comms)
	w.mu.Unlock()
	for _, c := range comms {
		c.breakWith(f, worldPeers)
	}
	return true
}

// Close drains and destroys every communicator (the queued collectives
// complete first), stops the monitor and publishes that this rank has
// closed. Comms must not be used after.
func (w *World) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	comms := slices.Clone(w.comms)
	w.mu.Unlock()
	var errs []error
	for _, c := range slices.Backward(comms) { // sub-communicators first
		errs = append(errs, c.close())
	}
	if w.mon != nil {
		w.mon.close()
	}
	return errors.Join(errs...)
}

// poller spaces the polls of a wait: at once, then at doubling intervals
// from 20 µs up to 2 ms, so that a short collective completes with little
// delay and a long one costs few polls.
type poller struct{ d time.Duration }

func newPoller() *poller { return &poller{} }

func (p *poller) wait() {
	if p.d == 0 {
		p.d = 20 * time.Microsecond
	} else {
		p.d = min(2*p.d, 2*time.Millisecond)
	}
	time.Sleep(p.d)
}
