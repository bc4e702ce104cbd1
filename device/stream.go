package device

import "sync"

// cpuStream runs its queue on at most one goroutine at a time. The goroutine
// starts when work is enqueued on an idle stream and exits when the queue
// is empty, so an idle or forgotten stream holds no goroutine.
type cpuStream struct {
	mu      sync.Mutex
	queue   []func() // enqueued, not yet taken by the runner
	spare   []func() // the runner's last batch, kept for reuse
	running bool     // a runner goroutine owns the queue
	closed  bool
}

var _ Stream = (*cpuStream)(nil)

func newCPUStream() *cpuStream { return &cpuStream{} }

func (s *cpuStream) Enqueue(work func()) {
	if work == nil {
		panic("device: Enqueue(nil)")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		panic("device: Enqueue on a closed stream")
	}
	s.queue = append(s.queue, work)
	if !s.running {
		s.running = true
		go s.run()
	}
}

// run takes the whole queue at a time and runs it in order, until the
// queue is empty.
func (s *cpuStream) run() {
	var batch []func()
	for {
		s.mu.Lock()
		if batch != nil {
			s.spare = batch[:0]
		}
		if len(s.queue) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		batch = s.queue
		s.queue = s.spare
		s.spare = nil
		s.mu.Unlock()
		for i, work := range batch {
			batch[i] = nil // let the closure be collected once it has run
			work()
		}
	}
}

func (s *cpuStream) Record() Event {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		panic("device: Record on a closed stream")
	}
	idle := !s.running && len(s.queue) == 0
	s.mu.Unlock()
	e := &cpuEvent{done: make(chan struct{})}
	if idle {
		// Nothing is pending: the event has already happened.
		close(e.done)
		return e
	}
	s.Enqueue(func() { close(e.done) })
	return e
}

func (s *cpuStream) WaitEvent(e Event) {
	if e.Done() {
		return
	}
	s.Enqueue(e.Wait)
}

func (s *cpuStream) Wait() { s.Record().Wait() }

func (s *cpuStream) Close() {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		panic("device: stream closed twice")
	}
	s.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
}

// cpuEvent fires when its channel is closed.
type cpuEvent struct {
	done chan struct{}
}

func (e *cpuEvent) Wait() { <-e.done }

func (e *cpuEvent) Done() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}
