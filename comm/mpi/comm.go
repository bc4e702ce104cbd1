//go:build mpi

package mpi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
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
	w        *World
	h        handle
	name     string // "world", or "group[…]" with world ranks
	rank     int
	members  []int // world ranks, by rank
	maxCount int   // elements per MPI call (see segments)
	verify   bool

	mu      sync.Mutex
	cond    sync.Cond // signalled on enqueue and close
	queue   []*call
	seq     uint64 // the last sequence number issued
	current *call  // the collective inside MPI; nil when the watchdog took it
	fault   *fault // the first failure; every later collective fails with it
	closed  bool
	traffic comm.Traffic
	exited  chan struct{} // closed when the worker has returned

	s scratch // the worker's
}

var _ comm.Comm = (*communicator)(nil)

// newComm wraps an MPI communicator and starts its worker.
func (w *World) newComm(h handle, isWorld bool, maxCount int, verify bool) (*communicator, error) {
	rank, members, err := describe(h)
	if err != nil {
		return nil, err
	}
	name := "world"
	if !isWorld {
		name = "group" + fmt.Sprint(members)
	}
	c := &communicator{w: w, h: h, name: name, rank: rank, members: members, maxCount: maxCount, verify: verify, exited: make(chan struct{})}
	c.cond.L = &c.mu
	if err := w.register(c); err != nil {
		return nil, err
	}
	go c.loop()
	return c, nil
}

// call is one collective on one rank, and its comm.Handle.
type call struct {
	kind       comm.Kind
	ctx        context.Context
	out, in    comm.Buffer // all_reduce, broadcast: out only
	op         comm.Op
	root       int
	color, key int // split
	seq        uint64

	finished atomic.Bool
	done     chan struct{} // closed by finish
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

// fault is why a communicator broke: the ranks at fault (nil when MPI
// cannot tell), what happened, and whether every rank saw the same fault
// (a Verify mismatch), so the job can go on without an abort.
type fault struct {
	peers  []int
	err    error
	agreed bool
}

// faultError is a fault's error: a message, a cause kind (one of comm's
// Err values) and the underlying error, if any.
type faultError struct {
	msg   string
	kind  error
	cause error
}

func (e *faultError) Error() string {
	if e.cause != nil {
		return e.msg + ": " + e.cause.Error()
	}
	return e.msg
}

func (e *faultError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.kind, e.cause}
	}
	return []error{e.kind}
}

func (c *communicator) Rank() int { return c.rank }
func (c *communicator) Size() int { return len(c.members) }

func (c *communicator) Traffic() comm.Traffic {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.traffic
}

func (c *communicator) AllReduce(ctx context.Context, buf comm.Buffer, op comm.Op) comm.Handle {
	checkOp(op)
	checkDType(buf)
	return c.issue(&call{kind: comm.KindAllReduce, ctx: ctx, out: buf, op: op})
}

func (c *communicator) ReduceScatter(ctx context.Context, out, in comm.Buffer, op comm.Op) comm.Handle {
	checkOp(op)
	c.checkChunked("ReduceScatter", in, out)
	return c.issue(&call{kind: comm.KindReduceScatter, ctx: ctx, out: out, in: in, op: op})
}

func (c *communicator) AllGather(ctx context.Context, out, in comm.Buffer) comm.Handle {
	c.checkChunked("AllGather", out, in)
	return c.issue(&call{kind: comm.KindAllGather, ctx: ctx, out: out, in: in})
}

func (c *communicator) Broadcast(ctx context.Context, buf comm.Buffer, root int) comm.Handle {
	checkDType(buf)
	if root < 0 || root >= c.Size() {
		panic(fmt.Sprintf("mpi: Broadcast from root %d in a communicator of %d", root, c.Size()))
	}
	return c.issue(&call{kind: comm.KindBroadcast, ctx: ctx, out: buf, root: root})
}

func (c *communicator) Barrier(ctx context.Context) comm.Handle {
	return c.issue(&call{kind: comm.KindBarrier, ctx: ctx})
}

