package fakecu

import (
	"fmt"
	"sort"
	"unsafe"

	"github.com/dszero/dszero/cuda/driver"
)

// Device addresses start high and only grow: a freed range is never
// handed out again, so a use after free always faults.
const (
	addrBase  = 0x7f00_0000_0000
	addrAlign = 512
	addrGap   = 1 << 16 // unmapped bytes after each allocation
)

type devAlloc struct {
	base uintptr
	size uint64
	buf  []byte
	// freeing is set when cuMemFreeAsync is called: later calls may not
	// name the memory. freed is set when the free runs in stream order:
	// from then on, work still queued elsewhere that touches it faults.
	freeing, freed bool
	pool           *pool
}

// allocTable holds every allocation ever made, sorted by base (bases only
// increase, so appending keeps it sorted).
type allocTable struct {
	list []*devAlloc
	next uintptr
}

func (t *allocTable) add(p *pool, n uint64) *devAlloc {
	if t.next == 0 {
		t.next = addrBase
	}
	words := make([]uint64, (n+7)/8)
	a := &devAlloc{base: t.next, size: n, pool: p}
	if n > 0 {
		a.buf = unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
	}
	t.next += (uintptr(n) + addrAlign - 1) &^ (addrAlign - 1)
	t.next += addrGap
	t.list = append(t.list, a)
	return a
}

// find returns the allocation containing [addr, addr+n), or nil.
func (t *allocTable) find(addr uintptr, n uint64) *devAlloc {
	i := sort.Search(len(t.list), func(i int) bool { return t.list[i].base > addr }) - 1
	if i < 0 {
		return nil
	}
	a := t.list[i]
	if uint64(addr-a.base)+n > a.size {
		return nil
	}
	return a
}

// span resolves [addr, addr+n) of live device memory, under d.mu.
func (d *Driver) span(addr driver.DevicePtr, n uint64) ([]byte, error) {
	a := d.allocs.find(uintptr(addr), n)
	switch {
	case a == nil:
		return nil, fmt.Errorf("[%#x, +%d) is not inside any allocation", uintptr(addr), n)
	case a.freed:
		return nil, fmt.Errorf("[%#x, +%d) was freed", uintptr(addr), n)
	}
	off := uint64(uintptr(addr) - a.base)
	return a.buf[off : off+n], nil
}

// memory is the kernels.Memory of the fake's device memory.
type memory struct{ d *Driver }

func (m memory) Bytes(addr uint64, n int) ([]byte, error) {
	m.d.mu.Lock()
	defer m.d.mu.Unlock()
	return m.d.span(driver.DevicePtr(addr), uint64(n))
}

// pool is a device's default memory pool. used counts live bytes; reserved
// is what the pool holds from the device: it grows with used and shrinks
// to the release threshold only at a synchronisation, or on TrimTo.
type pool struct {
	dev                  int
	capacity             uint64
	threshold            uint64
	used, reserved       uint64
	usedHigh, reservHigh uint64
	allocs               int
}

func (p *pool) synchronized() {
	if p.reserved > p.threshold {
		p.reserved = max(p.used, p.threshold)
	}
}

func poolHandle(dev int) driver.MemPool { return driver.MemPool(0xB00000 + dev) }

func (d *Driver) poolOf(fn string, h driver.MemPool) (*pool, error) {
	i := int(h) - 0xB00000
	if i < 0 || i >= len(d.pools) {
		return nil, errorOf(fn, driver.ErrInvalidValue)
	}
	return d.pools[i], nil
}

func (d *Driver) DeviceGetDefaultMemPool(dev driver.Device) (driver.MemPool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkDevice("cuDeviceGetDefaultMemPool", dev); err != nil {
		return 0, err
	}
	return poolHandle(int(dev)), nil
}

func (d *Driver) MemPoolSetAttribute(h driver.MemPool, a driver.PoolAttr, v uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter("cuMemPoolSetAttribute", false); err != nil {
		return err
	}
	p, err := d.poolOf("cuMemPoolSetAttribute", h)
	if err != nil {
		return err
	}
	switch a {
	case driver.PoolReleaseThreshold:
		p.threshold = v
	case driver.PoolReuseFollowEventDependencies, driver.PoolReuseAllowOpportunistic, driver.PoolReuseAllowInternalDeps:
	case driver.PoolReservedMemHigh:
		p.reservHigh = p.reserved
	case driver.PoolUsedMemHigh:
		p.usedHigh = p.used
	default:
		return errorOf("cuMemPoolSetAttribute", driver.ErrInvalidValue)
	}
	return nil
}

