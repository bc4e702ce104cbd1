package nccl

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/device"
)

// Comm is one rank's handle on one NCCL communicator. It implements
// comm.Comm for host buffers (staged through device memory, see host.go)
// and Group for device memory. Its collectives run on its own stream: a
// worker goroutine issues them in order, a completer goroutine waits for
// each, in order, within the timeout.
type Comm struct {
	// The five data collectives, over issueHost. A barrier is an
	// all-reduce of one float32, as torch's NCCL barrier.
	comm.Issuer

	w       *World
	st      Stream
	id      string // the same on every member: "world", "world/s3c1", …
	name    string // for messages: "world", or "group[…]" with world ranks
	members []int  // world ranks, by rank
	rank    int

	hmu sync.Mutex // guards h: held while issuing and while aborting
	h   RawComm    // 0 once aborted or destroyed

	mu       sync.Mutex
	queue    comm.Queue[*call] // guarded by mu
	traffic  comm.Traffic
	issued   uint64     // last sequence number handed to NCCL
	finished uint64     // last completed
	pending  int        // calls issued and not yet completed
	idle     *sync.Cond // signalled when pending drops to 0
	fault    *commFault
	aborted  bool

	premul                    map[DataType]RedOp // PreMulSum ops by type (worker only)
	inflight                  chan *call
	workerDone, completerDone chan struct{}
}

var _ comm.Comm = (*Comm)(nil)

// commFault is a broken communicator's cause and the ranks at fault.
type commFault struct {
	f     *comm.FaultError
	peers []int // ranks of this communicator
}

// maxInflight bounds the collectives issued to NCCL and not yet complete
// on one communicator; the worker waits beyond it.
const maxInflight = 64

func newComm(w *World, h RawComm, st Stream, id, name string, members []int, rank int) *Comm {
	c := &Comm{w: w, h: h, st: st, id: id, name: name, members: members, rank: rank,
		premul: map[DataType]RedOp{}, inflight: make(chan *call, maxInflight),
		workerDone: make(chan struct{}), completerDone: make(chan struct{})}
	c.Issuer = comm.Issuer{Issue: c.issueHost}
	c.queue.Init(&c.mu)
	c.idle = sync.NewCond(&c.mu)
	go c.worker()
	go c.completer()
	return c
}

// call is one queued collective (or group of them) and its comm.Handle.
type call struct {
	kind  comm.Kind // of the first collective
	seq   uint64    // the first's sequence number
	ctx   context.Context
	tally []tally    // what each collective adds to the traffic
	host  *comm.Args // host buffers, staged by prepare into ops; nil for Group
	ops   []op       // what is issued to NCCL
	// after: a marker the collectives wait for (Group's).
	after Marker
	// split's
	color, key int
	split      *Comm

	// set by the worker
	staged   []Staged
	back     []span // what comes back after the collective
	post     func() // after success: Avg's division of host results
	marker   Marker
	issuedAt time.Time

	// issued, for Group's calls, is closed once the worker has queued
	// the call (or failed it); kept is then a second marker at its end,
	// for the caller.
	issued       chan struct{}
	issuedClosed bool // worker, then completer: never at once
	kept         Marker

	done chan struct{}
	err  error
}

func (x *call) Wait() error {
	<-x.done
	return x.err
}

// tally is one collective's traffic.
type tally struct {
	kind comm.Kind
	c    comm.Counts
}

// op is one NCCL collective on device memory.
type op struct {
	kind       comm.Kind
	dt         DataType
	send, recv driver.DevicePtr
	count      int // all_reduce, broadcast: the buffer; reduce_scatter: recv; all_gather: send
	red        reduction
	root       int
}

// reduction is how an op reduces: a built-in NCCL op, or PreMulSum by
// 1/Size.
type reduction int

const (
	redSum    reduction = iota
	redAvg              // ncclAvg
	redPreAvg           // ncclRedOpCreatePreMulSum with 1/Size
)

