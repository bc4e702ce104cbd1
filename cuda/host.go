package cuda

import (
	"errors"
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/dszero/dszero/cuda/driver"
)

// HostBuffer is page-locked (pinned) host memory, outside the Go heap:
// the GPU copies to and from it asynchronously, at full bus speed. Its
// Bytes, F32 and Bits views are ordinary slices over that memory; they
// must not be used after FreeHost.
type HostBuffer struct {
	p     unsafe.Pointer
	n     int64 // bytes asked for
	class int64 // bytes allocated (the size class)
	freed bool
}

// Len is the size in bytes.
func (h *HostBuffer) Len() int64 { return h.n }

// Bytes is the buffer's memory.
func (h *HostBuffer) Bytes() []byte {
	h.live()
	return unsafe.Slice((*byte)(h.p), h.n)
}

// F32 is the buffer as float32s (Len/4 of them).
func (h *HostBuffer) F32() []float32 {
	h.live()
	return unsafe.Slice((*float32)(h.p), h.n/4)
}

// Bits is the buffer as 16-bit patterns (Len/2 of them).
func (h *HostBuffer) Bits() []uint16 {
	h.live()
	return unsafe.Slice((*uint16)(h.p), h.n/2)
}

func (h *HostBuffer) live() {
	if h.freed {
		panic("cuda: HostBuffer used after FreeHost")
	}
}

func (h *HostBuffer) check(op string, off, n int64) {
	h.live()
	if off < 0 || n < 0 || off+n > h.n {
		panic(fmt.Sprintf("cuda: %s of %d bytes at %d of a %d-byte host buffer", op, n, off, h.n))
	}
}

// hostCache caches pinned blocks by size class, because cuMemHostAlloc
// takes milliseconds (it pins pages): a freed block is kept, with an event
// recorded on the stream that last used it, and handed out again once that
// event has completed. This is PyTorch's CachingHostAllocator's contract.
type hostCache struct {
	free   map[int64][]cachedBlock
	live   int64 // bytes handed out
	cached int64 // bytes idle in the cache
}

type cachedBlock struct {
	p  unsafe.Pointer
	ev driver.Event // 0: reusable at once
}

// hostClass rounds n up to its size class: powers of two from 64 KiB to
// 1 GiB (at most half wasted), then whole 64 MiB.
func hostClass(n int64) int64 {
	switch {
	case n <= 64<<10:
		return 64 << 10
	case n <= 1<<30:
		return 1 << (64 - bits.LeadingZeros64(uint64(n-1)))
	}
	return (n + 64<<20 - 1) &^ (64<<20 - 1)
}

// AllocHost returns n bytes of pinned host memory, from the cache when a
// block of its size class is free and no longer in use by the GPU. Pinned
// memory that cannot be had returns an *OOMError.
func (q *Issuer) AllocHost(n int64) (*HostBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: pinned allocation of %d bytes", n)
	}
	c := &q.hostCache
	class := hostClass(n)
	list := c.free[class]
	for i, b := range list {
		if b.ev != 0 {
			done, err := q.drv.EventQuery(b.ev)
			if err != nil {
				return nil, err
			}
			if !done {
				continue
			}
			q.events = append(q.events, b.ev)
		}
		c.free[class] = append(list[:i], list[i+1:]...)
		c.cached -= class
		c.live += class
		return &HostBuffer{p: b.p, n: n, class: class}, nil
	}
	p, err := q.drv.MemHostAlloc(uint64(class), driver.HostAllocPortable)
	if err != nil {
		if driver.IsOutOfMemory(err) {
			return nil, &OOMError{Ordinal: q.d.ordinal, Requested: class, Err: fmt.Errorf("pinned host memory: %w", err)}
		}
		return nil, fmt.Errorf("cuda: pinning %d bytes: %w", class, err)
	}
	c.live += class
	return &HostBuffer{p: p, n: n, class: class}, nil
}

// FreeHost returns h to the cache. If the GPU may still be copying to or
// from it, pass the stream of that work: the block is reused only after
// the work queued on s so far has completed. h must not be used again.
func (q *Issuer) FreeHost(h *HostBuffer, s *Stream) error {
	h.live()
	h.freed = true
	b := cachedBlock{p: h.p}
	if s != nil {
		if len(q.events) == 0 {
			e, err := q.drv.EventCreate(driver.EventDisableTiming)
			if err != nil {
				return err
			}
			q.events = append(q.events, e)
		}
		b.ev = q.events[len(q.events)-1]
		q.events = q.events[:len(q.events)-1]
		if err := q.drv.EventRecord(b.ev, s.h); err != nil {
			return err
		}
	}
	c := &q.hostCache
	if c.free == nil {
		c.free = map[int64][]cachedBlock{}
	}
	c.free[h.class] = append(c.free[h.class], b)
	c.live -= h.class
	c.cached += h.class
	return nil
}

// HostStats reports pinned bytes in use and idle in the cache.
type HostStats struct{ Live, Cached int64 }

// HostStats reads the pinned-memory cache's figures.
func (d *Device) HostStats() (HostStats, error) {
	var st HostStats
	err := d.Do(func(q *Issuer) error {
		st = HostStats{Live: q.hostCache.live, Cached: q.hostCache.cached}
		return nil
	})
	return st, err
}

// TrimHostCache unpins every cached block whose last use has completed.
func (d *Device) TrimHostCache() error {
	return d.Do(func(q *Issuer) error { return q.hostCache.trim(q, false) })
}

// trim frees the idle blocks; with all, blocks still in use by the GPU
// too (at Close, after the caller's streams are done).
func (c *hostCache) trim(q *Issuer, all bool) error {
	var errs []error
	for class, list := range c.free {
		keep := list[:0]
		for _, b := range list {
			if b.ev != 0 && !all {
				done, err := q.drv.EventQuery(b.ev)
				if err != nil {
					return err
				}
				if !done {
					keep = append(keep, b)
					continue
				}
			}
			if b.ev != 0 {
				q.events = append(q.events, b.ev)
			}
			errs = append(errs, q.drv.MemFreeHost(b.p))
			c.cached -= class
		}
		c.free[class] = keep
	}
	return errors.Join(errs...)
}

func (c *hostCache) drop(d *Device) error { return c.trim(d.q, true) }

// AllocHost is Issuer.AllocHost in its own Do.
func (d *Device) AllocHost(n int64) (*HostBuffer, error) {
	var h *HostBuffer
	err := d.Do(func(q *Issuer) (err error) {
		h, err = q.AllocHost(n)
		return err
	})
	return h, err
}

// FreeHost is Issuer.FreeHost in its own Do.
func (d *Device) FreeHost(h *HostBuffer, s *Stream) error {
	return d.Do(func(q *Issuer) error { return q.FreeHost(h, s) })
}
