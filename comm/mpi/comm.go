//go:build mpi

package mpi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
)

// communicator is one rank's comm.Comm on one MPI communicator. Its
// collectives run on its own worker goroutine, one after another, in issue
// order; a watchdog bounds each of them.
type communicator struct {
	comm.Issuer // the collectives, through issue
	w           *World
	h           handle
	id          string // the same on every member (see newComm)
	name        string // "world", or "group[…]" with world ranks
	rank        int
	members     []int // world ranks, by rank
	maxCount    int   // elements per MPI call (see segments)
	scratchMax  int   // elements of scratch per collective (see defaultScratchMax)
	verify      bool

	mu      sync.Mutex
	queue   comm.Queue[*call] // guarded by mu
	current *call             // the collective inside MPI; nil when the watchdog took it
	fault   *fault            // the first failure; every later collective fails with it
	traffic comm.Traffic
	exited  chan struct{} // closed when the worker has returned
	// How far this rank got, for the control channel's queries: the last
	// sequence number issued, started by the worker (at startedAt), and
	// completed.
	issued, started, finished uint64
	startedAt                 time.Time

	s scratch // the worker's
}

var _ comm.AllToAller = (*communicator)(nil)

// AllToAll implements comm.AllToAller.
func (c *communicator) AllToAll(ctx context.Context, out, in comm.Buffer) comm.Handle {
	return c.issue(ctx, comm.Args{Kind: comm.KindAllToAll, Out: out, In: in})
}

// newComm wraps an MPI communicator and starts its worker. id names it
// alike on every member, for the control channel: "world" for the world,
// and for a split "<parent id>/<the split's sequence number>:<color>".
func (w *World) newComm(h handle, id string, isWorld bool, maxCount, scratchMax int, verify bool) (*communicator, error) {
	rank, members, err := describe(h)
	if err != nil {
		return nil, err
	}
	name := "world"
	if !isWorld {
		name = "group" + fmt.Sprint(members)
	}
	c := &communicator{w: w, h: h, id: id, name: name, rank: rank, members: members, maxCount: maxCount, scratchMax: scratchMax, verify: verify, exited: make(chan struct{})}
	c.Issuer = comm.Issuer{Issue: c.issue}
	c.queue.Init(&c.mu)
	if err := w.register(c); err != nil {
		return nil, err
	}
	go c.loop()
	return c, nil
}

// call is one collective on one rank, and its comm.Handle.
type call struct {
	comm.Args
	ctx        context.Context
	color, key int // split
	seq        uint64

	finished atomic.Bool
	done     chan struct{} // closed by finish
	left     chan struct{} // closed when the worker is done with the call's buffers
	err      error
	split    *communicator // split's result; nil for NoColor
}

func (x *call) Wait() error {
	<-x.done
	return x.err
}

// finish completes the call with err; only the first finish counts.
func (x *call) finish(err error) {
	if x.finished.CompareAndSwap(false, true) {
		x.err = err
		close(x.done)
	}
}

// fault is why a communicator broke: the ranks at fault (of the
// communicator, and when they are known elsewhere, the world ranks where
// the stall began: roots), what happened, whether every rank saw the same
// fault (a Verify mismatch), so the job can go on without an abort, and
// whether it came from another rank's abort notice (so this rank does not
// pass it on again).
type fault struct {
	peers   []int
	roots   []int
	err     error
	agreed  bool
	relayed bool
}

func (c *communicator) Rank() int { return c.rank }
func (c *communicator) Size() int { return len(c.members) }

func (c *communicator) Traffic() comm.Traffic {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.traffic
}

func (c *communicator) Split(ctx context.Context, color, key int) (comm.Comm, error) {
	if color < comm.NoColor || color > math.MaxInt32 || key < math.MinInt32 || key > math.MaxInt32 {
		panic(fmt.Sprintf("mpi: Split with color %d, key %d (want color ≥ 0 or NoColor, both C ints)", color, key))
	}
	h := c.issueCall(&call{Args: comm.Args{Kind: comm.KindSplit}, ctx: ctx, color: color, key: key})
	if err := h.Wait(); err != nil {
		return nil, err
	}
	if x, ok := h.(*call); ok && x.split != nil {
		return x.split, nil
	}
	return nil, nil
}

// issue checks a collective's arguments and queues it.
func (c *communicator) issue(ctx context.Context, a comm.Args) comm.Handle {
	a.Check("mpi", c.rank, c.Size())
	return c.issueCall(&call{Args: a, ctx: ctx})
}