func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return len(c.members) }

// Members is the world ranks of the communicator, by rank.
func (c *Comm) Members() []int { return append([]int(nil), c.members...) }

func (c *Comm) Traffic() comm.Traffic {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.traffic
}

func (c *Comm) progress() commProgress {
	c.mu.Lock()
	defer c.mu.Unlock()
	return commProgress{Issued: c.issued, Finished: c.finished}
}

// Split makes sub-communicators with ncclCommSplit (see comm.Comm). The
// ranks first all-gather their colors and keys on c, so that every member
// knows the new communicator's world ranks, which its errors name.
func (c *Comm) Split(ctx context.Context, color, key int) (comm.Comm, error) {
	if color < comm.NoColor {
		panic(fmt.Sprintf("nccl: Split with color %d (want ≥ 0 or NoColor)", color))
	}
	x := &call{kind: comm.KindSplit, ctx: ctx, color: color, key: key,
		tally: []tally{{comm.KindSplit, comm.Args{Kind: comm.KindSplit}.Counts(c.rank, c.Size())}}}
	if err := c.enqueue(x, 1).Wait(); err != nil {
		return nil, err
	}
	if x.split == nil {
		return nil, nil
	}
	return x.split, nil
}

func (c *Comm) issueHost(ctx context.Context, a comm.Args) comm.Handle {
	a.Check("nccl", c.rank, c.Size())
	return c.enqueue(&call{kind: a.Kind, ctx: ctx, host: &a, tally: []tally{{a.Kind, a.Counts(c.rank, c.Size())}}}, 1)
}

// DeviceOp is one collective on device memory, for Group. Send and Recv
// follow NCCL: for all_reduce and broadcast both hold Count elements (the
// same address for in place); reduce_scatter reads Size()·Count from Send
// and writes Count to Recv; all_gather reads Count from Send and writes
// Size()·Count to Recv (Send = Recv + Rank()·Count·size in place).
//
// Op: Sum is ncclSum, Avg is ncclAvg and PreAvg is
// ncclRedOpCreatePreMulSum with 1/Size. Unlike the host path, NCCL's
// own averages are used as they are (see the package documentation on
// what that means for the bits).
type DeviceOp struct {
	Kind       comm.Kind // all_reduce, reduce_scatter, all_gather or broadcast
	DType      device.DType
	Send, Recv driver.DevicePtr
	Count      int
	Op         comm.Op
	Root       int
}

// Group issues ops as one NCCL group (ncclGroupStart … ncclGroupEnd; a
// single op is issued alone) on the communicator's stream, after the work
// that after marks (nil: none) — a compute stream's event, see
// EventMarker. The ops take consecutive sequence numbers; the Handle
// completes when all have, and errors name the first. Done of the
// returned *Grouped is a marker at the group's end, for a consumer
// stream to wait for.
func (c *Comm) Group(ctx context.Context, after Marker, ops ...DeviceOp) *Grouped {
	if len(ops) == 0 {
		panic("nccl: Group of no collectives")
	}
	x := &call{kind: ops[0].Kind, ctx: ctx, after: after, issued: make(chan struct{})}
	for _, o := range ops {
		d := c.deviceOp(o)
		x.ops = append(x.ops, d)
		x.tally = append(x.tally, tally{o.Kind, d.counts(c.rank, c.Size())})
	}
	return &Grouped{x: x, h: c.enqueue(x, uint64(len(ops)))}
}

func (c *Comm) deviceOp(o DeviceOp) op {
	n := c.Size()
	switch o.Kind {
	case comm.KindAllReduce, comm.KindReduceScatter, comm.KindAllGather, comm.KindBroadcast:
	default:
		panic(fmt.Sprintf("nccl: Group of a %v", o.Kind))
	}
	if o.Count < 0 || !o.DType.Valid() || (o.Kind == comm.KindBroadcast && (o.Root < 0 || o.Root >= n)) {
		panic(fmt.Sprintf("nccl: Group op %+v in a communicator of %d", o, n))
	}
	red := redSum
	switch o.Op {
	case comm.Avg:
		red = redAvg
	case comm.PreAvg:
		red = redPreAvg
	}
	return op{kind: o.Kind, dt: DataTypeOf(o.DType), send: o.Send, recv: o.Recv, count: o.Count, red: red, root: o.Root}
}

