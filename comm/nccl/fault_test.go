package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/nccl"
	"github.com/dszero/dszero/comm/nccl/fakenccl"
)

// The failure tests: a collective that cannot complete fails every live
// rank within the timeout, with a *comm.Error naming the collective, its
// sequence number and the ranks at fault. The timeouts are short; what is
// checked is the error, never how long it took.

// want is what one rank's error must be.
type want struct {
	kind  error    // comm.ErrTimeout, comm.ErrRankFailed
	seq   uint64   // the collective's sequence number
	peers []int    // the ranks at fault
	msg   []string // parts of the message
}

func check(t *testing.T, rank int, err error, w want) {
	t.Helper()
	t.Logf("rank %d: %v", rank, err)
	var ce *comm.Error
	if !errors.As(err, &ce) {
		t.Errorf("rank %d: %v, want a *comm.Error", rank, err)
		return
	}
	if !errors.Is(err, w.kind) {
		t.Errorf("rank %d: %v, want it to wrap %v", rank, err, w.kind)
	}
	if ce.Seq != w.seq {
		t.Errorf("rank %d: error names collective #%d, want #%d: %v", rank, ce.Seq, w.seq, err)
	}
	if d := cmp.Diff(w.peers, ce.Peers, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("rank %d: peers (-want +got):\n%s\n%v", rank, d, err)
	}
	for _, m := range w.msg {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("rank %d: %v\nwant it to contain %q", rank, err, m)
		}
	}
}

// first is every rank's barrier, #1: each rank's progress then shows it.
func first(w *nccl.World) error { return w.Comm().Barrier(context.Background()).Wait() }

func TestTimeoutNamesTheRankThatDidNotArrive(t *testing.T) {
	j := &job{n: 3, timeout: time.Second, heartbeat: 50 * time.Millisecond}
	var failed sync.WaitGroup // ranks 0 and 1
	failed.Add(2)
	errs := j.run(t, func(w *nccl.World) error {
		if err := first(w); err != nil {
			return err
		}
		ctx := context.Background()
		if w.Rank() == 2 {
			// Busy elsewhere until the others have failed, then too late:
			// its next collective fails, naming itself.
			failed.Wait()
			return w.Comm().AllReduce(ctx, comm.F32(make([]float32, 4)), comm.Sum).Wait()
		}
		defer failed.Done()
		return w.Comm().AllReduce(ctx, comm.F32(make([]float32, 4)), comm.Sum).Wait()
	})
	for r := range 2 {
		check(t, r, errs[r], want{kind: comm.ErrTimeout, seq: 2, peers: []int{2},
			msg: []string{"all_reduce #2 on world", "rank 2 did not arrive (busy: its last collective here is #1)"}})
	}
	check(t, 2, errs[2], want{kind: comm.ErrTimeout, seq: 2, peers: []int{2}, msg: []string{"rank 2 did not arrive"}})
}

func TestTimeoutNamesARankThatExited(t *testing.T) {
	j := &job{n: 3, timeout: time.Second, heartbeat: 50 * time.Millisecond}
	errs := j.run(t, func(w *nccl.World) error {
		if err := first(w); err != nil || w.Rank() == 1 {
			return err // rank 1 closes its world now
		}
		return w.Comm().Broadcast(context.Background(), comm.F32(make([]float32, 3)), 0).Wait()
	})
	noErrors(t, errs[1:2])
	for _, r := range []int{0, 2} {
		check(t, r, errs[r], want{kind: comm.ErrTimeout, seq: 2, peers: []int{1},
			msg: []string{"broadcast #2", "rank 1 did not arrive (exited: it closed its communicators: its last collective here is #1)"}})
	}
}

func TestTimeoutOnASubCommunicatorNamesWorldRanks(t *testing.T) {
	j := &job{n: 4, timeout: time.Second, heartbeat: 50 * time.Millisecond}
	errs := j.run(t, func(w *nccl.World) error {
		ctx := context.Background()
		g, err := comm.NewGroup(ctx, w.Comm(), []int{3, 1, 2})
		if err != nil || g == nil || w.Rank() == 1 {
			return err // rank 1 (rank 1 of the group) never issues
		}
		return g.AllGather(ctx, comm.F32(make([]float32, 6)), comm.F32(make([]float32, 2))).Wait()
	})
	for _, r := range []int{2, 3} {
		check(t, r, errs[r], want{kind: comm.ErrTimeout, seq: 1, peers: []int{1},
			msg: []string{"all_gather #1 on group[3 1 2]", "rank 1 (world rank 1) did not arrive"}})
	}
	noErrors(t, errs[:2])
}

func TestTimeoutWithoutAStoreSaysSo(t *testing.T) {
	j := &job{n: 2, timeout: 500 * time.Millisecond, noStore: true}
	errs := j.run(t, func(w *nccl.World) error {
		if w.Rank() == 1 {
			return nil
		}
		return w.Comm().AllReduce(context.Background(), comm.BF16(make([]uint16, 2)), comm.Avg).Wait()
	})
	check(t, 0, errs[0], want{kind: comm.ErrTimeout, seq: 1, msg: []string{"timed out after 500ms", "which ranks did not arrive is unknown"}})
}

