package fakenccl

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/comm/nccl"
	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
)

// Options configure a Net.
type Options struct {
	// Inject, when set, is asked before every collective on every rank
	// what to do instead of running it (from several goroutines at once).
	Inject func(Site) Fault
}

// Site is one collective on one rank.
type Site struct {
	WorldRank int
	Kind      comm.Kind // all_reduce, reduce_scatter, all_gather, broadcast
	N         int       // the n-th collective this rank ran on this communicator, from 1
}

// Fault is what Inject simulates.
type Fault struct {
	// Err, when not Success, fails the collective: the communicator's
	// asynchronous error becomes Err.
	Err nccl.Result
	// Hang makes the collective never complete, until the communicator
	// is aborted (a stuck kernel).
	Hang bool
}

// Net is a fake NCCL network shared by the ranks of one test.
type Net struct {
	opts Options

	mu      sync.Mutex
	next    uintptr
	worlds  map[nccl.UniqueID]*world
	comms   map[nccl.RawComm]*fcomm
	streams map[driver.Stream]*stream
	calls   map[string]int
}

// New is an empty network.
func New(opts Options) *Net {
	return &Net{opts: opts, worlds: map[nccl.UniqueID]*world{}, comms: map[nccl.RawComm]*fcomm{},
		streams: map[driver.Stream]*stream{}, calls: map[string]int{}}
}

// Rank is a new rank's library and device: one per rank, since a Lib
// keeps its rank's group state.
func (n *Net) Rank() (nccl.Lib, nccl.Device) {
	return &Lib{net: n}, &hostDevice{net: n}
}

// Calls is how often each NCCL function was called, over all ranks.
func (n *Net) Calls() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]int, len(n.calls))
	for k, v := range n.calls {
		out[k] = v
	}
	return out
}

// world is the ranks that joined one id: an inproc world whose rank
// goroutines hand out their communicators and wait to be released.
type world struct {
	n       int
	joined  []bool
	njoined int
	comms   []comm.Comm // by rank, set by the inproc goroutines
	ready   chan struct{}
	release []chan error // nil: destroyed; an error: aborted
	once    []sync.Once
	nready  int
}

func (n *Net) newWorld(size int) *world {
	w := &world{n: size, joined: make([]bool, size), comms: make([]comm.Comm, size), ready: make(chan struct{}),
		release: make([]chan error, size), once: make([]sync.Once, size)}
	for r := range w.release {
		w.release[r] = make(chan error, 1)
	}
	// inproc's own timeout is out of the way: package nccl's is under test.
	iw := inproc.New(size, inproc.Options{Timeout: 24 * time.Hour, Grace: time.Second})
	var mu sync.Mutex
	go iw.Run(func(c comm.Comm) error {
		mu.Lock()
		w.comms[c.Rank()] = c
		w.nready++
		if w.nready == size {
			close(w.ready)
		}
		mu.Unlock()
		return <-w.release[c.Rank()]
	})
	return w
}

// end releases rank r's inproc goroutine, once: err nil for a destroy,
// an error for an abort (which breaks every communicator of the rank).
func (w *world) end(r int, err error) {
	w.once[r].Do(func() { w.release[r] <- err })
}

// errAborted is the error an aborted rank's inproc goroutine returns.
var errAborted = errors.New("ncclCommAbort")

// fcomm is one rank's fake communicator.
type fcomm struct {
	net  *Net
	w    *world
	rank int // in the world
	sub  bool
	n    int // communicator size

	mu     sync.Mutex
	ic     comm.Comm   // nil until ready
	state  nccl.Result // Success, InProgress, or the error
	last   string
	dead   bool // aborted or destroyed
	ran    int  // collectives started, for Site.N
	ops    map[nccl.RedOp]preMul
	nextOp nccl.RedOp
	hang   chan struct{} // closed on abort
}

// preMul is a PreMulSum reduction: its scalar, widened.
type preMul struct {
	dt     nccl.DataType
	scalar float32
}

func (n *Net) register(f *fcomm) nccl.RawComm {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	h := nccl.RawComm(n.next)
	n.comms[h] = f
	return h
}