// counts is the traffic of o, by comm.NominalTraffic of its payload (the
// input of reduce_scatter, the output of the others).
func (o op) counts(rank, size int) comm.Counts {
	b := int64(o.count) * int64(o.dt.Size())
	if o.kind == comm.KindReduceScatter || o.kind == comm.KindAllGather {
		b *= int64(size)
	}
	c := comm.Counts{Calls: 1, Bytes: b}
	c.Sent, c.Received = comm.NominalTraffic(o.kind, size, rank, o.root, b)
	return c
}

// Grouped is a Group in flight.
type Grouped struct {
	x *call
	h comm.Handle
}

// Wait waits for the group's collectives.
func (g *Grouped) Wait() error { return g.h.Wait() }

// Issued waits until the group has been queued on the communicator's
// stream and returns a marker at its end there, for a consumer stream to
// wait for (Stream.After, or on a GPU the event EventOf gives): the
// consumer then overlaps with the group instead of waiting on the host.
// The caller releases the marker. A group that failed before it was
// queued returns its error.
func (g *Grouped) Issued() (Marker, error) {
	<-g.x.issued
	if g.x.kept == nil {
		return nil, g.Wait()
	}
	return g.x.kept, nil
}

// enqueue numbers x (n sequence numbers) and queues it for the worker.
func (c *Comm) enqueue(x *call, n uint64) comm.Handle {
	if x.ctx == nil {
		x.ctx = context.Background()
	}
	x.done = make(chan struct{})
	c.mu.Lock()
	defer c.mu.Unlock()
	seq, closed := c.queue.NumberLocked()
	for range n - 1 {
		c.queue.NumberLocked()
	}
	x.seq = seq
	if closed {
		return comm.Done(c.errorFor(x, &commFault{f: &comm.FaultError{Msg: "the communicator was used after World.Close", Kind: comm.ErrClosed}, peers: []int{c.rank}}))
	}
	c.queue.PushLocked(x)
	return x
}

func (c *Comm) errorFor(x *call, f *commFault) error {
	return &comm.Error{Group: c.name, Kind: x.kind, Seq: x.seq, Rank: c.rank, Size: c.Size(), Peers: f.peers, Err: f.f}
}

// faultNow is the communicator's failure, or nil.
func (c *Comm) faultNow() *commFault {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fault
}

// breakWith breaks c with f, naming worldPeers that are members of c (in
// c's ranks); the first fault wins.
func (c *Comm) breakWith(f *comm.FaultError, worldPeers []int) {
	var peers []int
	for _, wp := range worldPeers {
		for r, m := range c.members {
			if m == wp {
				peers = append(peers, r)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fault == nil {
		c.fault = &commFault{f: f, peers: peers}
	}
}

// close lets the queued collectives finish, stops the goroutines and
// destroys the NCCL communicator (or leaves it aborted).
func (c *Comm) close() error {
	c.queue.Close()
	<-c.workerDone
	close(c.inflight)
	<-c.completerDone
	var err error
	if c.faultNow() != nil {
		c.abort() // a failed job's communicator: destroying it could wait for peers
	}
	c.hmu.Lock()
	if h := c.h; h != 0 {
		c.h = 0
		err = c.w.dev.Run(func() error {
			for _, o := range c.premul {
				c.w.lib.RedOpDestroy(o, h)
			}
			return c.w.lib.CommDestroy(h)
		})
	}
	c.hmu.Unlock()
	if serr := c.st.Destroy(); err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("nccl: closing communicator %s: %w", c.name, err)
	}
	return nil
}
