package nccl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/half"
)

// asyncEvery is how often a waiting completer asks NCCL for the
// communicator's asynchronous error.
const asyncEvery = 10 * time.Millisecond

// abortWait bounds how long a failed collective waits, after the abort,
// for its stream to pass it, so that nothing writes its buffers after its
// Wait returns.
const abortWait = 10 * time.Second

// worker issues the queued calls in order until the queue is closed.
func (c *Comm) worker() {
	defer close(c.workerDone)
	for {
		x, ok := c.queue.Next()
		if !ok {
			return
		}
		if f := c.faultNow(); f != nil {
			c.complete(x, f)
			continue
		}
		if x.kind == comm.KindSplit {
			c.drain()
			c.split(x)
			continue
		}
		if f := c.issue(x); f != nil {
			c.complete(x, f)
			continue
		}
		if x.issued != nil {
			close(x.issued)
			x.issuedClosed = true
		}
		c.mu.Lock()
		c.pending++
		c.mu.Unlock()
		c.inflight <- x
	}
}

// drain waits until every issued call has completed.
func (c *Comm) drain() {
	c.mu.Lock()
	for c.pending > 0 {
		c.idle.Wait()
	}
	c.mu.Unlock()
}

// rankFailed is the fault of this rank failing at x (a device error, a
// cancelled context): the job fails with it.
func (c *Comm) rankFailed(x *call, what string, err error) *commFault {
	f := &comm.FaultError{Msg: fmt.Sprintf("rank %d %s", c.members[c.rank], what), Kind: comm.ErrRankFailed, Cause: err}
	c.w.fail(c, x, f, []int{c.rank})
	return c.faultNow()
}

// issue stages x's host buffers and queues its NCCL calls and a marker on
// the stream; a fault stops it.
func (c *Comm) issue(x *call) *commFault {
	if x.host != nil {
		if err := c.prepare(x); err != nil {
			c.finishStaged(x, false)
			return c.rankFailed(x, "could not stage its buffers", err)
		}
	}
	if x.after != nil {
		if err := c.st.After(x.after); err != nil {
			c.finishStaged(x, false)
			return c.rankFailed(x, "could not order the collective after its input", err)
		}
	}
	c.hmu.Lock()
	h := c.h
	var err error
	if h != 0 {
		err = c.w.dev.Run(func() error { return c.launch(x, h) })
	}
	c.hmu.Unlock()
	if h == 0 {
		c.finishStaged(x, false)
		return c.faultNow()
	}
	if err == nil {
		err = c.settle(x.ctx, h, time.Now().Add(c.w.opts.Timeout))
	}
	if err == nil {
		err = c.returnStaged(x)
	}
	if err == nil {
		x.marker, err = c.st.Record()
	}
	if err == nil && x.issued != nil {
		x.kept, err = c.st.Record()
	}
	if err != nil {
		c.finishStaged(x, false)
		return c.rankFailed(x, fmt.Sprintf("could not issue %v #%d", x.kind, x.seq), err)
	}
	x.issuedAt = time.Now()
	c.mu.Lock()
	c.issued = x.seq + uint64(len(x.ops)) - 1
	c.mu.Unlock()
	return nil
}