// issueCall queues a call for the worker and returns it as the Handle; on a
// broken or closed communicator it fails at once.
func (c *communicator) issueCall(x *call) comm.Handle {
	if x.ctx == nil {
		x.ctx = context.Background()
	}
	x.done, x.left = make(chan struct{}), make(chan struct{})
	c.mu.Lock()
	defer c.mu.Unlock()
	var closed bool
	x.seq, closed = c.queue.NumberLocked()
	c.issued = x.seq
	switch {
	case closed:
		return comm.Done(c.errorFor(x, &fault{peers: []int{c.rank}, err: comm.ErrClosed}))
	case c.fault != nil && c.current == nil && c.queue.LenLocked() == 0:
		// Broken, and the worker has nothing before this call: fail now
		// (the worker may be stuck in MPI after a timeout).
		return comm.Done(c.errorFor(x, c.fault))
	}
	c.queue.PushLocked(x)
	return x
}

// close stops the worker once the queue is empty.
func (c *communicator) close() { c.queue.Close() }

// loop is the worker: it runs the queued calls in order until the
// communicator is closed and the queue is empty.
func (c *communicator) loop() {
	defer close(c.exited)
	for {
		x, ok := c.queue.Next()
		if !ok {
			return
		}
		c.execute(x)
	}
}

func (c *communicator) errorFor(x *call, f *fault) error {
	return &comm.Error{Group: c.name, Kind: x.Kind, Seq: x.seq, Rank: c.rank, Size: c.Size(), Peers: f.peers, Err: f.err}
}

// execute runs one call on the worker under its watchdog and records its
// traffic.
//
// The watchdog is a timer (the communicator's timeout, or the context's
// deadline when earlier) and the context's cancellation. When either fires
// while the call is still inside MPI, it takes the call: Wait returns the
// *comm.Error at once, the communicator breaks (the calls queued behind
// fail too), and MPI_Abort follows after Options.AbortGrace — MPI cannot
// cancel a collective, and the other ranks may be blocked in it.
func (c *communicator) execute(x *call) {
	defer close(x.left)
	c.mu.Lock()
	f := c.fault
	if f == nil {
		c.current = x
		c.started, c.startedAt = x.seq, time.Now()
	}
	c.mu.Unlock()
	if f != nil {
		x.finish(c.errorFor(x, f))
		return
	}
	if err := x.ctx.Err(); err != nil {
		c.fail(x, c.contextFault(err, 0))
		return
	}
	budget := c.w.opts.Timeout
	if d, ok := x.ctx.Deadline(); ok {
		budget = min(budget, time.Until(d))
	}
	timer := time.AfterFunc(budget, func() { c.timedOut(x, budget, nil) })
	stop := context.AfterFunc(x.ctx, func() {
		if err := x.ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
			c.timedOut(x, budget, err)
		} else {
			c.fail(x, c.contextFault(err, budget))
		}
	})
	f = c.run(x)
	timer.Stop()
	stop()
	if f != nil {
		c.fail(x, f)
		return
	}
	c.mu.Lock()
	mine := c.current == x
	if mine {
		c.current = nil
		c.finished = x.seq
		c.traffic.Record(x.Kind, x.Counts(c.rank, c.Size()))
	}
	c.mu.Unlock()
	if mine {
		x.finish(nil)
	}
}

// fail breaks the communicator with f while x is the current call (from the
// worker or the watchdog, whichever comes first; later ones do nothing),
// fails x and every queued call, and schedules MPI_Abort unless every rank
// saw the same fault.
func (c *communicator) fail(x *call, f *fault) {
	c.mu.Lock()
	if c.current != x {
		c.mu.Unlock()
		return
	}
	c.current = nil
	if c.fault == nil {
		c.fault = f
	}
	f = c.fault
	queued := c.queue.TakeAllLocked()
	c.mu.Unlock()
	err := c.errorFor(x, f)
	if !f.agreed {
		culprits := f.roots
		if culprits == nil {
			culprits = c.worldRanks(f.peers)
		}
		c.w.abort(err, culprits, !f.relayed)
	}
	if f.relayed {
		// Another rank gave up; this collective may be healthy, inside MPI
		// or reducing into the caller's buffers. It stops at its next step
		// (see gone); wait for that, a bounded time, so that the buffers are
		// the caller's again when Wait returns. A collective stuck in MPI
		// stays stuck; the job ends with MPI_Abort.
		t := time.NewTimer(relayWait)
		select {
		case <-x.left:
		case <-t.C:
		}
		t.Stop()
	}
	x.finish(err)
	for _, q := range queued {
		q.finish(c.errorFor(q, f))
	}
}

// timedOut is the watchdog's timer: unless x has completed meanwhile, it
// asks the other members how far they got (on the control channel, for up
// to queryWindow), and fails x naming those that did not arrive. cause is
// the context's error for a deadline, nil for the communicator's timeout.
func (c *communicator) timedOut(x *call, budget time.Duration, cause error) {
	c.mu.Lock()
	mine := c.current == x
	c.mu.Unlock()
	if !mine {
		return
	}
	missing, roots := c.stragglers(x.seq)
	peers := make([]int, len(missing))
	for i, s := range missing {
		peers[i] = s.Rank
	}
	c.fail(x, &fault{peers: peers, roots: roots, err: comm.TimedOut(budget, c.name, c.members, missing, false, cause)})
}

