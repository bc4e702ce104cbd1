package inproc

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
)

// outcome is what one surviving rank saw: the error of its first failed
// collective and how long that collective took.
type outcome struct {
	err     error
	elapsed time.Duration
}

// survive runs up to k all-reduces on c (4 elements) and returns the first
// error and its duration; a second collective must then fail at once too,
// since a broken communicator stays broken.
func survive(ctx context.Context, c comm.Comm, k int) outcome {
	buf := make([]float32, 4)
	for range k {
		start := time.Now()
		if err := c.AllReduce(ctx, comm.F32(buf), comm.Sum).Wait(); err != nil {
			o := outcome{err: err, elapsed: time.Since(start)}
			again := c.AllReduce(ctx, comm.F32(buf), comm.Sum).Wait()
			if !errors.Is(again, errors.Unwrap(err)) {
				o.err = fmt.Errorf("after %w, the next collective returned %v, want the same cause", err, again)
			}
			return o
		}
	}
	return outcome{}
}

type faultCase struct {
	name    string
	n       int
	timeout time.Duration
	inject  func(Site) Fault
	victim  int // world rank that misbehaves
	// victimFn is the victim's body; the others run survive(k) on the world
	// (or on group, when set) and must report:
	victimFn func(c comm.Comm, ctx context.Context) error
	group    []int         // world ranks of a sub-group the test runs in; nil: the world
	deadline time.Duration // a context deadline for the survivors
	k        int

	kind    comm.Kind
	seq     uint64
	peers   []int // must be among the error's Peers
	is      []error
	msg     []string
	byTimer bool // the error comes from a timeout: elapsed ≥ the limit
}

var (
	errBoom     = errors.New("boom")
	errInjected = errors.New("injected fault")
)