func (n *Net) count(fn string) {
	n.mu.Lock()
	n.calls[fn]++
	n.mu.Unlock()
}

// Lib is one rank's fake NCCL.
type Lib struct {
	net   *Net
	depth int      // GroupStart nesting
	group []func() // calls queued until GroupEnd
}

var _ nccl.Lib = (*Lib)(nil)

func fail(fn string, code nccl.Result, why string) error {
	return &nccl.Error{Func: fn, Code: code, Msg: code.String(), Last: why}
}

func (l *Lib) Version() int { return 22703 }

func (l *Lib) GetUniqueID() (nccl.UniqueID, error) {
	l.net.count("ncclGetUniqueId")
	var id nccl.UniqueID
	rand.Read(id[:])
	return id, nil
}

func (l *Lib) CommInitRank(nranks int, id nccl.UniqueID, rank int, cfg nccl.Config) (nccl.RawComm, error) {
	n := l.net
	n.count("ncclCommInitRankConfig")
	if nranks < 1 || rank < 0 || rank >= nranks {
		return 0, fail("ncclCommInitRankConfig", nccl.InvalidArgument, fmt.Sprintf("rank %d of %d", rank, nranks))
	}
	n.mu.Lock()
	w := n.worlds[id]
	if w == nil {
		w = n.newWorld(nranks)
		n.worlds[id] = w
	}
	switch {
	case w.n != nranks:
		n.mu.Unlock()
		return 0, fail("ncclCommInitRankConfig", nccl.InvalidUsage, fmt.Sprintf("nranks %d, but the id's communicator has %d", nranks, w.n))
	case w.joined[rank]:
		n.mu.Unlock()
		return 0, fail("ncclCommInitRankConfig", nccl.InvalidUsage, fmt.Sprintf("rank %d joined twice", rank))
	}
	w.joined[rank] = true
	w.njoined++
	n.mu.Unlock()
	f := &fcomm{net: n, w: w, rank: rank, n: nranks, state: nccl.InProgress, ops: map[nccl.RedOp]preMul{}, nextOp: 5, hang: make(chan struct{})}
	h := n.register(f)
	go func() {
		<-w.ready
		f.mu.Lock()
		f.ic = w.comms[rank]
		f.mu.Unlock()
	}()
	if cfg.Blocking {
		for {
			if st, _ := l.CommGetAsyncError(h); st != nccl.InProgress {
				break
			}
			time.Sleep(time.Millisecond)
		}
		return h, nil
	}
	return h, fail("ncclCommInitRankConfig", nccl.InProgress, "")
}

func (l *Lib) comm(fn string, h nccl.RawComm) (*fcomm, error) {
	l.net.mu.Lock()
	f := l.net.comms[h]
	l.net.mu.Unlock()
	if f == nil {
		return nil, fail(fn, nccl.InvalidArgument, fmt.Sprintf("unknown communicator %#x", uintptr(h)))
	}
	f.mu.Lock()
	dead := f.dead
	f.mu.Unlock()
	if dead {
		return nil, fail(fn, nccl.InvalidArgument, "the communicator was aborted or destroyed")
	}
	return f, nil
}

func (l *Lib) CommGetAsyncError(h nccl.RawComm) (nccl.Result, error) {
	f, err := l.comm("ncclCommGetAsyncError", h)
	if err != nil {
		return 0, err
	}
	l.net.mu.Lock()
	joined := f.w.njoined == f.w.n
	l.net.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == nccl.InProgress && !f.sub && joined && f.ic != nil {
		f.state = nccl.Success
	}
	return f.state, nil
}

