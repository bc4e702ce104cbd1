package inproc

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/commtest"
	"github.com/dszero/dszero/device"
)

// checkNoLeak fails t if goroutines started after before are still alive
// (give exiting goroutines a moment to go).
func checkNoLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// TestConformance runs the commtest suite on worlds of 1 to 5 ranks.
func TestConformance(t *testing.T) {
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			before := runtime.NumGoroutine()
			cases := commtest.Cases(n)
			err := New(n, Options{Timeout: 10 * time.Second}).Run(func(c comm.Comm) error {
				return commtest.Check(context.Background(), c, cases)
			})
			if err != nil {
				t.Fatal(err)
			}
			checkNoLeak(t, before)
		})
	}
}

// TestAsyncOverlap issues several collectives before waiting on any and
// checks they complete in order with the right results.
func TestAsyncOverlap(t *testing.T) {
	const n, k, m = 3, 8, 37
	err := New(n, Options{}).Run(func(c comm.Comm) error {
		bufs := make([][]float32, k)
		hs := make([]comm.Handle, k)
		for i := range bufs {
			bufs[i] = make([]float32, m)
			for j := range bufs[i] {
				bufs[i][j] = float32(i*1000 + j + c.Rank())
			}
			hs[i] = c.AllReduce(context.Background(), comm.F32(bufs[i]), comm.Sum)
		}
		if err := comm.WaitAll(hs...); err != nil {
			return err
		}
		for i := range bufs {
			for j, got := range bufs[i] {
				if want := float32(n*(i*1000+j) + 0 + 1 + 2); got != want {
					return fmt.Errorf("buffer %d[%d] = %v, want %v", i, j, got, want)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// results runs a fixed sequence of collectives on n ranks and returns every
// rank's result bits; inject may add delays.
func results(t *testing.T, n int, inject func(Site) Fault) [][]uint32 {
	t.Helper()
	out := make([][]uint32, n)
	tcs := []commtest.Case{
		{Kind: comm.KindAllReduce, DType: device.F32, Len: 3001, Op: comm.Sum, Seed: 1},
		{Kind: comm.KindAllReduce, DType: device.BF16, Len: 3001, Op: comm.Avg, Seed: 2},
		{Kind: comm.KindAllReduce, DType: device.F16, Len: 2049, Op: comm.Sum, Seed: 3},
		{Kind: comm.KindReduceScatter, DType: device.F32, Len: 777, Op: comm.Avg, Seed: 4},
	}
	err := New(n, Options{Timeout: 10 * time.Second, Inject: inject}).Run(func(c comm.Comm) error {
		var bits []uint32
		for _, tc := range tcs {
			whole := tc.Len
			if tc.Kind == comm.KindReduceScatter {
				whole *= n
			}
			buf := commtest.Encode(tc.DType, commtest.Values(tc, c.Rank(), whole))
			var err error
			if tc.Kind == comm.KindReduceScatter {
				o := commtest.Encode(tc.DType, make([]float32, tc.Len))
				err = c.ReduceScatter(context.Background(), o, buf, tc.Op).Wait()
				buf = o
			} else {
				err = c.AllReduce(context.Background(), buf, tc.Op).Wait()
			}
			if err != nil {
				return err
			}
			bits = append(bits, commtest.Bits(buf)...)
		}
		out[c.Rank()] = bits
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDeterministicUnderRandomDelays: the same collectives with random
// per-rank, per-call delays give identical bits on every run and rank.
func TestDeterministicUnderRandomDelays(t *testing.T) {
	for _, n := range []int{2, 4, 5} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			want := results(t, n, nil)
			for seed := uint64(1); seed <= 3; seed++ {
				var mu sync.Mutex
				r := rand.New(rand.NewPCG(seed, 7))
				got := results(t, n, func(Site) Fault {
					mu.Lock()
					defer mu.Unlock()
					return Fault{Delay: time.Duration(r.IntN(3000)) * time.Microsecond}
				})
				if d := cmp.Diff(want, got); d != "" {
					t.Fatalf("seed %d: bits differ from the undelayed run (-want +got):\n%s", seed, d)
				}
			}
			const allReduced = 3001 + 3001 + 2049 // the all-reduce results, the same on every rank
			for r := 1; r < n; r++ {
				if d := cmp.Diff(want[0][:allReduced], want[r][:allReduced]); d != "" {
					t.Errorf("rank %d differs from rank 0 (-0 +%d):\n%s", r, r, d)
				}
			}
		})
	}
}

// TestSubGroups: arbitrary subsets in arbitrary order, Split by color and
// key, nested groups, and the hybrid mesh; each sub-communicator passes the
// conformance suite while the world keeps working.
func TestSubGroups(t *testing.T) {
	before := runtime.NumGoroutine()
	ctx := context.Background()
	const n = 5
	err := New(n, Options{Timeout: 10 * time.Second}).Run(func(c comm.Comm) error {
		members := []int{4, 1, 3}
		g, err := comm.NewGroup(ctx, c, members)
		if err != nil {
			return err
		}
		wantRank := map[int]int{4: 0, 1: 1, 3: 2}
		if r, in := wantRank[c.Rank()]; in {
			if g == nil || g.Rank() != r || g.Size() != 3 {
				return fmt.Errorf("NewGroup %v on world rank %d: got %v, want rank %d of 3", members, c.Rank(), desc(g), r)
			}
			if err := commtest.Check(ctx, g, commtest.Cases(3)); err != nil {
				return fmt.Errorf("group %v: %w", members, err)
			}
			// A group inside the group: its ranks 2 and 0, world ranks 3 and 4.
			inner, err := comm.NewGroup(ctx, g, []int{2, 0})
			if err != nil {
				return err
			}
			if inner != nil {
				if err := commtest.Check(ctx, inner, commtest.Cases(2)[:20]); err != nil {
					return fmt.Errorf("inner group: %w", err)
				}
			}
		} else if g != nil {
			return fmt.Errorf("world rank %d is not in %v but got %v", c.Rank(), members, desc(g))
		}
		// The world still works after (and despite) its sub-groups.
		if err := commtest.Check(ctx, c, commtest.Cases(n)[:12]); err != nil {
			return fmt.Errorf("world after groups: %w", err)
		}
		// Split: even and odd ranks, ordered by descending world rank.
		s, err := c.Split(ctx, c.Rank()%2, -c.Rank())
		if err != nil {
			return err
		}
		var mine []int
		for r := n - 1; r >= 0; r-- {
			if r%2 == c.Rank()%2 {
				mine = append(mine, r)
			}
		}
		if want := indexOf(mine, c.Rank()); s.Rank() != want || s.Size() != len(mine) {
			return fmt.Errorf("Split on world rank %d: got %v, want rank %d of %d", c.Rank(), desc(s), want, len(mine))
		}
		one := []float32{float32(c.Rank())}
		if err := s.Broadcast(ctx, comm.F32(one), 0).Wait(); err != nil {
			return err
		}
		if one[0] != float32(mine[0]) {
			return fmt.Errorf("Split broadcast from its rank 0 gave %v, want world rank %d", one[0], mine[0])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkNoLeak(t, before)
}

func TestMeshGroups(t *testing.T) {
	ctx := context.Background()
	m, err := comm.NewMesh(6, 3)
	if err != nil {
		t.Fatal(err)
	}
	err = New(m.World, Options{Timeout: 10 * time.Second}).Run(func(c comm.Comm) error {
		shard, replica, err := m.Split(ctx, c)
		if err != nil {
			return err
		}
		rep, s := m.Coords(c.Rank())
		if shard.Rank() != s || shard.Size() != m.Shard || replica.Rank() != rep || replica.Size() != m.Replicas() {
			return fmt.Errorf("world rank %d: shard %v, replica %v; want %d of %d, %d of %d", c.Rank(), desc(shard), desc(replica), s, m.Shard, rep, m.Replicas())
		}
		// Hybrid all-reduce: within the shard group, then across replicas.
		// Small integers keep every order exact, so the two steps must give
		// the world's sum.
		x := []float32{float32(c.Rank() + 1), float32(10 * c.Rank())}
		if err := shard.AllReduce(ctx, comm.F32(x), comm.Sum).Wait(); err != nil {
			return err
		}
		if err := replica.AllReduce(ctx, comm.F32(x), comm.Sum).Wait(); err != nil {
			return err
		}
		if want := []float32{21, 150}; !cmp.Equal(want, x) {
			return fmt.Errorf("hybrid sum %v, want %v", x, want)
		}
		if got := shard.Traffic().Of(comm.KindAllReduce); got.Calls != 1 || got.Bytes != 8 {
			return fmt.Errorf("shard traffic %+v, want 1 call of 8 bytes", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestNewGroupRefusesBadLists(t *testing.T) {
	err := New(3, Options{}).Run(func(c comm.Comm) error {
		for _, ranks := range [][]int{nil, {0, 3}, {1, 1}, {-1}} {
			if g, err := comm.NewGroup(context.Background(), c, ranks); err == nil {
				return fmt.Errorf("NewGroup(%v) = %v, want an error", ranks, desc(g))
			}
		}
		return c.Barrier(context.Background()).Wait() // nothing was left half-issued
	})
	if err != nil {
		t.Fatal(err)
	}
}

func desc(c comm.Comm) string {
	if c == nil {
		return "nil"
	}
	return fmt.Sprintf("rank %d of %d", c.Rank(), c.Size())
}

func indexOf(s []int, v int) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