func faultCases() []faultCase {
	const timeout = 200 * time.Millisecond
	allreduce := func(c comm.Comm, ctx context.Context, k int) error {
		for range k {
			if err := c.AllReduce(ctx, comm.F32(make([]float32, 4)), comm.Sum).Wait(); err != nil {
				return err
			}
		}
		return nil
	}
	return []faultCase{{
		name: "error before the first collective", n: 4, victim: 2, k: 3,
		victimFn: func(comm.Comm, context.Context) error { return errBoom },
		kind:     comm.KindAllReduce, seq: 1, peers: []int{2}, is: []error{comm.ErrRankFailed, errBoom},
		msg: []string{"all_reduce #1 on world", "rank 2 failed: boom"},
	}, {
		name: "panic after two collectives", n: 4, victim: 1, k: 5,
		victimFn: func(c comm.Comm, ctx context.Context) error {
			if err := allreduce(c, ctx, 2); err != nil {
				return err
			}
			panic("kaput")
		},
		kind: comm.KindAllReduce, seq: 3, peers: []int{1}, is: []error{comm.ErrRankFailed},
		msg: []string{"all_reduce #3", "rank 1 panicked: kaput"},
	}, {
		name: "Goexit", n: 3, victim: 0, k: 2,
		victimFn: func(comm.Comm, context.Context) error { runtime.Goexit(); return nil },
		kind:     comm.KindAllReduce, seq: 1, peers: []int{0}, is: []error{comm.ErrRankFailed},
		msg: []string{"rank 0 failed: runtime.Goexit"},
	}, {
		name: "never arrives", n: 4, victim: 3, k: 2, timeout: timeout,
		// victimFn nil: the victim waits until the others have failed.
		kind: comm.KindAllReduce, seq: 1, peers: []int{3}, is: []error{comm.ErrTimeout},
		msg: []string{"timed out after 200ms: rank 3 did not arrive"}, byTimer: true,
	}, {
		name: "context deadline before the timeout", n: 3, victim: 1, k: 2,
		deadline: 150 * time.Millisecond,
		kind:     comm.KindAllReduce, seq: 1, peers: []int{1}, is: []error{comm.ErrTimeout},
		msg: []string{"rank 1 did not arrive"}, byTimer: true,
	}, {
		name: "injected failure", n: 4, victim: 1, k: 3,
		inject: func(s Site) Fault {
			if s.WorldRank == 1 && s.Seq == 2 {
				return Fault{Err: errInjected}
			}
			return Fault{}
		},
		victimFn: func(c comm.Comm, ctx context.Context) error { return allreduce(c, ctx, 3) },
		kind:     comm.KindAllReduce, seq: 2, peers: []int{1}, is: []error{comm.ErrRankFailed, errInjected},
		msg: []string{"all_reduce #2", "rank 1 failed: injected fault"},
	}, {
		name: "injected delay beyond the timeout", n: 3, victim: 0, k: 2, timeout: timeout,
		inject: func(s Site) Fault {
			if s.WorldRank == 0 {
				return Fault{Delay: time.Hour}
			}
			return Fault{}
		},
		victimFn: func(c comm.Comm, ctx context.Context) error { return allreduce(c, ctx, 2) },
		kind:     comm.KindAllReduce, seq: 1, peers: []int{0}, is: []error{comm.ErrTimeout},
		msg: []string{"rank 0 did not arrive"}, byTimer: true,
	}, {
		name: "rank exits early", n: 4, victim: 2, k: 3,
		victimFn: func(c comm.Comm, ctx context.Context) error { return allreduce(c, ctx, 1) },
		kind:     comm.KindAllReduce, seq: 2, peers: []int{2}, is: []error{comm.ErrRankExited},
		msg: []string{"all_reduce #2", "rank 2 exited"},
	}, {
		name: "cancelled context", n: 3, victim: 1, k: 2,
		victimFn: func(c comm.Comm, ctx context.Context) error {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			return c.AllReduce(cctx, comm.F32(make([]float32, 4)), comm.Sum).Wait()
		},
		kind: comm.KindAllReduce, seq: 1, peers: []int{1}, is: []error{comm.ErrRankFailed, context.Canceled},
		msg: []string{"rank 1 failed: context canceled"},
	}, {
		name: "mismatched kinds", n: 3, victim: 2, k: 2,
		victimFn: func(c comm.Comm, ctx context.Context) error {
			return c.AllGather(ctx, comm.F32(make([]float32, 12)), comm.F32(make([]float32, 4))).Wait()
		},
		kind: comm.KindAllReduce, seq: 1, peers: []int{2}, is: []error{comm.ErrMismatch},
		msg: []string{"all_gather(fp32[4])", "all_reduce(fp32[4], sum)"},
	}, {
		name: "mismatched lengths", n: 2, victim: 1, k: 2,
		victimFn: func(c comm.Comm, ctx context.Context) error {
			return c.AllReduce(ctx, comm.F32(make([]float32, 5)), comm.Sum).Wait()
		},
		kind: comm.KindAllReduce, seq: 1, peers: []int{1}, is: []error{comm.ErrMismatch},
		msg: []string{"all_reduce(fp32[5], sum)"},
	}, {
		name: "timeout in a sub-group names world ranks", n: 4, victim: 3, k: 2, timeout: timeout,
		group: []int{2, 0, 3},
		kind:  comm.KindAllReduce, seq: 1, peers: []int{2}, is: []error{comm.ErrTimeout},
		msg: []string{"on group[2 0 3]", "rank 2 (world rank 3) did not arrive"}, byTimer: true,
	}}
}

func TestFailures(t *testing.T) {
	for _, tc := range faultCases() {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			limit := tc.timeout
			if limit == 0 {
				limit = 10 * time.Second
			}
			outcomes := make([]outcome, tc.n)
			var failed sync.WaitGroup // survivors that have seen their error
			for r := range tc.n {
				if r != tc.victim && (tc.group == nil || slices.Contains(tc.group, r)) {
					failed.Add(1)
				}
			}
			w := New(tc.n, Options{Timeout: limit, Inject: tc.inject})
			runErr := w.Run(func(c comm.Comm) error {
				ctx := context.Background()
				if tc.deadline > 0 && c.Rank() != tc.victim {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.deadline)
					defer cancel()
				}
				var g comm.Comm = c
				if tc.group != nil {
					var err error
					if g, err = comm.NewGroup(ctx, c, tc.group); err != nil {
						return err
					}
					if g == nil {
						failed.Wait() // stay alive: an exit would break the world, not the group
						return nil
					}
				}
				if c.Rank() == tc.victim {
					if tc.victimFn == nil { // the late rank: come after the others gave up
						failed.Wait()
						return survive(context.Background(), g, 1).err
					}
					return tc.victimFn(g, ctx)
				}
				o := survive(ctx, g, tc.k)
				outcomes[c.Rank()] = o
				failed.Done()
				return o.err
			})
			if tc.deadline > 0 {
				limit = tc.deadline
			}
			for r, o := range outcomes {
				if r == tc.victim || (tc.group != nil && !slices.Contains(tc.group, r)) {
					continue
				}
				checkOutcome(t, tc, r, o, limit)
			}
			if runErr == nil {
				t.Errorf("Run returned nil")
			} else if strings.Contains(tc.name, "panic") && !strings.Contains(runErr.Error(), "rank 1 panicked: kaput\ngoroutine") {
				t.Errorf("Run's error lacks the victim's panic and stack:\n%v", runErr)
			}
			checkNoLeak(t, before)
		})
	}
}

