package optim

import (
	"runtime"
	"sync"
)

// Kernel is an elementwise update that can run on any sub-range of its
// partition independently: Chunk(lo, hi) updates elements [lo, hi).
type Kernel interface {
	Chunk(lo, hi int)
}

// chunkAlign keeps chunk boundaries on 64-byte (16 float32) lines, so two
// workers never write the same cache line.
const chunkAlign = 16

// Pool is a fixed set of worker goroutines that run a Kernel over a range
// split into one contiguous chunk per worker. It allocates nothing per Run,
// so an optimizer step costs no garbage. A Pool is shared by the optimizers
// of a rank; Run calls are serialised.
type Pool struct {
	mu      sync.Mutex
	workers int
	wake    []chan struct{}
	done    sync.WaitGroup

	// The current job, published to the workers by the channel send.
	k      Kernel
	n      int
	closed bool

	smu sync.Mutex // serialises Scale and Divide, which own ek
	ek  eachKernel
}

// NewPool starts a pool of workers goroutines (GOMAXPROCS when workers ≤ 0).
// The calling goroutine of Run is one of them, so workers-1 are started.
func NewPool(workers int) *Pool {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	p := &Pool{workers: workers, wake: make([]chan struct{}, workers-1)}
	for i := range p.wake {
		p.wake[i] = make(chan struct{})
		go p.worker(i+1, p.wake[i])
	}
	return p
}

// Workers is the number of chunks a Run splits its range into.
func (p *Pool) Workers() int {
	if p == nil {
		return 1
	}
	return p.workers
}

func (p *Pool) worker(id int, wake <-chan struct{}) {
	for range wake {
		lo, hi := Split(p.n, p.workers, id)
		if lo < hi {
			p.k.Chunk(lo, hi)
		}
		p.done.Done()
	}
}

// Run calls k.Chunk on the chunks of [0, n) (see Split) in parallel and
// returns when all are done. A nil Pool runs k.Chunk(0, n) on the caller.
func (p *Pool) Run(n int, k Kernel) {
	if p == nil || p.workers == 1 || n < 4096 {
		if n > 0 {
			k.Chunk(0, n)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		panic("optim: Run on a closed Pool")
	}
	p.k, p.n = k, n
	p.done.Add(len(p.wake))
	for _, w := range p.wake {
		w <- struct{}{}
	}
	if lo, hi := Split(n, p.workers, 0); lo < hi {
		k.Chunk(lo, hi)
	}
	p.done.Wait()
	p.k = nil
}

// Close stops the workers. The pool must not be used afterwards.
func (p *Pool) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, w := range p.wake {
		close(w)
	}
}

// Split returns chunk i of [0, n) cut into parts nearly equal chunks whose
// boundaries are multiples of 16 elements (except the end, n).
func Split(n, parts, i int) (lo, hi int) {
	per := (n + parts - 1) / parts
	per = (per + chunkAlign - 1) / chunkAlign * chunkAlign
	lo, hi = i*per, (i+1)*per
	if lo > n {
		lo = n
	}
	if hi > n {
		hi = n
	}
	return lo, hi
}
