package inproc

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
)

// rankComm is one rank's comm.Comm on one group. Its collectives run on
// its own worker goroutine, one after another, in issue order.
type rankComm struct {
	g    *group
	rank int // in g
	job  *job

	mu      sync.Mutex
	cond    sync.Cond // signalled on enqueue and close
	queue   []*call
	seq     uint64 // the last sequence number issued
	closed  bool
	traffic comm.Traffic
	exited  chan struct{} // closed when the worker has returned

	bufs []comm.Buffer // worker scratch: one view per rank
}

var _ comm.Comm = (*rankComm)(nil)

// call is one collective on one rank, and its comm.Handle.
type call struct {
	kind       comm.Kind
	ctx        context.Context
	out, in    comm.Buffer // all_reduce, broadcast: out only
	op         comm.Op
	root       int
	color, key int // split
	seq        uint64

	done  chan struct{} // closed when complete
	err   error
	split comm.Comm // split's result
}

func (c *call) Wait() error {
	<-c.done
	return c.err
}

// signature is what every rank's call of one collective must agree on.
type signature struct {
	kind  comm.Kind
	dtype device.DType
	n     int // all_reduce, broadcast: the buffer; reduce_scatter: out; all_gather: in
	op    comm.Op
	root  int
}

func (c *call) sig() signature {
	s := signature{kind: c.kind, dtype: c.out.DType(), n: c.out.Len(), root: -1, op: -1}
	switch c.kind {
	case comm.KindAllReduce, comm.KindReduceScatter:
		s.op = c.op
	case comm.KindAllGather:
		s.n = c.in.Len()
	case comm.KindBroadcast:
		s.root = c.root
	case comm.KindBarrier, comm.KindSplit:
		s.dtype, s.n = 0, 0
	}
	return s
}

func (s signature) String() string {
	switch s.kind {
	case comm.KindAllReduce, comm.KindReduceScatter:
		return fmt.Sprintf("%v(%v[%d], %v)", s.kind, s.dtype, s.n, s.op)
	case comm.KindAllGather:
		return fmt.Sprintf("%v(%v[%d])", s.kind, s.dtype, s.n)
	case comm.KindBroadcast:
		return fmt.Sprintf("%v(%v[%d], root %d)", s.kind, s.dtype, s.n, s.root)
	}
	return s.kind.String()
}

// buffers is the non-empty buffers of a call, for the overlap check.
func (c *call) buffers() []comm.Buffer {
	var bs []comm.Buffer
	for _, b := range []comm.Buffer{c.out, c.in} {
		if b.Len() > 0 {
			bs = append(bs, b)
		}
	}
	return bs
}

// span is the byte range of a non-empty buffer.
func span(b comm.Buffer) (lo, hi uintptr) {
	var p unsafe.Pointer
	if b.DType() == device.F32 {
		p = unsafe.Pointer(unsafe.SliceData(b.F32()))
	} else {
		p = unsafe.Pointer(unsafe.SliceData(b.Bits()))
	}
	return uintptr(p), uintptr(p) + uintptr(b.Bytes())
}

func overlap(a, b comm.Buffer) bool {
	if a.Len() == 0 || b.Len() == 0 {
		return false
	}
	alo, ahi := span(a)
	blo, bhi := span(b)
	return alo < bhi && blo < ahi
}

func same(a, b comm.Buffer) bool {
	if a.Len() != b.Len() || a.DType() != b.DType() {
		return false
	}
	if a.Len() == 0 {
		return true
	}
	alo, _ := span(a)
	blo, _ := span(b)
	return alo == blo
}

func (c *rankComm) Rank() int { return c.rank }
func (c *rankComm) Size() int { return c.g.size() }

func (c *rankComm) Traffic() comm.Traffic {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.traffic
}

func (c *rankComm) AllReduce(ctx context.Context, buf comm.Buffer, op comm.Op) comm.Handle {
	checkOp(op)
	checkDType(buf)
	return c.issue(&call{kind: comm.KindAllReduce, ctx: ctx, out: buf, op: op})
}

func (c *rankComm) ReduceScatter(ctx context.Context, out, in comm.Buffer, op comm.Op) comm.Handle {
	checkOp(op)
	c.checkChunked("ReduceScatter", in, out)
	return c.issue(&call{kind: comm.KindReduceScatter, ctx: ctx, out: out, in: in, op: op})
}

func (c *rankComm) AllGather(ctx context.Context, out, in comm.Buffer) comm.Handle {
	c.checkChunked("AllGather", out, in)
	return c.issue(&call{kind: comm.KindAllGather, ctx: ctx, out: out, in: in})
}