func (l *Lib) CommSplit(h nccl.RawComm, color, key int, cfg nccl.Config) (nccl.RawComm, error) {
	l.net.count("ncclCommSplit")
	p, err := l.comm("ncclCommSplit", h)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	if p.state != nccl.Success {
		p.mu.Unlock()
		return 0, fail("ncclCommSplit", nccl.InvalidUsage, fmt.Sprintf("the parent communicator is in state %v", p.state))
	}
	p.state = nccl.InProgress
	pic := p.ic
	p.mu.Unlock()
	var child *fcomm
	var ch nccl.RawComm
	if color != nccl.NoColor {
		child = &fcomm{net: l.net, w: p.w, rank: p.rank, sub: true, state: nccl.InProgress, ops: map[nccl.RedOp]preMul{}, nextOp: 5, hang: make(chan struct{})}
		ch = l.net.register(child)
	}
	c := color
	if color == nccl.NoColor {
		c = comm.NoColor
	}
	go func() {
		sub, err := pic.Split(context.Background(), c, key)
		if child != nil {
			child.mu.Lock()
			if err != nil {
				child.state, child.last = nccl.RemoteError, err.Error()
			} else {
				child.ic, child.n, child.state = sub, sub.Size(), nccl.Success
			}
			child.mu.Unlock()
		}
		p.mu.Lock()
		if p.state == nccl.InProgress {
			p.state = nccl.Success
			if err != nil {
				p.state, p.last = nccl.RemoteError, err.Error()
			}
		}
		p.mu.Unlock()
	}()
	return ch, fail("ncclCommSplit", nccl.InProgress, "")
}

func (l *Lib) CommDestroy(h nccl.RawComm) error {
	l.net.count("ncclCommDestroy")
	f, err := l.comm("ncclCommDestroy", h)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.dead = true
	f.mu.Unlock()
	if !f.sub {
		f.w.end(f.rank, nil)
	}
	return nil
}

func (l *Lib) CommAbort(h nccl.RawComm) error {
	l.net.count("ncclCommAbort")
	l.net.mu.Lock()
	f := l.net.comms[h]
	l.net.mu.Unlock()
	if f == nil {
		return fail("ncclCommAbort", nccl.InvalidArgument, "unknown communicator")
	}
	f.mu.Lock()
	if !f.dead {
		f.dead = true
		close(f.hang)
	}
	f.mu.Unlock()
	f.w.end(f.rank, errAborted)
	return nil
}

func (l *Lib) GroupStart() error {
	l.net.count("ncclGroupStart")
	l.depth++
	return nil
}

func (l *Lib) GroupEnd() error {
	l.net.count("ncclGroupEnd")
	if l.depth == 0 {
		return fail("ncclGroupEnd", nccl.InvalidUsage, "ncclGroupEnd without ncclGroupStart")
	}
	l.depth--
	if l.depth == 0 {
		for _, q := range l.group {
			q()
		}
		l.group = nil
	}
	return nil
}

