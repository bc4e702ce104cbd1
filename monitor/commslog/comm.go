package commslog

import (
	"context"
	"sync"
	"time"

	"github.com/dszero/dszero/comm"
)

// Wrap returns a communicator that issues every collective on c and logs
// it to l when its first Wait returns: the op (AllReduce as all_reduce,
// ReduceScatter as reduce_scatter_tensor, AllGather as
// all_gather_into_tensor, Broadcast, Barrier), its message size as
// DeepSpeed measures it, and its latency from issue to that Wait — the
// time DeepSpeed's timed_op measures between issuing the op and
// synchronizing on it. ops, when not nil, are the only ops logged
// (comms_logger prof_all false with prof_ops). now is the clock.
//
// Sub-communicators (Split) are not wrapped: their ops run on fewer ranks
// than l's world, whose bandwidth formulas l applies.
func Wrap(c comm.Comm, l *Logger, ops []string, now func() time.Time) comm.Comm {
	w := &logged{Comm: c, l: l, now: now}
	if ops != nil {
		w.only = map[string]bool{}
		for _, o := range ops {
			w.only[o] = true
		}
	}
	return w
}

type logged struct {
	comm.Comm
	l    *Logger
	now  func() time.Time
	only map[string]bool // nil: every op
}

var _ comm.Comm = (*logged)(nil)

// timedHandle logs its collective at the first Wait.
type timedHandle struct {
	h    comm.Handle
	once sync.Once
	log  func()
}

func (t *timedHandle) Wait() error {
	err := t.h.Wait()
	t.once.Do(t.log)
	return err
}

func (w *logged) timed(op string, bytes int64, issue func() comm.Handle) comm.Handle {
	if w.only != nil && !w.only[op] {
		return issue()
	}
	t0 := w.now()
	h := issue()
	return &timedHandle{h: h, log: func() {
		// Append fails only for an unknown op; these are all known.
		_ = w.l.Append(op, "", bytes, w.now().Sub(t0))
	}}
}

func (w *logged) AllReduce(ctx context.Context, buf comm.Buffer, op comm.Op) comm.Handle {
	return w.timed(AllReduce, buf.Bytes(), func() comm.Handle { return w.Comm.AllReduce(ctx, buf, op) })
}

func (w *logged) ReduceScatter(ctx context.Context, out, in comm.Buffer, op comm.Op) comm.Handle {
	return w.timed(ReduceScatterTensor, in.Bytes(), func() comm.Handle { return w.Comm.ReduceScatter(ctx, out, in, op) })
}

func (w *logged) AllGather(ctx context.Context, out, in comm.Buffer) comm.Handle {
	return w.timed(AllGatherIntoTensor, in.Bytes(), func() comm.Handle { return w.Comm.AllGather(ctx, out, in) })
}

func (w *logged) Broadcast(ctx context.Context, buf comm.Buffer, root int) comm.Handle {
	return w.timed(Broadcast, buf.Bytes(), func() comm.Handle { return w.Comm.Broadcast(ctx, buf, root) })
}

func (w *logged) Barrier(ctx context.Context) comm.Handle {
	return w.timed(Barrier, 0, func() comm.Handle { return w.Comm.Barrier(ctx) })
}