// breakWith breaks the communicator with f (another rank's abort notice):
// the collective inside MPI and every queued one fail with it, and later
// ones fail at once. A communicator already broken keeps its fault.
func (c *communicator) breakWith(f *fault) {
	c.mu.Lock()
	if c.fault != nil {
		c.mu.Unlock()
		return
	}
	if x := c.current; x != nil {
		c.mu.Unlock()
		c.fail(x, f)
		return
	}
	c.fault = f
	queued := c.queue.TakeAllLocked()
	c.mu.Unlock()
	for _, q := range queued {
		q.finish(c.errorFor(q, f))
	}
}

// errGone ends a collective whose call was taken from the worker.
var errGone = errors.New("mpi: the collective was failed while it ran")

// gone reports whether the call on the worker has been taken from it (by
// the watchdog, or another rank's abort notice): its buffers are the
// caller's again, and the worker must touch them no more — no further MPI
// call on them, no reduction into them. The collectives check it before
// each step.
func (c *communicator) gone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current == nil
}

// worldRanks translates ranks of c to world ranks.
func (c *communicator) worldRanks(ranks []int) []int {
	out := make([]int, len(ranks))
	for i, r := range ranks {
		out[i] = c.members[r]
	}
	return out
}

// contextFault is the fault of this rank's context ending: a timeout for a
// deadline, a failure of this rank for a cancellation.
func (c *communicator) contextFault(err error, budget time.Duration) *fault {
	if errors.Is(err, context.DeadlineExceeded) {
		msg := fmt.Sprintf("timed out after %v (the context's deadline)", budget)
		if budget == 0 {
			msg = "the context's deadline passed before the collective started"
		}
		return &fault{err: &comm.FaultError{Msg: msg, Kind: comm.ErrTimeout, Cause: err}}
	}
	return &fault{peers: []int{c.rank}, err: &comm.FaultError{Msg: c.who([]int{c.rank}) + " failed", Kind: comm.ErrRankFailed, Cause: err}}
}

// who names ranks of the communicator for messages (see comm.Who).
func (c *communicator) who(peers []int) string { return comm.Who(c.name, c.members, peers) }

// signature is what every rank's call of one collective must agree on; with
// Options.Verify the ranks exchange it before the collective.
type signature [6]int64 // seq, kind, dtype, length, op, root

func (x *call) sig() signature {
	s := signature{int64(x.seq), int64(x.Kind), int64(x.Out.DType()), int64(x.Out.Len()), -1, -1}
	switch x.Kind {
	case comm.KindAllReduce, comm.KindReduceScatter:
		s[4] = int64(x.Op)
	case comm.KindAllGather:
		s[3] = int64(x.In.Len())
	case comm.KindBroadcast:
		s[5] = int64(x.Root)
	case comm.KindBarrier, comm.KindSplit:
		s[2], s[3] = 0, 0
	}
	return s
}

func (s signature) String() string {
	k, dt, n := comm.Kind(s[1]), device.DType(s[2]), s[3]
	var d string
	switch k {
	case comm.KindAllReduce, comm.KindReduceScatter:
		d = fmt.Sprintf("%v(%v[%d], %v)", k, dt, n, comm.Op(s[4]))
	case comm.KindAllGather, comm.KindAllToAll:
		d = fmt.Sprintf("%v(%v[%d])", k, dt, n)
	case comm.KindBroadcast:
		d = fmt.Sprintf("%v(%v[%d], root %d)", k, dt, n, s[5])
	default:
		d = k.String()
	}
	return fmt.Sprintf("%s as #%d", d, s[0])
}

// verifySig exchanges the call's signature and returns a mismatch fault,
// the same on every rank, naming rank 0 and the first rank that differs.
func (c *communicator) verifySig(x *call) *fault {
	n := c.Size()
	mine := x.sig()
	all := c.s.sigs(n)
	if err := allgather(c.h, unsafe.Pointer(&mine[0]), unsafe.Pointer(&all[0][0]), len(mine), typeI64); err != nil {
		return c.mpiFault(err)
	}
	for r := 1; r < n; r++ {
		if all[r] != all[0] {
			return &fault{peers: []int{0, r}, agreed: true, err: &comm.FaultError{
				Msg:  fmt.Sprintf("%s issued %v but %s issued %v", c.who([]int{r}), all[r], c.who([]int{0}), all[0]),
				Kind: comm.ErrMismatch,
			}}
		}
	}
	return nil
}

// mpiFault is the fault of an MPI call failing on this rank.
func (c *communicator) mpiFault(err error) *fault {
	return &fault{peers: []int{c.rank}, err: &comm.FaultError{Msg: "MPI failed on " + c.who([]int{c.rank}), Kind: comm.ErrRankFailed, Cause: err}}
}