func (d *Driver) MemPoolGetAttribute(h driver.MemPool, a driver.PoolAttr) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter("cuMemPoolGetAttribute", false); err != nil {
		return 0, err
	}
	p, err := d.poolOf("cuMemPoolGetAttribute", h)
	if err != nil {
		return 0, err
	}
	switch a {
	case driver.PoolReleaseThreshold:
		return p.threshold, nil
	case driver.PoolReservedMemCurrent:
		return p.reserved, nil
	case driver.PoolReservedMemHigh:
		return p.reservHigh, nil
	case driver.PoolUsedMemCurrent:
		return p.used, nil
	case driver.PoolUsedMemHigh:
		return p.usedHigh, nil
	}
	return 0, errorOf("cuMemPoolGetAttribute", driver.ErrInvalidValue)
}

func (d *Driver) MemPoolTrimTo(h driver.MemPool, keep uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter("cuMemPoolTrimTo", false); err != nil {
		return err
	}
	p, err := d.poolOf("cuMemPoolTrimTo", h)
	if err != nil {
		return err
	}
	p.reserved = max(p.used, min(p.reserved, keep))
	return nil
}

func (d *Driver) MemAllocFromPoolAsync(n uint64, h driver.MemPool, s driver.Stream) (driver.DevicePtr, error) {
	const fn = "cuMemAllocFromPoolAsync"
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter(fn, true); err != nil {
		return 0, err
	}
	p, err := d.poolOf(fn, h)
	if err != nil {
		return 0, err
	}
	if _, err := d.streamOf(fn, s); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, errorOf(fn, driver.ErrInvalidValue)
	}
	if p.used+n > p.capacity {
		return 0, errorOf(fn, driver.ErrOutOfMemory)
	}
	a := d.allocs.add(p, n)
	p.used += n
	p.allocs++
	p.reserved = max(p.reserved, p.used)
	p.usedHigh, p.reservHigh = max(p.usedHigh, p.used), max(p.reservHigh, p.reserved)
	return driver.DevicePtr(a.base), nil
}

func (d *Driver) MemFreeAsync(ptr driver.DevicePtr, h driver.Stream) error {
	const fn = "cuMemFreeAsync"
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter(fn, true); err != nil {
		return err
	}
	s, err := d.streamOf(fn, h)
	if err != nil {
		return err
	}
	a := d.allocs.find(uintptr(ptr), 0)
	if a == nil || a.base != uintptr(ptr) || a.freeing {
		return errorOf(fn, driver.ErrInvalidValue)
	}
	// The pool may hand the bytes out again to work ordered after this
	// point, so they count as free at once; the memory itself becomes
	// invalid when the stream reaches the free.
	a.freeing = true
	a.pool.used -= a.size
	a.pool.allocs--
	s.pushSync(func() *driver.Error {
		d.mu.Lock()
		defer d.mu.Unlock()
		a.freed = true
		a.buf = nil
		return nil
	})
	return nil
}

// Live reports the bytes and number of allocations live in device dev's pool.
func (d *Driver) Live(dev int) (bytes uint64, allocs int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pools[dev].used, d.pools[dev].allocs
}

type hostAlloc struct {
	base  uintptr
	size  uint64
	words []uint64
}

// pinnedRange reports whether [p, p+n) lies in pinned host memory.
func (d *Driver) pinnedRange(p unsafe.Pointer, n uint64) bool {
	u := uintptr(p)
	for _, h := range d.host {
		if u >= h.base && uint64(u-h.base)+n <= h.size {
			return true
		}
	}
	return false
}

func (d *Driver) MemHostAlloc(n uint64, flags uint32) (unsafe.Pointer, error) {
	const fn = "cuMemHostAlloc"
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter(fn, true); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errorOf(fn, driver.ErrInvalidValue)
	}
	if d.opt.PinnedLimit > 0 && d.pinned+n > d.opt.PinnedLimit {
		return nil, errorOf(fn, driver.ErrOutOfMemory)
	}
	words := make([]uint64, (n+7)/8)
	p := unsafe.Pointer(&words[0])
	d.host[uintptr(p)] = &hostAlloc{base: uintptr(p), size: n, words: words}
	d.pinned += n
	return p, nil
}

func (d *Driver) MemFreeHost(p unsafe.Pointer) error {
	const fn = "cuMemFreeHost"
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter(fn, true); err != nil {
		return err
	}
	h := d.host[uintptr(p)]
	if h == nil {
		return errorOf(fn, driver.ErrInvalidValue)
	}
	delete(d.host, uintptr(p))
	d.pinned -= h.size
	return nil
}

// Pinned reports the bytes of pinned host memory allocated.
func (d *Driver) Pinned() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pinned
}

