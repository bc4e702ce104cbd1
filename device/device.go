package device

import "github.com/dszero/dszero/mem"

// Device allocates accounted buffers and runs streams of work. One Device
// serves one rank.
type Device interface {
	// Name says what the device is, e.g. "cpu".
	Name() string
	// Accountant is the rank's memory accountant every Alloc goes through.
	Accountant() *mem.Accountant
	// Alloc makes n zeroed elements of dtype dt, accounted as category cat
	// in tier t. Exceeding the tier's capacity returns an error wrapping
	// *mem.OOMError. Invalid arguments (n < 0, an unknown dtype, a tier the
	// device does not serve) are programmer errors and panic.
	Alloc(cat mem.Category, t mem.Tier, dt DType, n int) (*Buffer, error)
	// Free returns b's bytes to the accountant. Freeing a buffer twice or
	// on another device panics.
	Free(b *Buffer)
	// NewStream makes an ordered queue of asynchronous work.
	NewStream() Stream
}

// Stream runs work asynchronously, one function at a time, in the order it
// was enqueued. A Stream may be used from several goroutines; work enqueued
// by one goroutine keeps that goroutine's order.
type Stream interface {
	// Enqueue adds work and returns without waiting for it. A panic in
	// work is a crash, as a faulting kernel is.
	Enqueue(work func())
	// Record returns an Event that fires once everything enqueued so far
	// has run.
	Record() Event
	// WaitEvent makes work enqueued after it wait until e fires (e may come
	// from another stream). The caller does not block.
	WaitEvent(e Event)
	// Wait blocks until everything enqueued so far has run.
	Wait()
	// Close waits for the stream's work, then retires it; using the stream
	// afterwards, or closing it again, panics.
	Close()
}

// Event marks a point in a stream.
type Event interface {
	// Wait blocks until the event fires.
	Wait()
	// Done reports whether the event has fired, without blocking.
	Done() bool
}
