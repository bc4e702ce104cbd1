package rangepool

import (
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// counts records how often each index ran, and the shortest chunk that
// did not end the range.
type counts struct {
	n        int
	hits     []atomic.Int32
	minChunk atomic.Int64
}

func (c *counts) RunRange(lo, hi int) {
	for i := lo; i < hi; i++ {
		c.hits[i].Add(1)
	}
	for hi < c.n {
		m := c.minChunk.Load()
		if int64(hi-lo) >= m || c.minChunk.CompareAndSwap(m, int64(hi-lo)) {
			return
		}
	}
}

// TestRunCoversEachIndexOnce: every index of [0, n) runs exactly once,
// in chunks of at least grain indices (but the last), for any
// number of workers and sizes around the chunking's edges.
func TestRunCoversEachIndexOnce(t *testing.T) {
	for _, workers := range []int{0, 1, 2, 3, 8} {
		p := New(workers)
		for _, n := range []int{0, 1, 2, 7, 31, 32, 33, 1000} {
			for _, grain := range []int{1, 4, 64} {
				c := &counts{n: n, hits: make([]atomic.Int32, n)}
				c.minChunk.Store(math.MaxInt64) // no chunk before the last yet
				for rep := 0; rep < 3; rep++ {  // the pool is reused
					p.Run(n, grain, c)
				}
				for i := range c.hits {
					if h := c.hits[i].Load(); h != 3 {
						t.Fatalf("workers %d, n %d, grain %d: index %d ran %d times in 3 runs, want 3", workers, n, grain, i, h)
					}
				}
				if m := c.minChunk.Load(); m < int64(grain) {
					t.Errorf("workers %d, n %d, grain %d: a chunk of %d indices before the last, below the grain", workers, n, grain, m)
				}
			}
		}
		p.Close()
	}
}

// TestCloseStopsWorkers: New starts workers−1 goroutines and Close ends
// them.
func TestCloseStopsWorkers(t *testing.T) {
	before := settled(t) // the pools of other tests may still be stopping
	p := New(6)
	if got := runtime.NumGoroutine() - before; got != 5 {
		t.Fatalf("New(6) started %d goroutines, want 5 (the caller is the sixth)", got)
	}
	p.Close()
	if after := settled(t); after != before {
		t.Fatalf("%d goroutines still running after Close", after-before)
	}
}

// settled is the number of goroutines once it has not changed for 50 ms.
func settled(t *testing.T) int {
	t.Helper()
	n, since := runtime.NumGoroutine(), time.Now()
	for deadline := time.Now().Add(5 * time.Second); time.Since(since) < 50*time.Millisecond; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the goroutine count did not settle in 5 s (%d now)", n)
		}
		if m := runtime.NumGoroutine(); m != n {
			n, since = m, time.Now()
		}
	}
	return n
}
