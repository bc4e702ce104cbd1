package cuda

import (
	"fmt"
	"unsafe"

	"github.com/dszero/dszero/cuda/driver"
)

// Stream is a non-blocking CUDA stream: work on it runs in order, and it
// does not synchronise with the legacy default stream (which dszero never
// uses).
type Stream struct {
	d *Device
	h driver.Stream
	// ws is the cuBLASLt workspace of GEMMs on this stream (one per
	// stream, so concurrent GEMMs never share one).
	ws Mem
}

// Event marks a point in a stream. Events are created without timing
// (CU_EVENT_DISABLE_TIMING), the cheap kind, for ordering only.
type Event struct {
	d *Device
	h driver.Event
}

// NewStream creates a stream.
func (d *Device) NewStream() (*Stream, error) {
	var s *Stream
	err := d.Do(func(q *Issuer) error {
		h, err := q.drv.StreamCreate(driver.StreamNonBlocking)
		if err != nil {
			return fmt.Errorf("cuda: creating a stream: %w", err)
		}
		s = &Stream{d: d, h: h}
		return nil
	})
	return s, err
}

// Destroy releases the stream (its workspace included) once its work is
// done; the driver lets queued work finish.
func (s *Stream) Destroy() error {
	return s.d.Do(func(q *Issuer) error {
		if !s.ws.IsNull() {
			if err := q.Free(s.ws, s); err != nil {
				return err
			}
			s.ws = Mem{}
		}
		return q.drv.StreamDestroy(s.h)
	})
}

// Synchronize blocks until everything queued on s has completed.
func (s *Stream) Synchronize() error {
	return s.d.onThread(func() error { return s.d.libs.Driver.StreamSynchronize(s.h) })
}

// Done reports whether everything queued on s has completed.
func (s *Stream) Done() (bool, error) {
	var done bool
	err := s.d.Do(func(q *Issuer) (err error) {
		done, err = q.drv.StreamQuery(s.h)
		return err
	})
	return done, err
}

// NewEvent creates an event.
func (d *Device) NewEvent() (*Event, error) {
	var e *Event
	err := d.Do(func(q *Issuer) error {
		h, err := q.drv.EventCreate(driver.EventDisableTiming)
		if err != nil {
			return fmt.Errorf("cuda: creating an event: %w", err)
		}
		e = &Event{d: d, h: h}
		return nil
	})
	return e, err
}

// Destroy releases the event.
func (e *Event) Destroy() error {
	return e.d.Do(func(q *Issuer) error { return q.drv.EventDestroy(e.h) })
}

// Synchronize blocks until the event's latest record has been reached.
func (e *Event) Synchronize() error {
	return e.d.onThread(func() error { return e.d.libs.Driver.EventSynchronize(e.h) })
}

// Done reports whether the event's latest record has been reached (an
// event never recorded is done).
func (e *Event) Done() (bool, error) {
	var done bool
	err := e.d.Do(func(q *Issuer) (err error) {
		done, err = q.drv.EventQuery(e.h)
		return err
	})
	return done, err
}

// Record marks the current end of s in e.
func (q *Issuer) Record(e *Event, s *Stream) error {
	if err := q.drv.EventRecord(e.h, s.h); err != nil {
		return fmt.Errorf("cuda: recording an event: %w", err)
	}
	return nil
}

// WaitEvent makes work queued on s after it wait for e's latest record.
func (q *Issuer) WaitEvent(s *Stream, e *Event) error {
	if err := q.drv.StreamWaitEvent(s.h, e.h); err != nil {
		return fmt.Errorf("cuda: stream waiting for an event: %w", err)
	}
	return nil
}

// CopyToDevice queues a copy of dst.Len() bytes from src at off to dst.
// src is pinned memory: it must stay untouched until the copy has
// completed (record an event after it, or free src with FreeHost on s).
func (q *Issuer) CopyToDevice(s *Stream, dst Mem, src *HostBuffer, off int64) error {
	src.check("CopyToDevice", off, dst.n)
	if dst.n == 0 {
		return nil
	}
	if err := q.drv.MemcpyHtoDAsync(dst.ptr, unsafe.Add(src.p, off), uint64(dst.n), s.h); err != nil {
		return fmt.Errorf("cuda: copying %d bytes to the device: %w", dst.n, err)
	}
	return nil
}

// CopyToHost queues a copy of src into dst at off; dst may be read once
// the copy has completed.
func (q *Issuer) CopyToHost(s *Stream, dst *HostBuffer, off int64, src Mem) error {
	dst.check("CopyToHost", off, src.n)
	if src.n == 0 {
		return nil
	}
	if err := q.drv.MemcpyDtoHAsync(unsafe.Add(dst.p, off), src.ptr, uint64(src.n), s.h); err != nil {
		return fmt.Errorf("cuda: copying %d bytes to the host: %w", src.n, err)
	}
	return nil
}

// Copy queues a device-to-device copy; dst and src have one length.
func (q *Issuer) Copy(s *Stream, dst, src Mem) error {
	if dst.n != src.n {
		panic(fmt.Sprintf("cuda: Copy of %v into %v", src, dst))
	}
	if dst.n == 0 {
		return nil
	}
	if err := q.drv.MemcpyDtoDAsync(dst.ptr, src.ptr, uint64(dst.n), s.h); err != nil {
		return fmt.Errorf("cuda: copying %d bytes on the device: %w", dst.n, err)
	}
	return nil
}

// Memset8 sets every byte of m to v.
func (q *Issuer) Memset8(s *Stream, m Mem, v byte) error {
	if m.n == 0 {
		return nil
	}
	return q.drv.MemsetD8Async(m.ptr, v, uint64(m.n), s.h)
}

// Memset32 sets every 32-bit word of m (a multiple of 4 bytes, 4-aligned)
// to v: float32(v) patterns, for instance.
func (q *Issuer) Memset32(s *Stream, m Mem, v uint32) error {
	if m.n%4 != 0 {
		panic(fmt.Sprintf("cuda: Memset32 of %v", m))
	}
	if m.n == 0 {
		return nil
	}
	return q.drv.MemsetD32Async(m.ptr, v, uint64(m.n/4), s.h)
}
