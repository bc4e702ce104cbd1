package cuda

import (
	"errors"
	"fmt"

	"github.com/dszero/dszero/cuda/driver"
)

// Mem is a range of device memory: an allocation, or a view of part of
// one (Slice). It is a plain value; only the allocation itself is freed.
type Mem struct {
	ptr driver.DevicePtr
	n   int64
}

// Ptr is the device address.
func (m Mem) Ptr() driver.DevicePtr { return m.ptr }

// Len is the size in bytes.
func (m Mem) Len() int64 { return m.n }

// IsNull reports whether m is the zero Mem (passed as a null pointer).
func (m Mem) IsNull() bool { return m.ptr == 0 }

// Slice returns bytes [off, off+n) of m; out of range is a programmer
// error and panics.
func (m Mem) Slice(off, n int64) Mem {
	if off < 0 || n < 0 || off+n > m.n {
		panic(fmt.Sprintf("cuda: Mem.Slice(%d, %d) of %d bytes", off, n, m.n))
	}
	return Mem{ptr: m.ptr + driver.DevicePtr(off), n: n}
}

func (m Mem) String() string { return fmt.Sprintf("Mem(%#x, %d bytes)", uintptr(m.ptr), m.n) }

// Alloc takes n bytes from the device's stream-ordered memory pool, usable
// in stream order on s (and on other streams after they wait for an event
// recorded on s after the allocation). The pool keeps freed memory cached
// up to Config.PoolReleaseThreshold, so steady-state allocation costs no
// device call to the OS. An allocation that does not fit returns an
// *OOMError.
func (q *Issuer) Alloc(n int64, s *Stream) (Mem, error) {
	if n <= 0 {
		return Mem{}, fmt.Errorf("cuda: allocation of %d bytes", n)
	}
	p, err := q.drv.MemAllocFromPoolAsync(uint64(n), q.d.pool, s.h)
	if err != nil {
		if driver.IsOutOfMemory(err) {
			return Mem{}, q.oom(n, err)
		}
		return Mem{}, fmt.Errorf("cuda: allocating %d bytes: %w", n, err)
	}
	return Mem{ptr: p, n: n}, nil
}

func (q *Issuer) oom(n int64, err error) *OOMError {
	e := &OOMError{Ordinal: q.d.ordinal, Requested: n, Err: err}
	e.Used, _ = q.drv.MemPoolGetAttribute(q.d.pool, driver.PoolUsedMemCurrent)
	e.Reserved, _ = q.drv.MemPoolGetAttribute(q.d.pool, driver.PoolReservedMemCurrent)
	e.Free, e.Total, _ = q.drv.MemGetInfo()
	return e
}

// Free returns m (an allocation, not a view) to the pool in stream order
// on s: work queued on s before it may still use m; work on other streams
// must be ordered before it with events.
func (q *Issuer) Free(m Mem, s *Stream) error {
	if m.IsNull() {
		return nil
	}
	if err := q.drv.MemFreeAsync(m.ptr, s.h); err != nil {
		return fmt.Errorf("cuda: freeing %v: %w", m, err)
	}
	return nil
}

// MemStats are the pool's and the device's memory figures, in bytes.
type MemStats struct {
	Used, UsedHigh         uint64 // allocated and not freed
	Reserved, ReservedHigh uint64 // held by the pool (Used plus cached)
	Free, Total            uint64 // the device's, as cuMemGetInfo says
}

// MemStats reads the pool's statistics.
func (d *Device) MemStats() (MemStats, error) {
	var st MemStats
	err := d.Do(func(q *Issuer) error {
		var errs []error
		get := func(a driver.PoolAttr, dst *uint64) {
			v, err := q.drv.MemPoolGetAttribute(d.pool, a)
			*dst = v
			errs = append(errs, err)
		}
		get(driver.PoolUsedMemCurrent, &st.Used)
		get(driver.PoolUsedMemHigh, &st.UsedHigh)
		get(driver.PoolReservedMemCurrent, &st.Reserved)
		get(driver.PoolReservedMemHigh, &st.ReservedHigh)
		var err error
		st.Free, st.Total, err = q.drv.MemGetInfo()
		return errors.Join(append(errs, err)...)
	})
	return st, err
}

// TrimPool releases cached pool memory beyond keep bytes to the device.
func (d *Device) TrimPool(keep uint64) error {
	return d.Do(func(q *Issuer) error { return q.drv.MemPoolTrimTo(d.pool, keep) })
}

// Alloc is Issuer.Alloc in its own Do.
func (d *Device) Alloc(n int64, s *Stream) (Mem, error) {
	var m Mem
	err := d.Do(func(q *Issuer) (err error) {
		m, err = q.Alloc(n, s)
		return err
	})
	return m, err
}

// Free is Issuer.Free in its own Do.
func (d *Device) Free(m Mem, s *Stream) error {
	return d.Do(func(q *Issuer) error { return q.Free(m, s) })
}
