package device

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStreamRunsInOrder enqueues many small functions; the record they
// leave must be in enqueue order. Wait gives the happens-before edge that
// lets the test read the record (checked with -race).
func TestStreamRunsInOrder(t *testing.T) {
	s := newCPU(t, 0).NewStream()
	defer s.Close()
	var got []int
	for i := range 1000 {
		s.Enqueue(func() { got = append(got, i) })
		if i%97 == 0 {
			time.Sleep(50 * time.Microsecond) // let the runner go idle and restart
		}
	}
	s.Wait()
	if len(got) != 1000 {
		t.Fatalf("ran %d of 1000", len(got))
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("position %d ran item %d", i, v)
		}
	}
}

// TestStreamIsAsynchronous: Enqueue returns while work is blocked, and an
// Event does not fire before the work ahead of it.
func TestStreamIsAsynchronous(t *testing.T) {
	s := newCPU(t, 0).NewStream()
	defer s.Close()
	release := make(chan struct{})
	var ran atomic.Bool
	s.Enqueue(func() { <-release; ran.Store(true) })
	e := s.Record()
	time.Sleep(5 * time.Millisecond)
	if e.Done() || ran.Load() {
		t.Fatal("event fired before the blocked work ran")
	}
	close(release)
	e.Wait()
	if !e.Done() || !ran.Load() {
		t.Fatal("event fired without the work before it")
	}
}

// TestRecordOnIdleStream: with nothing pending the event has happened.
func TestRecordOnIdleStream(t *testing.T) {
	s := newCPU(t, 0).NewStream()
	if e := s.Record(); !e.Done() {
		t.Error("event on an idle stream is not done")
	}
	s.Wait()
	s.Close()
}

// TestWaitEventOrdersStreams is the prefetch pattern: a "comm" stream
// gathers, records an event; the "compute" stream waits on it before using
// the result. Compute work enqueued after WaitEvent must see the gather.
func TestWaitEventOrdersStreams(t *testing.T) {
	d := newCPU(t, 0)
	comm, compute := d.NewStream(), d.NewStream()
	defer comm.Close()
	defer compute.Close()
	for round := range 50 {
		var mu sync.Mutex
		var log []string
		add := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
		release := make(chan struct{})
		comm.Enqueue(func() { <-release; add("gather") })
		gathered := comm.Record()
		compute.Enqueue(func() { add("unrelated") }) // may run before the gather
		compute.WaitEvent(gathered)
		compute.Enqueue(func() { add("forward") })
		done := compute.Record()
		if round%2 == 0 {
			time.Sleep(time.Millisecond)
		}
		if done.Done() {
			t.Fatal("compute finished before the gather it waits for")
		}
		close(release)
		done.Wait()
		mu.Lock()
		gi, fi := index(log, "gather"), index(log, "forward")
		mu.Unlock()
		if gi < 0 || fi < 0 || fi < gi || index(log, "unrelated") < 0 {
			t.Fatalf("round %d: order %v", round, log)
		}
	}
}

func index(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// TestConcurrentEnqueue: several goroutines share a stream; each one's work
// keeps its order and all of it runs.
func TestConcurrentEnqueue(t *testing.T) {
	s := newCPU(t, 0).NewStream()
	defer s.Close()
	const producers, per = 4, 500
	var last [producers]int // touched only by the stream's work
	var bad atomic.Int32
	var wg sync.WaitGroup
	for p := range producers {
		last[p] = -1
		wg.Go(func() {
			for i := range per {
				s.Enqueue(func() {
					if last[p] != i-1 {
						bad.Add(1)
					}
					last[p] = i
				})
			}
		})
	}
	wg.Wait()
	s.Wait()
	if bad.Load() != 0 {
		t.Errorf("%d items ran out of their producer's order", bad.Load())
	}
	for p, v := range last {
		if v != per-1 {
			t.Errorf("producer %d: last item %d, want %d", p, v, per-1)
		}
	}
}

func TestClosedStream(t *testing.T) {
	s := newCPU(t, 0).NewStream()
	var ran atomic.Bool
	s.Enqueue(func() { time.Sleep(time.Millisecond); ran.Store(true) })
	s.Close()
	if !ran.Load() {
		t.Error("Close returned before the stream's work ran")
	}
	mustPanic(t, "Enqueue after Close", "closed stream", func() { s.Enqueue(func() {}) })
	mustPanic(t, "Record after Close", "closed stream", func() { s.Record() })
	mustPanic(t, "Close twice", "closed twice", func() { s.Close() })
}
