package checkpoint

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero"
)

// Asynchronous saves (DeepSpeed's "decoupled" checkpointing). SaveAsync
// snapshots the rank's state into host memory — a copy of its fp32
// partitions and optimizer state (ExportState) and, at stages 0–2, of its
// working parameters — and writes its files from the snapshot in a
// goroutine while training goes on. Only the writing is in the
// background: every collective of the save runs on the caller's
// goroutine, between steps, in the same order on every rank (preparing
// the directory before the snapshot, agreeing that every rank's files are
// written, publishing), so the background never shares the communicator
// with a step. Poll, called by every rank after every step, finishes the
// save once every rank's write is done; Wait finishes it now. DIR/latest
// names the checkpoint only when it is finished: a crash before leaves
// the previous one, as a synchronous save does. The snapshot costs the
// model states' size in host memory (accounted as temporaries in
// mem.PinnedHost); the synchronous save, which copies nothing, stays the
// default.

// Pending is an asynchronous save in progress.
type Pending struct {
	final, tmp, dir, tag string
	sy                   syncer
	rank                 int
	acct                 *mem.Accountant
	snapBytes            int64
	done                 chan struct{}
	err                  error // the write's, once done is closed
	finished             bool
}

// SaveAsync starts saving the engine's state as checkpoint dir/tag (tag ""
// means global_step{N}); see the comment above. Every rank calls it. It
// returns once the state is snapshotted: the engine may step; the save is
// finished by Poll or Wait, which every rank must then call.
func SaveAsync(dir, tag string, e *zero.Engine, o Options) (*Pending, error) {
	if tag == "" {
		tag = Tag(e.GlobalSteps())
	}
	if err := checkTag(tag); err != nil {
		return nil, err
	}
	p := &Pending{dir: dir, tag: tag, final: filepath.Join(dir, tag), tmp: filepath.Join(dir, "."+tag+".tmp"),
		sy: newSyncer(o), acct: o.Acct, done: make(chan struct{})}
	if o.Comm != nil {
		p.rank = o.Comm.Rank()
	}
	var err error
	if p.rank == 0 {
		err = prepare(dir, p.final, p.tmp)
	}
	if err = p.sy.agree(err, "prepare the directory "+p.tmp+" for checkpoint "+p.final); err != nil {
		return nil, err
	}
	v, err := p.snapshot(e)
	if err = p.sy.agree(err, "snapshot its state for checkpoint "+p.final); err != nil {
		p.release()
		return nil, err
	}
	o.Acct = nil // the write's scratch is the background's, not the step's
	go func() {
		defer close(p.done)
		p.err = saveRank(p.tmp, e, v, o, p.rank)
	}()
	return p, nil
}

// snapshot copies the rank's state into host memory, accounted.
func (p *Pending) snapshot(e *zero.Engine) (view, error) {
	st, err := e.ExportState()
	if err != nil {
		return view{}, fmt.Errorf("checkpoint: rank %d: %w", p.rank, err)
	}
	var work []float32
	if st.Strategy.Stage < 3 {
		w, _ := e.ModelBuffers()
		work = append([]float32(nil), w...)
	}
	n := int64(4 * len(work))
	for _, g := range st.Strategy.Groups {
		n += int64(4 * len(g.Master))
		for _, v := range g.Optim.State {
			n += int64(4 * len(v))
		}
	}
	if p.acct != nil {
		if err := p.acct.Reserve(mem.Temp, mem.PinnedHost, n); err != nil {
			return view{}, fmt.Errorf("checkpoint: rank %d: the snapshot of an asynchronous save (%s): %w", p.rank, mem.FormatBytes(n), err)
		}
		p.snapBytes = n
	}
	return view{st: st, work: work}, nil
}

func (p *Pending) release() {
	if p.acct != nil && p.snapBytes > 0 {
		p.acct.Release(mem.Temp, mem.PinnedHost, p.snapBytes)
		p.snapBytes = 0
	}
}

// Path is the checkpoint's directory, dir/tag.
func (p *Pending) Path() string { return p.final }

// Poll finishes the save if every rank's write is done, and says whether
// it did. Every rank calls it at the same points (after each step): it is
// a collective. A write that failed is an error naming the checkpoint, on
// every rank.
func (p *Pending) Poll() (bool, error) {
	if p.finished {
		return true, nil
	}
	mine := float32(0)
	select {
	case <-p.done:
		mine = 1
	default:
	}
	if p.sy.c != nil && p.sy.c.Size() > 1 {
		flag := []float32{mine}
		if err := p.sy.c.AllReduce(p.sy.ctx, comm.F32(flag), comm.Sum).Wait(); err != nil {
			return false, fmt.Errorf("checkpoint %s: asking whether every rank's asynchronous write is done: %w", p.final, err)
		}
		if int(flag[0]) < p.sy.c.Size() {
			return false, nil
		}
	} else if mine == 0 {
		return false, nil
	}
	return true, p.finish()
}

// Wait waits for the rank's write and finishes the save (a collective).
func (p *Pending) Wait() error {
	if p.finished {
		return nil
	}
	<-p.done
	return p.finish()
}

// Abandon waits for the rank's write without finishing the save (no
// collective): for a rank that is stopping on an error. The checkpoint is
// not published; its temporary directory stays until the next save.
func (p *Pending) Abandon() {
	if !p.finished {
		<-p.done
		p.finished = true
		p.release()
	}
}

// finish agrees that every rank's files are written, then publishes.
func (p *Pending) finish() error {
	p.finished = true
	p.release()
	err := p.sy.agree(p.err, "write its files of checkpoint "+p.final)
	if err == nil {
		if p.rank == 0 {
			err = publish(p.dir, p.tag, p.final, p.tmp)
		}
		err = p.sy.agree(err, "publish checkpoint "+p.final)
	}
	if err != nil {
		return fmt.Errorf("asynchronous save of checkpoint %s: %w", p.final, err)
	}
	return nil
}

func newSyncer(o Options) syncer {
	sy := syncer{c: o.Comm, ctx: o.Ctx}
	if sy.ctx == nil {
		sy.ctx = context.Background()
	}
	return sy
}