// launch makes x's NCCL calls (inside Device.Run), as one group when
// there are several.
func (c *Comm) launch(x *call, h RawComm) error {
	lib := c.w.lib
	group := len(x.ops) > 1
	if group {
		if err := lib.GroupStart(); err != nil {
			return err
		}
	}
	var errs []error
	for _, o := range x.ops {
		if err := c.launchOp(o, h); err != nil && !Pending(err) {
			errs = append(errs, err)
			break
		}
	}
	if group {
		if err := lib.GroupEnd(); err != nil && !Pending(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Comm) launchOp(o op, h RawComm) error {
	lib, s, n := c.w.lib, c.st.Handle(), uint64(o.count)
	if n == 0 {
		return nil // NCCL discards empty collectives; its pointer checks need not see them
	}
	red, err := c.redOp(o, h)
	if err != nil {
		return err
	}
	switch o.kind {
	case comm.KindAllReduce:
		return lib.AllReduce(o.send, o.recv, n, o.dt, red, h, s)
	case comm.KindReduceScatter:
		return lib.ReduceScatter(o.send, o.recv, n, o.dt, red, h, s)
	case comm.KindAllGather:
		return lib.AllGather(o.send, o.recv, n, o.dt, h, s)
	case comm.KindBroadcast:
		return lib.Broadcast(o.send, o.recv, n, o.dt, o.root, h, s)
	}
	panic(fmt.Sprintf("nccl: launching a %v", o.kind))
}

// redOp is o's NCCL reduction; PreMulSum ops are made once per type.
func (c *Comm) redOp(o op, h RawComm) (RedOp, error) {
	switch o.red {
	case redAvg:
		return Avg, nil
	case redPreAvg:
		if r, ok := c.premul[o.dt]; ok {
			return r, nil
		}
		r, err := c.w.lib.RedOpCreatePreMulSum(scalarBytes(o.dt, 1/float32(c.Size())), o.dt, h)
		if err != nil {
			return 0, err
		}
		c.premul[o.dt] = r
		return r, nil
	}
	return Sum, nil
}

// scalarBytes is v as one little-endian value of dt.
func scalarBytes(dt DataType, v float32) []byte {
	switch dt {
	case Float16:
		b := half.F16FromF32(v)
		return []byte{byte(b), byte(b >> 8)}
	case BFloat16:
		b := half.BF16FromF32(v)
		return []byte{byte(b), byte(b >> 8)}
	}
	b := math.Float32bits(v)
	return []byte{byte(b), byte(b >> 8), byte(b >> 16), byte(b >> 24)}
}

// settle waits, after a call on a non-blocking communicator, until NCCL
// has finished with it (ncclCommGetAsyncError leaves ncclInProgress), as
// NCCL requires before the next call.
func (c *Comm) settle(ctx context.Context, h RawComm, deadline time.Time) error {
	p := newPoller()
	for {
		var st Result
		err := c.w.dev.Run(func() (err error) {
			st, err = c.w.lib.CommGetAsyncError(h)
			return err
		})
		switch {
		case err != nil:
			return err
		case st == Success:
			return nil
		case st != InProgress:
			return c.w.asyncError(st, h)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: NCCL did not finish a non-blocking call within %v", comm.ErrTimeout, c.w.opts.Timeout)
		}
		p.wait()
	}
}

// completer waits for each issued call in order and completes it.
func (c *Comm) completer() {
	defer close(c.completerDone)
	var last time.Time // when the previous call completed
	for x := range c.inflight {
		start := x.issuedAt
		if last.After(start) {
			start = last // its time starts when the one before it ends
		}
		f := c.await(x, start)
		c.complete(x, f)
		last = time.Now()
		c.mu.Lock()
		c.pending--
		if c.pending == 0 {
			c.idle.Broadcast()
		}
		c.mu.Unlock()
	}
}

// complete ends x: with f nil its results are handed back and its
// traffic counted; otherwise the communicator is aborted and x fails.
func (c *Comm) complete(x *call, f *commFault) {
	if f == nil {
		if err := c.finishStaged(x, true); err != nil {
			f = c.rankFailed(x, "could not copy the results back", err)
		}
	}
	if f == nil {
		if x.post != nil {
			x.post()
		}
		c.mu.Lock()
		for _, t := range x.tally {
			c.traffic.Record(t.kind, t.c)
		}
		if end := x.seq + uint64(len(x.tally)) - 1; end > c.finished {
			c.finished = end
		}
		c.mu.Unlock()
	} else {
		c.abort()
		if x.marker != nil {
			waitMarker(x.marker, abortWait)
		}
		c.finishStaged(x, false)
		x.err = c.errorFor(x, f)
	}
	if x.marker != nil {
		x.marker.Release()
		x.marker = nil
	}
	if x.issued != nil && !x.issuedClosed { // failed before it was queued
		if x.kept != nil {
			x.kept.Release()
			x.kept = nil
		}
		close(x.issued)
	}
	close(x.done)
}

// abort aborts the NCCL communicator, once: its work in flight stops.
func (c *Comm) abort() {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if h := c.h; h != 0 {
		c.h = 0
		c.w.dev.Run(func() error { return c.w.lib.CommAbort(h) })
	}
}

func waitMarker(m Marker, limit time.Duration) {
	deadline := time.Now().Add(limit)
	p := newPoller()
	for time.Now().Before(deadline) {
		if done, err := m.Done(); done || err != nil {
			return
		}
		p.wait()
	}
}

// await polls x until its marker is done, or until it fails: the
// communicator breaks (a notice from another rank, a failure on another
// communicator), NCCL reports an asynchronous error, the context ends, or
// the timeout passes.
func (c *Comm) await(x *call, start time.Time) *commFault {
	budget := c.w.opts.Timeout
	if d, ok := x.ctx.Deadline(); ok {
		budget = min(budget, d.Sub(start))
	}
	p := newPoller()
	lastAsync := time.Now()
	for {
		if f := c.faultNow(); f != nil {
			return f
		}
		done, err := x.marker.Done()
		if err != nil {
			return c.rankFailed(x, "lost its device", err)
		}
		if done {
			// A collective that failed also leaves the stream: only the
			// communicator's state tells.
			return c.checkAsync(x)
		}
		if now := time.Now(); now.Sub(lastAsync) >= asyncEvery {
			lastAsync = now
			if f := c.checkAsync(x); f != nil {
				return f
			}
		}
		if err := x.ctx.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return c.rankFailed(x, fmt.Sprintf("cancelled its %v #%d", x.kind, x.seq), context.Cause(x.ctx))
		}
		if time.Since(start) >= budget {
			return c.timedOut(x, budget)
		}
		p.wait()
	}
}

// checkAsync asks NCCL for the communicator's error. A failure NCCL sees
// is often a peer's (ncclRemoteError), so before blaming itself the rank
// reads the abort key, for up to two heartbeats.
func (c *Comm) checkAsync(x *call) *commFault {
	c.hmu.Lock()
	h := c.h
	var st Result
	var err error
	if h != 0 {
		err = c.w.dev.Run(func() (err error) {
			st, err = c.w.lib.CommGetAsyncError(h)
			return err
		})
		if err == nil && st != Success && st != InProgress {
			err = c.w.asyncError(st, h)
		}
	}
	c.hmu.Unlock()
	if err == nil {
		return nil
	}
	if c.w.mon != nil {
		// A failing rank writes its notice before it aborts, so the
		// notice is usually there already.
		deadline := time.Now().Add(2 * c.w.mon.every)
		for {
			c.w.mon.check()
			if f := c.faultNow(); f != nil {
				return f
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(c.w.mon.every / 10)
		}
	}
	msg := fmt.Sprintf("NCCL failed during %v #%d", x.kind, x.seq)
	var peers []int
	var ne *Error
	if errors.As(err, &ne) && ne.Code == RemoteError && c.w.mon != nil {
		// A peer's failure that sent no notice: the records may say which.
		if stragglers, ok := c.w.mon.stragglers(c, x.seq); ok && len(stragglers) > 0 {
			msg += " (a peer failed or left: " + comm.Missing(c.name, c.members, stragglers, false) + ")"
			for _, s := range stragglers {
				peers = append(peers, s.Rank)
			}
		}
	}
	f := &comm.FaultError{Msg: msg, Kind: comm.ErrRankFailed, Cause: err}
	c.w.fail(c, x, f, peers)
	return c.faultNow()
}

// timedOut is the fault of x's timeout, naming the ranks that did not
// arrive when the job's store can tell.
func (c *Comm) timedOut(x *call, budget time.Duration) *commFault {
	var f *comm.FaultError
	var peers []int
	var known bool
	if c.w.mon != nil {
		var stragglers []comm.Straggler
		if stragglers, known = c.w.mon.stragglers(c, x.seq); known {
			f = comm.TimedOut(budget, c.name, c.members, stragglers, false, nil)
			for _, s := range stragglers {
				peers = append(peers, s.Rank)
			}
		}
	}
	if !known && c.Size() == 1 {
		f, known = comm.TimedOut(budget, c.name, c.members, nil, false, nil), true
	}
	if !known {
		f = &comm.FaultError{Kind: comm.ErrTimeout, Msg: fmt.Sprintf("timed out after %v: which ranks did not arrive is unknown (NCCL cannot tell, and there is no job store to ask: start the job with torchrun or the deepspeed launcher)", budget)}
	}
	c.w.fail(c, x, f, peers)
	return c.faultNow()
}

// split runs a Split on the worker, with nothing else in flight: an
// all-gather of every rank's color and key (so each knows the members),
// then ncclCommSplit.
func (c *Comm) split(x *call) {
	deadline := time.Now().Add(c.w.opts.Timeout)
	n := c.Size()
	ck := make([]float32, 2*n) // color and key bit patterns, by rank
	ck[2*c.rank] = math.Float32frombits(uint32(int32(x.color)))
	ck[2*c.rank+1] = math.Float32frombits(uint32(int32(x.key)))
	out := comm.F32(ck)
	gather := &call{kind: comm.KindSplit, seq: x.seq, ctx: x.ctx,
		host: &comm.Args{Kind: comm.KindAllGather, Out: out, In: out.Slice(2*c.rank, 2*c.rank+2)}}
	if f := c.issue(gather); f != nil {
		c.complete(x, f)
		return
	}
	f := c.await(gather, gather.issuedAt)
	if f == nil {
		if err := c.finishStaged(gather, true); err != nil {
			f = c.rankFailed(x, "could not copy the split's colors back", err)
		}
	} else {
		c.abort()
		waitMarker(gather.marker, abortWait)
		c.finishStaged(gather, false)
	}
	gather.marker.Release()
	if f != nil {
		c.complete(x, f)
		return
	}
	type member struct{ key, rank int }
	var mine []member
	for r := range n {
		if col := int(int32(math.Float32bits(ck[2*r]))); col == x.color && col != comm.NoColor {
			mine = append(mine, member{int(int32(math.Float32bits(ck[2*r+1]))), r})
		}
	}
	slices.SortStableFunc(mine, func(a, b member) int {
		if a.key != b.key {
			return a.key - b.key
		}
		return a.rank - b.rank
	})
	color := x.color
	if color == comm.NoColor {
		color = NoColor
	}
	c.hmu.Lock()
	h := c.h
	var nh RawComm
	var err error
	if h != 0 {
		err = c.w.dev.Run(func() (err error) {
			nh, err = c.w.lib.CommSplit(h, color, x.key, Config{Blocking: false})
			return err
		})
	}
	c.hmu.Unlock()
	if h == 0 {
		c.complete(x, c.faultNow())
		return
	}
	if err == nil || Pending(err) {
		err = c.settle(x.ctx, h, deadline)
	}
	if err == nil && nh != 0 {
		err = c.w.ready(x.ctx, nh, deadline)
		if err != nil {
			nh = 0 // ready aborted it
		}
	}
	if err != nil {
		if nh != 0 {
			c.w.dev.Run(func() error { return c.w.lib.CommAbort(nh) })
		}
		c.complete(x, c.rankFailed(x, "could not split the communicator", err))
		return
	}
	if x.color != comm.NoColor {
		members := make([]int, len(mine))
		me := -1
		for i, m := range mine {
			members[i] = c.members[m.rank]
			if m.rank == c.rank {
				me = i
			}
		}
		id := fmt.Sprintf("%s/s%dc%d", c.id, x.seq, x.color)
		if x.split, err = c.w.newComm(nh, id, "group"+fmt.Sprint(members), members, me); err != nil {
			c.complete(x, c.rankFailed(x, "could not set up the new communicator", err))
			return
		}
	}
	c.complete(x, nil)
}
