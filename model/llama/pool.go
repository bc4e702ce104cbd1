package llama

import (
	"sync"
	"sync/atomic"
)

// rangeTask is work over an index range [lo, hi). Every index's result
// must be independent of how the range is cut, so that the output does not
// depend on the number of workers or on scheduling.
type rangeTask interface {
	runRange(lo, hi int)
}

// pool is a fixed set of worker goroutines that run one rangeTask at a
// time, the caller working too. Tasks are pointers to job structs the
// model owns, so a dispatch allocates nothing.
type pool struct {
	workers int // goroutines including the caller

	wake chan struct{}
	quit chan struct{}
	wg   sync.WaitGroup

	// The current task, written before the workers are woken.
	task   rangeTask
	n      int
	chunk  int
	chunks int64
	next   atomic.Int64
}

func newPool(workers int) *pool {
	p := &pool{workers: max(1, workers), wake: make(chan struct{}), quit: make(chan struct{})}
	for range p.workers - 1 {
		go p.worker()
	}
	return p
}

func (p *pool) worker() {
	for {
		select {
		case <-p.wake:
			p.drain()
			p.wg.Done()
		case <-p.quit:
			return
		}
	}
}

// run executes t over [0, n) in chunks of at least grain indices and
// returns when every chunk is done.
func (p *pool) run(n, grain int, t rangeTask) {
	if n <= 0 {
		return
	}
	chunk := max(grain, (n+4*p.workers-1)/(4*p.workers))
	chunks := (n + chunk - 1) / chunk
	if p.workers == 1 || chunks == 1 {
		t.runRange(0, n)
		return
	}
	p.task, p.n, p.chunk, p.chunks = t, n, chunk, int64(chunks)
	p.next.Store(0)
	helpers := min(p.workers-1, chunks-1)
	p.wg.Add(helpers)
	for range helpers {
		p.wake <- struct{}{}
	}
	p.drain()
	p.wg.Wait()
	p.task = nil
}

func (p *pool) drain() {
	for {
		c := p.next.Add(1) - 1
		if c >= p.chunks {
			return
		}
		lo := int(c) * p.chunk
		p.task.runRange(lo, min(p.n, lo+p.chunk))
	}
}

// close stops the workers.
func (p *pool) close() { close(p.quit) }