func (c *rankComm) Broadcast(ctx context.Context, buf comm.Buffer, root int) comm.Handle {
	checkDType(buf)
	if root < 0 || root >= c.Size() {
		panic(fmt.Sprintf("inproc: Broadcast from root %d in a communicator of %d", root, c.Size()))
	}
	return c.issue(&call{kind: comm.KindBroadcast, ctx: ctx, out: buf, root: root})
}

func (c *rankComm) Barrier(ctx context.Context) comm.Handle {
	return c.issue(&call{kind: comm.KindBarrier, ctx: ctx})
}

func (c *rankComm) Split(ctx context.Context, color, key int) (comm.Comm, error) {
	if color < comm.NoColor {
		panic(fmt.Sprintf("inproc: Split with color %d (want ≥ 0 or NoColor)", color))
	}
	h := c.issue(&call{kind: comm.KindSplit, ctx: ctx, color: color, key: key})
	if err := h.Wait(); err != nil {
		return nil, err
	}
	if sub := h.(*call).split; sub != nil {
		return sub, nil
	}
	return nil, nil
}

func checkOp(op comm.Op) {
	if !op.Valid() {
		panic(fmt.Sprintf("inproc: invalid reduction %v", op))
	}
}

func checkDType(b comm.Buffer) {
	if !b.DType().Valid() {
		panic(fmt.Sprintf("inproc: buffer of invalid dtype %v", b.DType()))
	}
}

// checkChunked checks that whole is Size() chunks of part's length and
// dtype, and that part is disjoint from whole or exactly chunk Rank().
func (c *rankComm) checkChunked(name string, whole, part comm.Buffer) {
	checkDType(whole)
	n := c.Size()
	if whole.DType() != part.DType() || whole.Len() != n*part.Len() {
		panic(fmt.Sprintf("inproc: %s of %v and %v in a communicator of %d: want one dtype and %d chunks", name, whole, part, n, n))
	}
	if overlap(whole, part) && !same(part, whole.Slice(c.rank*part.Len(), (c.rank+1)*part.Len())) {
		panic(fmt.Sprintf("inproc: %s on rank %d: the chunk buffer overlaps the whole one but is not chunk %d of it", name, c.rank, c.rank))
	}
}

// issue queues a call for the worker and returns it as the Handle.
func (c *rankComm) issue(x *call) comm.Handle {
	if x.ctx == nil {
		x.ctx = context.Background()
	}
	x.done = make(chan struct{})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	x.seq = c.seq
	if c.closed {
		return comm.Done(c.errorFor(x, &fault{peers: []int{c.rank}, err: comm.ErrClosed}))
	}
	c.queue = append(c.queue, x)
	c.cond.Signal()
	return x
}

func (c *rankComm) close() {
	c.mu.Lock()
	c.closed = true
	c.cond.Signal()
	c.mu.Unlock()
}

// loop is the worker: it runs the queued calls in order until the
// communicator is closed and the queue is empty.
func (c *rankComm) loop() {
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
		close(x.done)
	}
}

func (c *rankComm) errorFor(x *call, f *fault) error {
	return &comm.Error{Group: c.g.name, Kind: x.kind, Seq: x.seq, Rank: c.rank, Size: c.g.size(), Peers: f.peers, Err: f.err}
}

// execute runs one call on the worker, with its injected fault and its
// timeout, and records its traffic.
func (c *rankComm) execute(x *call) {
	g := c.g
	if inject := c.job.w.opts.Inject; inject != nil {
		f := inject(Site{Group: g.name, Rank: c.rank, WorldRank: g.members[c.rank], Kind: x.kind, Seq: x.seq})
		if f.Delay > 0 {
			if ft := g.sleep(x.ctx, c.rank, f.Delay); ft != nil {
				x.err = c.errorFor(x, ft)
				return
			}
		}
		if f.Err != nil {
			g.abort(g.failed(c.rank, f.Err))
			x.err = c.errorFor(x, g.failedFault())
			return
		}
	}
	if err := x.ctx.Err(); err != nil {
		g.abort(g.failed(c.rank, err))
		x.err = c.errorFor(x, g.failedFault())
		return
	}
	budget := g.timeout
	if d, ok := x.ctx.Deadline(); ok {
		budget = min(budget, time.Until(d))
	}
	t := time.NewTimer(budget)
	defer t.Stop()
	w := &waiter{ctx: x.ctx, timer: t.C, budget: budget, me: c.rank}
	if f := c.run(x, w); f != nil {
		g.settle()
		x.err = c.errorFor(x, f)
		return
	}
	counts := comm.Counts{Calls: 1, Bytes: payload(x)}
	counts.Sent, counts.Received = comm.NominalTraffic(x.kind, g.size(), c.rank, x.root, counts.Bytes)
	c.mu.Lock()
	c.traffic.Record(x.kind, counts)
	c.mu.Unlock()
}

func (g *group) failedFault() *fault {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fault
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