// checkRange validates a device range at call time, as the driver does
// for copies (CUDA_ERROR_INVALID_VALUE, not a fault).
func (d *Driver) checkRange(fn string, p driver.DevicePtr, n uint64) error {
	if a := d.allocs.find(uintptr(p), n); a == nil || a.freeing {
		return errorOf(fn, driver.ErrInvalidValue)
	}
	return nil
}

// fault is the sticky error of a stream operation that touched memory it
// had no right to.
func fault(fn string, err error) *driver.Error {
	e := errorOf(fn, driver.ErrIllegalAddress)
	e.Msg += ": " + err.Error()
	return e
}

func hostBytes(p unsafe.Pointer, n uint64) []byte { return unsafe.Slice((*byte)(p), n) }

func (d *Driver) MemcpyHtoDAsync(dst driver.DevicePtr, src unsafe.Pointer, n uint64, h driver.Stream) error {
	const fn = "cuMemcpyHtoDAsync"
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter(fn, true); err != nil {
		return err
	}
	s, err := d.streamOf(fn, h)
	if err != nil {
		return err
	}
	if err := d.checkRange(fn, dst, n); err != nil {
		return err
	}
	from := hostBytes(src, n)
	if !d.pinnedRange(src, n) {
		// Pageable memory: the driver stages it before returning, so the
		// caller may reuse it at once.
		from = append([]byte(nil), from...)
	}
	s.push(func() *driver.Error {
		d.mu.Lock()
		to, err := d.span(dst, n)
		d.mu.Unlock()
		if err != nil {
			return fault(fn, err)
		}
		copy(to, from)
		return nil
	})
	return nil
}

func (d *Driver) MemcpyDtoHAsync(dst unsafe.Pointer, src driver.DevicePtr, n uint64, h driver.Stream) error {
	const fn = "cuMemcpyDtoHAsync"
	d.mu.Lock()
	if _, err := d.enter(fn, true); err != nil {
		d.mu.Unlock()
		return err
	}
	s, err := d.streamOf(fn, h)
	if err == nil {
		err = d.checkRange(fn, src, n)
	}
	if err != nil {
		d.mu.Unlock()
		return err
	}
	pinned := d.pinnedRange(dst, n)
	to := hostBytes(dst, n)
	seq := s.push(func() *driver.Error {
		d.mu.Lock()
		from, err := d.span(src, n)
		d.mu.Unlock()
		if err != nil {
			return fault(fn, err)
		}
		copy(to, from)
		return nil
	})
	d.mu.Unlock()
	if !pinned {
		// Into pageable memory the copy is synchronous.
		s.waitSeq(seq)
	}
	return nil
}

func (d *Driver) MemcpyDtoDAsync(dst, src driver.DevicePtr, n uint64, h driver.Stream) error {
	const fn = "cuMemcpyDtoDAsync"
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter(fn, true); err != nil {
		return err
	}
	s, err := d.streamOf(fn, h)
	if err != nil {
		return err
	}
	if err := d.checkRange(fn, dst, n); err != nil {
		return err
	}
	if err := d.checkRange(fn, src, n); err != nil {
		return err
	}
	s.push(func() *driver.Error {
		d.mu.Lock()
		to, err1 := d.span(dst, n)
		from, err2 := d.span(src, n)
		d.mu.Unlock()
		if err1 != nil || err2 != nil {
			return fault(fn, fmt.Errorf("%v %v", err1, err2))
		}
		copy(to, from)
		return nil
	})
	return nil
}

func (d *Driver) memset(fn string, dst driver.DevicePtr, n, width uint64, h driver.Stream, fill func([]byte)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter(fn, true); err != nil {
		return err
	}
	s, err := d.streamOf(fn, h)
	if err != nil {
		return err
	}
	if err := d.checkRange(fn, dst, n*width); err != nil {
		return err
	}
	s.push(func() *driver.Error {
		d.mu.Lock()
		to, err := d.span(dst, n*width)
		d.mu.Unlock()
		if err != nil {
			return fault(fn, err)
		}
		fill(to)
		return nil
	})
	return nil
}

func (d *Driver) MemsetD8Async(dst driver.DevicePtr, v uint8, n uint64, h driver.Stream) error {
	return d.memset("cuMemsetD8Async", dst, n, 1, h, func(b []byte) {
		for i := range b {
			b[i] = v
		}
	})
}

func (d *Driver) MemsetD32Async(dst driver.DevicePtr, v uint32, n uint64, h driver.Stream) error {
	if uintptr(dst)%4 != 0 {
		return errorOf("cuMemsetD32Async", driver.ErrInvalidValue)
	}
	return d.memset("cuMemsetD32Async", dst, n, 4, h, func(b []byte) {
		w := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
		for i := range w {
			w[i] = v
		}
	})
}
