package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/commtest"
	"github.com/dszero/dszero/comm/nccl"
	"github.com/dszero/dszero/comm/nccl/fakenccl"
	"github.com/dszero/dszero/comm/rendezvous"
)

// job runs n ranks on a fake NCCL network, each a goroutine with its own
// Lib, Device and store client, as n processes would be.
type job struct {
	n         int
	timeout   time.Duration
	heartbeat time.Duration
	noStore   bool
	fake      fakenccl.Options
	net       *fakenccl.Net
}

// run calls fn on every rank's world and returns each rank's error (nil
// entries for ranks that succeeded); the worlds are closed after fn.
func (j *job) run(t *testing.T, fn func(w *nccl.World) error) []error {
	t.Helper()
	j.net = fakenccl.New(j.fake)
	var addr string
	if !j.noStore {
		srv, err := rendezvous.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		addr = srv.Addr().String()
	}
	lib0, _ := j.net.Rank()
	id, err := lib0.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, j.n)
	var wg sync.WaitGroup
	for r := range j.n {
		wg.Go(func() {
			lib, dev := j.net.Rank()
			opts := nccl.Options{Lib: lib, Device: dev, Rank: r, Size: j.n, ID: id, Timeout: j.timeout, Heartbeat: j.heartbeat}
			if addr != "" {
				c, err := rendezvous.Dial(context.Background(), addr, 10*time.Second)
				if err != nil {
					errs[r] = err
					return
				}
				defer c.Close()
				opts.Store = c
			}
			w, err := nccl.NewWorld(context.Background(), opts)
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = fn(w)
			if err := w.Close(); err != nil && errs[r] == nil {
				errs[r] = err
			}
		})
	}
	wg.Wait()
	return errs
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestConformanceOnFakeNCCL(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
			j := &job{n: n, timeout: time.Minute}
			noErrors(t, j.run(t, func(w *nccl.World) error {
				return commtest.Check(context.Background(), w.Comm(), commtest.Cases(n))
			}))
		})
	}
}

// PreAvg uses NCCL's PreMulSum where 1/n is exact (n a power of two) and
// divides on the host otherwise; both give comm's bits (the conformance
// test), and this checks which path ran.
func TestPreAvgUsesPreMulSumForPowersOfTwo(t *testing.T) {
	for _, tc := range []struct {
		n       int
		premuls int // ncclRedOpCreatePreMulSum calls: one per rank per dtype used
	}{{1, 1}, {2, 2}, {3, 0}, {4, 4}} {
		j := &job{n: tc.n, timeout: time.Minute}
		noErrors(t, j.run(t, func(w *nccl.World) error {
			c := w.Comm()
			buf := commtest.Encode(0, commtest.Values(commtest.Case{Seed: 1}, c.Rank(), 9))
			if err := c.AllReduce(context.Background(), buf, comm.PreAvg).Wait(); err != nil {
				return err
			}
			return c.AllReduce(context.Background(), buf, comm.PreAvg).Wait() // the op is made once
		}))
		if got := j.net.Calls()["ncclRedOpCreatePreMulSum"]; got != tc.premuls {
			t.Errorf("world %d: %d PreMulSum ops created, want %d", tc.n, got, tc.premuls)
		}
		if got := j.net.Calls()["ncclRedOpDestroy"]; got != tc.premuls {
			t.Errorf("world %d: %d PreMulSum ops destroyed, want %d", tc.n, got, tc.premuls)
		}
	}
}

func TestSubCommunicators(t *testing.T) {
	j := &job{n: 4, timeout: time.Minute}
	cases := func(n int) []commtest.Case {
		var cs []commtest.Case
		for _, c := range commtest.Cases(n) {
			if c.Len == 7 || c.Kind == comm.KindBarrier {
				cs = append(cs, c)
			}
		}
		return cs
	}
	noErrors(t, j.run(t, func(w *nccl.World) error {
		ctx := context.Background()
		m, _ := comm.NewMesh(4, 2)
		shard, replica, err := m.Split(ctx, w.Comm())
		if err != nil {
			return err
		}
		r := w.Rank()
		if got, want := shard.(*nccl.Comm).Members(), m.ShardGroup(r); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("shard group %v, want %v", got, want)
		}
		if got, want := replica.(*nccl.Comm).Members(), m.ReplicaGroup(r); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("replica group %v, want %v", got, want)
		}
		if err := commtest.Check(ctx, shard, cases(2)); err != nil {
			return fmt.Errorf("shard group: %w", err)
		}
		if err := commtest.Check(ctx, replica, cases(2)); err != nil {
			return fmt.Errorf("replica group: %w", err)
		}
		// torch new_group order: ranks[i] becomes rank i; rank 1 is left out.
		g, err := comm.NewGroup(ctx, w.Comm(), []int{2, 0, 3})
		if err != nil {
			return err
		}
		if r == 1 {
			if g != nil {
				return fmt.Errorf("rank 1 got a communicator of a group it is not in")
			}
			return nil
		}
		want := map[int]int{2: 0, 0: 1, 3: 2}[r]
		if g.Rank() != want || g.Size() != 3 {
			return fmt.Errorf("new_group rank %d of %d, want %d of 3", g.Rank(), g.Size(), want)
		}
		return commtest.Check(ctx, g, cases(3))
	}))
	if got := j.net.Calls()["ncclCommSplit"]; got != 3*4 {
		t.Errorf("%d ncclCommSplit calls, want 12 (3 splits × 4 ranks)", got)
	}
}

func TestClosedCommunicatorRefusesCalls(t *testing.T) {
	j := &job{n: 2, timeout: time.Minute}
	var comms [2]*nccl.Comm
	noErrors(t, j.run(t, func(w *nccl.World) error {
		comms[w.Rank()] = w.Comm()
		return nil
	}))
	err := comms[0].Barrier(context.Background()).Wait()
	if !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("barrier after Close: %v, want ErrClosed", err)
	}
}