func checkOutcome(t *testing.T, tc faultCase, r int, o outcome, limit time.Duration) {
	t.Helper()
	var ce *comm.Error
	if !errors.As(o.err, &ce) {
		t.Errorf("rank %d: got %v, want a *comm.Error", r, o.err)
		return
	}
	if ce.Kind != tc.kind || ce.Seq != tc.seq {
		t.Errorf("rank %d: error in %v #%d, want %v #%d: %v", r, ce.Kind, ce.Seq, tc.kind, tc.seq, o.err)
	}
	for _, p := range tc.peers {
		if !slices.Contains(ce.Peers, p) {
			t.Errorf("rank %d: peers %v lack %d: %v", r, ce.Peers, p, o.err)
		}
	}
	for _, target := range tc.is {
		if !errors.Is(o.err, target) {
			t.Errorf("rank %d: error is not %v: %v", r, target, o.err)
		}
	}
	for _, m := range tc.msg {
		if !strings.Contains(o.err.Error(), m) {
			t.Errorf("rank %d: error lacks %q: %v", r, m, o.err)
		}
	}
	const slack = time.Second // scheduling under -race on a busy machine
	if o.elapsed > limit+slack {
		t.Errorf("rank %d: failed after %v, beyond the limit %v", r, o.elapsed, limit)
	}
	if tc.byTimer && o.elapsed < limit*9/10 {
		t.Errorf("rank %d: timed out after %v, before the limit %v", r, o.elapsed, limit)
	}
}

