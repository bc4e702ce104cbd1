package inproc

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
)

// rankComm is one rank's comm.Comm on one group. Its collectives run on
// its own worker goroutine, one after another, in issue order.
type rankComm struct {
	comm.Issuer // the collectives, through issue
	g           *group
	rank        int // in g
	job         *job

	mu      sync.Mutex
	queue   comm.Queue[*call] // guarded by mu
	traffic comm.Traffic
	exited  chan struct{} // closed when the worker has returned

	bufs []comm.Buffer // worker scratch: one view per rank
}

var _ comm.AllToAller = (*rankComm)(nil)

// AllToAll implements comm.AllToAller.
func (c *rankComm) AllToAll(ctx context.Context, out, in comm.Buffer) comm.Handle {
	return c.issue(ctx, comm.Args{Kind: comm.KindAllToAll, Out: out, In: in})
}

// call is one collective on one rank, and its comm.Handle.
type call struct {
	comm.Args
	ctx        context.Context
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
	s := signature{kind: c.Kind, dtype: c.Out.DType(), n: c.Out.Len(), root: -1, op: -1}
	switch c.Kind {
	case comm.KindAllReduce, comm.KindReduceScatter:
		s.op = c.Op
	case comm.KindAllGather:
		s.n = c.In.Len()
	case comm.KindBroadcast:
		s.root = c.Root
	case comm.KindBarrier, comm.KindSplit:
		s.dtype, s.n = 0, 0
	}
	return s
}

func (s signature) String() string {
	switch s.kind {
	case comm.KindAllReduce, comm.KindReduceScatter:
		return fmt.Sprintf("%v(%v[%d], %v)", s.kind, s.dtype, s.n, s.op)
	case comm.KindAllGather, comm.KindAllToAll:
		return fmt.Sprintf("%v(%v[%d])", s.kind, s.dtype, s.n)
	case comm.KindBroadcast:
		return fmt.Sprintf("%v(%v[%d], root %d)", s.kind, s.dtype, s.n, s.root)
	}
	return s.kind.String()
}

// buffers is the non-empty buffers of a call, for the overlap check.
func (c *call) buffers() []comm.Buffer {
	var bs []comm.Buffer
	for _, b := range []comm.Buffer{c.Out, c.In} {
		if b.Len() > 0 {
			bs = append(bs, b)
		}
	}
	return bs
}

func (c *rankComm) Rank() int { return c.rank }
func (c *rankComm) Size() int { return c.g.size() }

func (c *rankComm) Traffic() comm.Traffic {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.traffic
}

func (c *rankComm) Split(ctx context.Context, color, key int) (comm.Comm, error) {
	if color < comm.NoColor {
		panic(fmt.Sprintf("inproc: Split with color %d (want ≥ 0 or NoColor)", color))
	}
	h := c.issueCall(&call{Args: comm.Args{Kind: comm.KindSplit}, ctx: ctx, color: color, key: key})
	if err := h.Wait(); err != nil {
		return nil, err
	}
	if sub := h.(*call).split; sub != nil {
		return sub, nil
	}
	return nil, nil
}

// issue checks a collective's arguments and queues it.
func (c *rankComm) issue(ctx context.Context, a comm.Args) comm.Handle {
	a.Check("inproc", c.rank, c.Size())
	return c.issueCall(&call{Args: a, ctx: ctx})
}

// issueCall queues a call for the worker and returns it as the Handle.
func (c *rankComm) issueCall(x *call) comm.Handle {
	if x.ctx == nil {
		x.ctx = context.Background()
	}
	x.done = make(chan struct{})
	c.mu.Lock()
	defer c.mu.Unlock()
	var closed bool
	if x.seq, closed = c.queue.NumberLocked(); closed {
		return comm.Done(c.errorFor(x, &fault{peers: []int{c.rank}, err: comm.ErrClosed}))
	}
	c.queue.PushLocked(x)
	return x
}

func (c *rankComm) close() { c.queue.Close() }

// loop is the worker: it runs the queued calls in order until the
// communicator is closed and the queue is empty.
func (c *rankComm) loop() {
	defer close(c.exited)
	for {
		x, ok := c.queue.Next()
		if !ok {
			return
		}
		c.execute(x)
		close(x.done)
	}
}

func (c *rankComm) errorFor(x *call, f *fault) error {
	return &comm.Error{Group: c.g.name, Kind: x.Kind, Seq: x.seq, Rank: c.rank, Size: c.g.size(), Peers: f.peers, Err: f.err}
}

// execute runs one call on the worker, with its injected fault and its
// timeout, and records its traffic.
func (c *rankComm) execute(x *call) {
	g := c.g
	if inject := c.job.w.opts.Inject; inject != nil {
		f := inject(Site{Group: g.name, Rank: c.rank, WorldRank: g.members[c.rank], Kind: x.Kind, Seq: x.seq})
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
	c.mu.Lock()
	c.traffic.Record(x.Kind, x.Counts(c.rank, g.size()))
	c.mu.Unlock()
}

func (g *group) failedFault() *fault {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fault
}