func (l *Lib) RedOpCreatePreMulSum(scalar []byte, dt nccl.DataType, h nccl.RawComm) (nccl.RedOp, error) {
	l.net.count("ncclRedOpCreatePreMulSum")
	f, err := l.comm("ncclRedOpCreatePreMulSum", h)
	if err != nil {
		return 0, err
	}
	if len(scalar) != dt.Size() {
		return 0, fail("ncclRedOpCreatePreMulSum", nccl.InvalidArgument, "scalar of the wrong size")
	}
	var v float32
	switch dt {
	case nccl.Float32:
		v = math.Float32frombits(uint32(scalar[0]) | uint32(scalar[1])<<8 | uint32(scalar[2])<<16 | uint32(scalar[3])<<24)
	case nccl.Float16:
		v = half.F32FromF16(uint16(scalar[0]) | uint16(scalar[1])<<8)
	case nccl.BFloat16:
		v = half.F32FromBF16(uint16(scalar[0]) | uint16(scalar[1])<<8)
	default:
		return 0, fail("ncclRedOpCreatePreMulSum", nccl.InvalidArgument, "unsupported type")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	op := f.nextOp
	f.nextOp++
	f.ops[op] = preMul{dt: dt, scalar: v}
	return op, nil
}

func (l *Lib) RedOpDestroy(op nccl.RedOp, h nccl.RawComm) error {
	l.net.count("ncclRedOpDestroy")
	f, err := l.comm("ncclRedOpDestroy", h)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.ops[op]; !ok {
		return fail("ncclRedOpDestroy", nccl.InvalidArgument, fmt.Sprintf("unknown reduction %d", op))
	}
	delete(f.ops, op)
	return nil
}

func (l *Lib) ErrorString(r nccl.Result) string { return "fake " + r.String() }

func (l *Lib) LastError(h nccl.RawComm) string {
	l.net.mu.Lock()
	f := l.net.comms[h]
	l.net.mu.Unlock()
	if f == nil {
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// The collectives.

func (l *Lib) AllReduce(send, recv driver.DevicePtr, count uint64, dt nccl.DataType, op nccl.RedOp, h nccl.RawComm, s driver.Stream) error {
	return l.collective("ncclAllReduce", comm.KindAllReduce, h, s, dt, op, func(f *fcomm, red reduce) error {
		out := view(recv, int(count), dt)
		copyIf(out, view(send, int(count), dt))
		if red.scale {
			scale(out, out, red.scalar)
		}
		return f.ic.AllReduce(context.Background(), out, comm.Sum).Wait()
	})
}

func (l *Lib) ReduceScatter(send, recv driver.DevicePtr, count uint64, dt nccl.DataType, op nccl.RedOp, h nccl.RawComm, s driver.Stream) error {
	return l.collective("ncclReduceScatter", comm.KindReduceScatter, h, s, dt, op, func(f *fcomm, red reduce) error {
		in, out := view(send, f.n*int(count), dt), view(recv, int(count), dt)
		if red.scale {
			tmp := scratch(in)
			scale(tmp, in, red.scalar)
			in = tmp
		}
		return f.ic.ReduceScatter(context.Background(), out, in, comm.Sum).Wait()
	})
}

func (l *Lib) AllGather(send, recv driver.DevicePtr, count uint64, dt nccl.DataType, h nccl.RawComm, s driver.Stream) error {
	return l.collective("ncclAllGather", comm.KindAllGather, h, s, dt, nccl.Sum, func(f *fcomm, _ reduce) error {
		return f.ic.AllGather(context.Background(), view(recv, f.n*int(count), dt), view(send, int(count), dt)).Wait()
	})
}

func (l *Lib) Broadcast(send, recv driver.DevicePtr, count uint64, dt nccl.DataType, root int, h nccl.RawComm, s driver.Stream) error {
	return l.collective("ncclBroadcast", comm.KindBroadcast, h, s, dt, nccl.Sum, func(f *fcomm, _ reduce) error {
		if root < 0 || root >= f.n {
			return fmt.Errorf("root %d of %d", root, f.n)
		}
		out := view(recv, int(count), dt)
		if f.ic.Rank() == root {
			copyIf(out, view(send, int(count), dt))
		}
		return f.ic.Broadcast(context.Background(), out, root).Wait()
	})
}

// reduce is a resolved reduction: a plain sum, or a sum of scaled inputs.
type reduce struct {
	scale  bool
	scalar float32
}

// collective checks a call and queues run on its stream (at GroupEnd
// inside a group).
func (l *Lib) collective(fn string, kind comm.Kind, h nccl.RawComm, s driver.Stream, dt nccl.DataType, op nccl.RedOp, run func(*fcomm, reduce) error) error {
	n := l.net
	n.count(fn)
	f, err := l.comm(fn, h)
	if err != nil {
		return err
	}
	n.mu.Lock()
	st := n.streams[s]
	n.mu.Unlock()
	if st == nil {
		return fail(fn, nccl.InvalidArgument, fmt.Sprintf("unknown stream %#x", uintptr(s)))
	}
	if dt != nccl.Float32 && dt != nccl.Float16 && dt != nccl.BFloat16 {
		return fail(fn, nccl.InvalidArgument, fmt.Sprintf("unsupported type %v", dt))
	}
	f.mu.Lock()
	if f.state != nccl.Success {
		f.mu.Unlock()
		return fail(fn, nccl.InvalidUsage, fmt.Sprintf("the communicator is in state %v", f.state))
	}
	var red reduce
	switch {
	case op == nccl.Sum:
	case op == nccl.Avg:
		red = reduce{scale: true, scalar: roundTo(dt, 1/float32(f.n))}
	default:
		pm, ok := f.ops[op]
		if !ok || pm.dt != dt {
			f.mu.Unlock()
			return fail(fn, nccl.InvalidArgument, fmt.Sprintf("unknown reduction %d for %v", op, dt))
		}
		red = reduce{scale: true, scalar: pm.scalar}
	}
	f.mu.Unlock()
	queue := func() {
		st.push(func() { f.execute(kind, red, run) })
	}
	if l.depth > 0 {
		l.group = append(l.group, queue)
		return nil
	}
	queue()
	return nil
}

// execute runs one collective on its stream.
func (f *fcomm) execute(kind comm.Kind, red reduce, run func(*fcomm, reduce) error) {
	f.mu.Lock()
	f.ran++
	site := Site{WorldRank: f.rank, Kind: kind, N: f.ran}
	broken := f.state != nccl.Success || f.dead
	f.mu.Unlock()
	if broken {
		return // an aborted communicator runs nothing
	}
	if inject := f.net.opts.Inject; inject != nil {
		ft := inject(site)
		if ft.Hang {
			<-f.hang
			return
		}
		if ft.Err != nccl.Success {
			f.setError(ft.Err, fmt.Sprintf("injected %v in %v #%d", ft.Err, kind, site.N))
			return
		}
	}
	err := run(f, red)
	if errors.Is(err, comm.ErrRankExited) {
		// A peer destroyed its communicator and left: NCCL's peers are
		// not told, their kernels wait for it (as over NVLink and shared
		// memory) until they are aborted.
		<-f.hang
		return
	}
	if err != nil {
		f.setError(nccl.RemoteError, err.Error())
	}
}

func (f *fcomm) setError(r nccl.Result, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == nccl.Success {
		f.state, f.last = r, msg
	}
}

// view is n elements of dt at a fake device address (a host address).
func view(p driver.DevicePtr, n int, dt nccl.DataType) comm.Buffer {
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(&p)) // reinterpreted: not pointer arithmetic
	if n == 0 || ptr == nil {
		ptr, n = nil, 0
	}
	switch dt {
	case nccl.Float32:
		return comm.F32(unsafe.Slice((*float32)(ptr), n))
	case nccl.Float16:
		return comm.F16(unsafe.Slice((*uint16)(ptr), n))
	}
	return comm.BF16(unsafe.Slice((*uint16)(ptr), n))
}

// copyIf copies src into dst unless they are the same memory.
func copyIf(dst, src comm.Buffer) {
	if !comm.Same(dst, src) {
		comm.Copy(dst, src)
	}
}

// scratch is a new buffer of b's dtype and length.
func scratch(b comm.Buffer) comm.Buffer {
	switch b.DType() {
	case device.F16:
		return comm.F16(make([]uint16, b.Len()))
	case device.BF16:
		return comm.BF16(make([]uint16, b.Len()))
	}
	return comm.F32(make([]float32, b.Len()))
}

// scale sets dst = src·s, in float32, rounded to the dtype (NCCL's
// PreMulSum: a 16-bit product is rounded to 16 bits).
func scale(dst, src comm.Buffer, s float32) {
	switch src.DType() {
	case device.F32:
		d, x := dst.F32(), src.F32()
		for i, v := range x {
			d[i] = v * s
		}
	case device.F16:
		d, x := dst.Bits(), src.Bits()
		for i, v := range x {
			d[i] = half.F16FromF32(half.F32FromF16(v) * s)
		}
	case device.BF16:
		d, x := dst.Bits(), src.Bits()
		for i, v := range x {
			d[i] = half.BF16FromF32(half.F32FromBF16(v) * s)
		}
	}
}

// roundTo is v rounded to dt.
func roundTo(dt nccl.DataType, v float32) float32 {
	switch dt {
	case nccl.Float16:
		return half.NearestF16(v)
	case nccl.BFloat16:
		return half.NearestBF16(v)
	}
	return v
}
