package nccl

import (
	"github.com/dszero/dszero/cuda/driver"
)

// Device is the GPU a rank's communicators run on, as the backend uses
// it: a thread to make NCCL calls on, streams for the collectives, and
// markers that say when queued work has completed. CUDADevice implements
// it over package cuda; package fakenccl's host device runs streams as
// goroutines over host memory.
type Device interface {
	// Run calls fn on the thread that issues the device's work, with its
	// CUDA context current. Every NCCL call is made inside Run, and a
	// group (GroupStart … GroupEnd) inside one Run, since NCCL keeps the
	// group state per thread.
	Run(fn func() error) error
	// NewStream creates a stream for one communicator's collectives.
	NewStream() (Stream, error)
}

// Stream is a queue of device work that runs in order. Its methods are
// called outside Device.Run (each does its own hand-off).
type Stream interface {
	// Handle is the CUstream that NCCL calls get.
	Handle() driver.Stream
	// Record marks the stream's current end: the returned marker is done
	// once everything queued so far has completed.
	Record() (Marker, error)
	// After makes work queued on the stream from now on wait for m, a
	// marker of another stream (the producer of a collective's input).
	After(m Marker) error
	// Stage makes host memory usable by work queued next on this stream:
	// device memory holding a copy of host (uploaded in stream order when
	// upload is set). On a device that addresses host memory directly,
	// it is host itself.
	Stage(host []byte, upload bool) (Staged, error)
	// Destroy releases the stream once its work is done.
	Destroy() error
}

// Marker is a point in a stream.
type Marker interface {
	// Done reports whether the stream has passed the point.
	Done() (bool, error)
	// Release frees the marker; it must not be used after.
	Release()
}

// Staged is host memory made usable on the device by Stream.Stage.
type Staged interface {
	// Ptr is the device address of the host memory's first byte.
	Ptr() driver.DevicePtr
	// Return queues, on the stream, the copy of bytes [off, off+n) back to
	// the host, after the work queued before it (the collective that wrote
	// them).
	Return(off, n int) error
	// Finish is called once the stream has passed everything queued with
	// this staging: with ok it copies the returned bytes into the host
	// memory; either way it frees the device memory. After a failure (ok
	// false) the host memory's contents are unspecified, as comm.Comm
	// allows.
	Finish(ok bool) error
}
