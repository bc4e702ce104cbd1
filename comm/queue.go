package comm

import "sync"

// Queue is a backend's issue queue for one rank's communicator: the calls
// the rank has issued, numbered from 1 in issue order, until the
// communicator's worker takes them, one at a time, with Next. Its mutex
// (see Init) guards the queue, and whatever else the backend guards with
// it; the methods named …Locked must be called with the mutex held, the
// others take it themselves.
type Queue[T any] struct {
	mu     *sync.Mutex
	cond   sync.Cond // signalled on push and close
	calls  []T
	seq    uint64 // the last sequence number issued
	closed bool
}

// Init makes mu the queue's mutex. Call it before any other method.
func (q *Queue[T]) Init(mu *sync.Mutex) {
	q.mu = mu
	q.cond.L = mu
}

// NumberLocked issues the next sequence number. closed reports whether the
// queue is closed; the backend then refuses the call instead of pushing it.
func (q *Queue[T]) NumberLocked() (seq uint64, closed bool) {
	q.seq++
	return q.seq, q.closed
}

// PushLocked queues x for the worker.
func (q *Queue[T]) PushLocked(x T) {
	q.calls = append(q.calls, x)
	q.cond.Signal()
}

// LenLocked is the number of calls queued and not yet taken.
func (q *Queue[T]) LenLocked() int { return len(q.calls) }

// TakeAllLocked empties the queue and returns what was in it.
func (q *Queue[T]) TakeAllLocked() []T {
	calls := q.calls
	q.calls = nil
	return calls
}

// Close marks the queue closed: Next returns false once it is empty.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Signal()
	q.mu.Unlock()
}

// Next, for the worker, blocks until a call is queued and takes it, in
// issue order; ok is false once the queue is closed and empty.
func (q *Queue[T]) Next() (x T, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.calls) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.calls) == 0 {
		return x, false
	}
	x = q.calls[0]
	var zero T
	q.calls[0] = zero
	q.calls = q.calls[1:]
	if len(q.calls) == 0 {
		q.calls = q.calls[:0:0]
	}
	return x, true
}