// TestOverlappingBuffersAcrossRanks: two ranks passing the same memory is
// refused (it would race), not silently wrong.
func TestOverlappingBuffersAcrossRanks(t *testing.T) {
	shared := make([]float32, 8)
	err := New(2, Options{}).Run(func(c comm.Comm) error {
		err := c.AllReduce(context.Background(), comm.F32(shared), comm.Sum).Wait()
		if !errors.Is(err, comm.ErrMismatch) || !strings.Contains(err.Error(), "overlap") {
			return fmt.Errorf("got %v, want an overlap mismatch", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPendingHandlesFail: collectives queued behind a failing one all
// return errors; none hangs.
func TestPendingHandlesFail(t *testing.T) {
	before := runtime.NumGoroutine()
	err := New(3, Options{Timeout: 10 * time.Second}).Run(func(c comm.Comm) error {
		if c.Rank() == 0 {
			return errBoom
		}
		var hs []comm.Handle
		for range 5 {
			hs = append(hs, c.AllReduce(context.Background(), comm.F32(make([]float32, 3)), comm.Avg))
		}
		for i, h := range hs {
			if err := h.Wait(); !errors.Is(err, comm.ErrRankFailed) {
				return fmt.Errorf("handle %d: %v, want ErrRankFailed", i, err)
			}
		}
		return nil
	})
	if err == nil || !errors.Is(err, errBoom) || strings.Contains(err.Error(), "handle") {
		t.Fatalf("Run = %v, want only rank 0's boom", err)
	}
	checkNoLeak(t, before)
}

func TestUseAfterRunIsClosed(t *testing.T) {
	var kept comm.Comm
	if err := New(2, Options{}).Run(func(c comm.Comm) error {
		if c.Rank() == 0 {
			kept = c
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := kept.Barrier(context.Background()).Wait(); !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("Barrier after Run = %v, want ErrClosed", err)
	}
}

func TestArgumentErrorsPanic(t *testing.T) {
	cases := map[string]func(c comm.Comm){
		"reduce_scatter lengths": func(c comm.Comm) {
			c.ReduceScatter(context.Background(), comm.F32(make([]float32, 3)), comm.F32(make([]float32, 7)), comm.Sum)
		},
		"all_gather dtypes": func(c comm.Comm) {
			c.AllGather(context.Background(), comm.BF16(make([]uint16, 4)), comm.F16(make([]uint16, 2)))
		},
		"all_gather partial overlap": func(c comm.Comm) {
			out := make([]float32, 4)
			c.AllGather(context.Background(), comm.F32(out), comm.F32(out[1:3]))
		},
		"broadcast root": func(c comm.Comm) { c.Broadcast(context.Background(), comm.F32(nil), 2) },
		"invalid op":     func(c comm.Comm) { c.AllReduce(context.Background(), comm.F32(nil), comm.Op(7)) },
	}
	for name, call := range cases {
		t.Run(name, func(t *testing.T) {
			err := New(2, Options{}).Run(func(c comm.Comm) error {
				if c.Rank() == 0 {
					call(c)
				}
				return nil
			})
			if err == nil || !strings.Contains(err.Error(), "rank 0 panicked: inproc: ") {
				t.Fatalf("Run = %v, want rank 0's panic", err)
			}
		})
	}
}

// TestStoppedRank: a rank that stops for good between collectives (here
// blocked on a channel, as a hung hook or a deadlock in its own code would
// be) cannot stall the others: their collective times out naming it, and
// Run returns a grace period later without it, reporting it stopped or
// hung. Before Run waited for every goroutine, so it never returned.
func TestStoppedRank(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		victim int
		peers  []int // the timed-out collective's Peers, on every survivor
		msg    string
	}{
		{name: "2 ranks", n: 2, victim: 1, peers: []int{1}, msg: "timed out after 2s: rank 1 did not arrive"},
		{name: "4 ranks, rank 0 stops", n: 4, victim: 0, peers: []int{0}, msg: "timed out after 2s: rank 0 did not arrive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			stopped := make(chan struct{}) // never closed while the test runs
			survivors := make([]error, tc.n)
			var runErr error
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				runErr = New(tc.n, Options{Timeout: 2 * time.Second, Grace: 500 * time.Millisecond}).Run(func(c comm.Comm) error {
					ctx := context.Background()
					buf := make([]float32, 4)
					for i := 0; ; i++ {
						if c.Rank() == tc.victim && i == 2 {
							<-stopped // the rank stops here, between collectives
							return nil
						}
						if err := c.AllReduce(ctx, comm.F32(buf), comm.Sum).Wait(); err != nil {
							survivors[c.Rank()] = err
							return err
						}
					}
				})
			}()
			select {
			case <-returned:
			case <-time.After(60 * time.Second): // generous: the job ends after ~2.5s
				close(stopped)
				t.Fatal("Run did not return 60s after a rank stopped")
			}
			for r, err := range survivors {
				if r == tc.victim {
					continue
				}
				var ce *comm.Error
				if !errors.As(err, &ce) || !errors.Is(err, comm.ErrTimeout) || ce.Seq != 3 || !slices.Equal(ce.Peers, tc.peers) {
					t.Errorf("rank %d: %v, want a timeout of all_reduce #3 naming %v", r, err, tc.peers)
				} else if !strings.Contains(err.Error(), "all_reduce #3 on world") || !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("rank %d: error lacks %q: %v", r, tc.msg, err)
				}
			}
			want := fmt.Sprintf("rank %d: stopped or hung: a collective timed out waiting for it, and it did not return within 500ms after", tc.victim)
			if runErr == nil || !strings.Contains(runErr.Error(), want) || !errors.Is(runErr, comm.ErrTimeout) {
				t.Errorf("Run = %v, want it to report %q", runErr, want)
			}
			close(stopped) // let the victim go, so that nothing leaks
			checkNoLeak(t, before)
		})
	}
}