func (c *communicator) Split(ctx context.Context, color, key int) (comm.Comm, error) {
	if color < comm.NoColor || color > math.MaxInt32 || key < math.MinInt32 || key > math.MaxInt32 {
		panic(fmt.Sprintf("mpi: Split with color %d, key %d (want color ≥ 0 or NoColor, both C ints)", color, key))
	}
	h := c.issue(&call{kind: comm.KindSplit, ctx: ctx, color: color, key: key})
	if err := h.Wait(); err != nil {
		return nil, err
	}
	if x, ok := h.(*call); ok && x.split != nil {
		return x.split, nil
	}
	return nil, nil
}

func checkOp(op comm.Op) {
	if !op.Valid() {
		panic(fmt.Sprintf("mpi: invalid reduction %v", op))
	}
}

func checkDType(b comm.Buffer) {
	if !b.DType().Valid() {
		panic(fmt.Sprintf("mpi: buffer of invalid dtype %v", b.DType()))
	}
}

// checkChunked checks that whole is Size() chunks of part's length and
// dtype, and that part is disjoint from whole or exactly chunk Rank().
func (c *communicator) checkChunked(name string, whole, part comm.Buffer) {
	checkDType(whole)
	n := c.Size()
	if whole.DType() != part.DType() || whole.Len() != n*part.Len() {
		panic(fmt.Sprintf("mpi: %s of %v and %v in a communicator of %d: want one dtype and %d chunks", name, whole, part, n, n))
	}
	if overlap(whole, part) && !same(part, whole.Slice(c.rank*part.Len(), (c.rank+1)*part.Len())) {
		panic(fmt.Sprintf("mpi: %s on rank %d: the chunk buffer overlaps the whole one but is not chunk %d of it", name, c.rank, c.rank))
	}
}

func span(b comm.Buffer) (lo, hi uintptr) {
	p := uintptr(ptr(b))
	return p, p + uintptr(b.Bytes())
}

func overlap(a, b comm.Buffer) bool {
	if a.Len() == 0 || b.Len() == 0 {
		return false
	}
	alo, ahi := span(a)
	blo, bhi := span(b)
	return alo < bhi && blo < ahi
}

// same reports whether a and b are the same view.
func same(a, b comm.Buffer) bool {
	return a.Len() == b.Len() && a.DType() == b.DType() && ptr(a) == ptr(b)
}

// issue queues a call for the worker and returns it as the Handle; on a
// broken or closed communicator it fails at once.
func (c *communicator) issue(x *call) comm.Handle {
	if x.ctx == nil {
		x.ctx = context.Background()
	}
	x.done = make(chan struct{})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	x.seq = c.seq
	switch {
	case c.closed:
		return comm.Done(c.errorFor(x, &fault{peers: []int{c.rank}, err: comm.ErrClosed}))
	case c.fault != nil && c.current == nil && len(c.queue) == 0:
		// Broken, and the worker has nothing before this call: fail now
		// (the worker may be stuck in MPI after a timeout).
		return comm.Done(c.errorFor(x, c.fault))
	}
	c.queue = append(c.queue, x)
	c.cond.Signal()
	return x
}

// close stops the worker once the queue is empty.
func (c *communicator) close() {
	c.mu.Lock()
	c.closed = true
	c.cond.Signal()
	c.mu.Unlock()
}

// loop is the worker: it runs the queued calls in order until the
// communicator is closed and the queue is empty.
func (c *communicator) loop() {
	defer close(c.exited)
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closed {
			c.cond.Wait()
		}
		if len(c.queue) == 0 {
			c.mu.Unlock()
			return
		}
		x := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		if len(c.queue) == 0 {
			c.queue = c.queue[:0:0]
		}
		c.mu.Unlock()
		c.execute(x)
	}
}

