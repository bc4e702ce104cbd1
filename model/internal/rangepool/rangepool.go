// Package rangepool runs work over an index range on a fixed set of
// goroutines, the caller working too: the worker pool of the models'
// kernels (package model/gpt's and model/llama's). A result is the same
// for any number of workers, because every index's result must be
// independent of how the range is cut.
package rangepool

import (
	"sync"
	"sync/atomic"
)

// Task is work over an index range [lo, hi). Every index's result must
// be independent of how the range is cut, so that the output does not
// depend on the number of workers or on scheduling.
type Task interface {
	RunRange(lo, hi int)
}

// Pool is a fixed set of worker goroutines that run one Task at a time,
// with the caller working too. Tasks are pointers to job structs the
// model owns, so a dispatch allocates nothing. A Pool is used from one
// goroutine at a time.
type Pool struct {
	workers int // goroutines including the caller

	wake chan struct{}
	quit chan struct{}
	wg   sync.WaitGroup

	// The current task, written before the workers are woken.
	task   Task
	n      int
	chunk  int
	chunks int64
	next   atomic.Int64
}

// New starts a pool of workers goroutines, the caller's included
// (at least 1).
func New(workers int) *Pool {
	p := &Pool{workers: max(1, workers), wake: make(chan struct{}), quit: make(chan struct{})}
	for range p.workers - 1 {
		go p.worker()
	}
	return p
}

func (p *Pool) worker() {
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

// Run executes t over [0, n) in chunks of at least grain indices and
// returns when every chunk is done.
func (p *Pool) Run(n, grain int, t Task) {
	if n <= 0 {
		return
	}
	chunk := max(grain, (n+4*p.workers-1)/(4*p.workers))
	chunks := (n + chunk - 1) / chunk
	if p.workers == 1 || chunks == 1 {
		t.RunRange(0, n)
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

func (p *Pool) drain() {
	for {
		c := p.next.Add(1) - 1
		if c >= p.chunks {
			return
		}
		lo := int(c) * p.chunk
		p.task.RunRange(lo, min(p.n, lo+p.chunk))
	}
}

// Close stops the workers.
func (p *Pool) Close() { close(p.quit) }