func TestStuckCollectiveAfterEveryRankArrived(t *testing.T) {
	j := &job{n: 2, timeout: 500 * time.Millisecond, heartbeat: 50 * time.Millisecond,
		fake: fakenccl.Options{Inject: func(s fakenccl.Site) fakenccl.Fault { return fakenccl.Fault{Hang: s.N == 1} }}}
	errs := j.run(t, func(w *nccl.World) error {
		if w.Rank() == 1 {
			// Arrives later, so that rank 0 times out first and tells it.
			time.Sleep(150 * time.Millisecond)
		}
		return w.Comm().ReduceScatter(context.Background(), comm.F32(make([]float32, 1)), comm.F32(make([]float32, 2)), comm.Sum).Wait()
	})
	for r := range 2 {
		// Whichever rank times out first tells the other: either way no
		// rank is named at fault.
		check(t, r, errs[r], want{kind: comm.ErrTimeout, seq: 1, msg: []string{"every rank arrived, but the collective did not complete"}})
	}
}

func TestNCCLErrorFailsEveryRank(t *testing.T) {
	j := &job{n: 3, timeout: time.Minute, heartbeat: 50 * time.Millisecond,
		fake: fakenccl.Options{Inject: func(s fakenccl.Site) fakenccl.Fault {
			if s.WorldRank == 1 && s.N == 2 {
				return fakenccl.Fault{Err: nccl.InternalError}
			}
			return fakenccl.Fault{}
		}}}
	errs := j.run(t, func(w *nccl.World) error {
		if err := first(w); err != nil {
			return err
		}
		return w.Comm().AllReduce(context.Background(), comm.F16(make([]uint16, 5)), comm.Sum).Wait()
	})
	check(t, 1, errs[1], want{kind: comm.ErrRankFailed, seq: 2, msg: []string{"NCCL failed during all_reduce #2", "ncclInternalError", "injected"}})
	for _, r := range []int{0, 2} {
		check(t, r, errs[r], want{kind: comm.ErrRankFailed, seq: 2, peers: []int{1}, msg: []string{"rank 1's all_reduce #2 on world failed", "ncclInternalError"}})
	}
}

func TestCancelledContextFailsEveryRank(t *testing.T) {
	j := &job{n: 2, timeout: time.Minute, heartbeat: 50 * time.Millisecond}
	errs := j.run(t, func(w *nccl.World) error {
		if w.Rank() == 1 {
			time.Sleep(200 * time.Millisecond) // let rank 0 cancel first
			return w.Comm().Barrier(context.Background()).Wait()
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		h := w.Comm().AllGather(ctx, comm.F32(make([]float32, 2)), comm.F32(make([]float32, 1)))
		cancel(errors.New("stop now"))
		return h.Wait()
	})
	check(t, 0, errs[0], want{kind: comm.ErrRankFailed, seq: 1, peers: []int{0}, msg: []string{"rank 0 cancelled its all_gather #1", "stop now"}})
	check(t, 1, errs[1], want{kind: comm.ErrRankFailed, seq: 1, peers: []int{0}, msg: []string{"rank 0's all_gather #1 on world failed"}})
}

func TestQueuedCollectivesFailWithTheSameCause(t *testing.T) {
	j := &job{n: 2, timeout: 300 * time.Millisecond, heartbeat: 50 * time.Millisecond}
	errs := j.run(t, func(w *nccl.World) error {
		if w.Rank() == 1 {
			return nil
		}
		ctx := context.Background()
		c := w.Comm()
		hs := []comm.Handle{
			c.AllReduce(ctx, comm.F32(make([]float32, 8)), comm.Sum),
			c.Broadcast(ctx, comm.F32(make([]float32, 8)), 1),
			c.Barrier(ctx),
		}
		err := comm.WaitAll(hs...)
		for i, h := range hs {
			var ce *comm.Error
			if e := h.Wait(); !errors.As(e, &ce) || ce.Seq != uint64(i+1) || !errors.Is(e, comm.ErrTimeout) {
				return fmt.Errorf("collective %d: %v", i+1, e)
			}
		}
		// Later calls fail at once, with the same cause.
		if e := c.Barrier(ctx).Wait(); !errors.Is(e, comm.ErrTimeout) {
			return fmt.Errorf("a barrier after the failure: %v", e)
		}
		return err
	})
	if errs[0] == nil || strings.Count(errs[0].Error(), "timed out") != 1 {
		t.Fatalf("WaitAll = %v, want one timeout, reported once", errs[0])
	}
	check(t, 0, errs[0], want{kind: comm.ErrTimeout, seq: 1, peers: []int{1}, msg: []string{"all_reduce #1", "rank 1 did not arrive"}})
}