func (c *communicator) errorFor(x *call, f *fault) error {
	return &comm.Error{Group: c.name, Kind: x.kind, Seq: x.seq, Rank: c.rank, Size: c.Size(), Peers: f.peers, Err: f.err}
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
	c.mu.Lock()
	f := c.fault
	if f == nil {
		c.current = x
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
	timer := time.AfterFunc(budget, func() {
		c.fail(x, &fault{err: &faultError{
			msg:  fmt.Sprintf("timed out after %v: some rank did not arrive or did not finish (MPI cannot say which)", budget),
			kind: comm.ErrTimeout,
		}})
	})
	stop := context.AfterFunc(x.ctx, func() { c.fail(x, c.contextFault(x.ctx.Err(), budget)) })
	f = c.run(x)
	timer.Stop()
	stop()
	if f != nil {
		c.fail(x, f)
		return
	}
	counts := comm.Counts{Calls: 1, Bytes: payload(x)}
	counts.Sent, counts.Received = comm.NominalTraffic(x.kind, c.Size(), c.rank, x.root, counts.Bytes)
	c.mu.Lock()
	mine := c.current == x
	if mine {
		c.current = nil
		c.traffic.Record(x.kind, counts)
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
	queued := c.queue
	c.queue = nil
	c.mu.Unlock()
	err := c.errorFor(x, f)
	if !f.agreed {
		c.w.abort(err)
	}
	x.finish(err)
	for _, q := range queued {
		q.finish(c.errorFor(q, f))
	}
}

// contextFault is the fault of this rank's context ending: a timeout for a
// deadline, a failure of this rank for a cancellation.
func (c *communicator) contextFault(err error, budget time.Duration) *fault {
	if errors.Is(err, context.DeadlineExceeded) {
		msg := fmt.Sprintf("timed out after %v (the context's deadline)", budget)
		if budget == 0 {
			msg = "the context's deadline passed before the collective started"
		}
		return &fault{err: &faultError{msg: msg, kind: comm.ErrTimeout, cause: err}}
	}
	return &fault{peers: []int{c.rank}, err: &faultError{msg: c.who([]int{c.rank}) + " failed", kind: comm.ErrRankFailed, cause: err}}
}

// who names ranks of the communicator for messages, with world ranks in
// sub-groups: "rank 3", "ranks 1 (world rank 2), 2 (world rank 5)".
func (c *communicator) who(peers []int) string {
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = strconv.Itoa(p)
		if c.name != "world" {
			parts[i] += fmt.Sprintf(" (world rank %d)", c.members[p])
		}
	}
	if len(parts) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ", ")
}

// payload is the b of comm.NominalTraffic.
func payload(x *call) int64 {
	switch x.kind {
	case comm.KindReduceScatter:
		return x.in.Bytes()
	case comm.KindAllReduce, comm.KindAllGather, comm.KindBroadcast:
		return x.out.Bytes()
	}
	return 0
}

// signature is what every rank's call of one collective must agree on; with
// Options.Verify the ranks exchange it before the collective.
type signature [6]int64 // seq, kind, dtype, length, op, root

func (x *call) sig() signature {
	s := signature{int64(x.seq), int64(x.kind), int64(x.out.DType()), int64(x.out.Len()), -1, -1}
	switch x.kind {
	case comm.KindAllReduce, comm.KindReduceScatter:
		s[4] = int64(x.op)
	case comm.KindAllGather:
		s[3] = int64(x.in.Len())
	case comm.KindBroadcast:
		s[5] = int64(x.root)
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
	case comm.KindAllGather:
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
			return &fault{peers: []int{0, r}, agreed: true, err: &faultError{
				msg:  fmt.Sprintf("%s issued %v but %s issued %v", c.who([]int{r}), all[r], c.who([]int{0}), all[0]),
				kind: comm.ErrMismatch,
			}}
		}
	}
	return nil
}

// mpiFault is the fault of an MPI call failing on this rank.
func (c *communicator) mpiFault(err error) *fault {
	return &fault{peers: []int{c.rank}, err: &faultError{msg: "MPI failed on " + c.who([]int{c.rank}), kind: comm.ErrRankFailed, cause: err}}
}
