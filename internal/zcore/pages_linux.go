//go:build linux

package zcore

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

type mapping struct {
	raw  []byte
	page int // release granularity in elements
}

func mapF32(n int) ([]float32, mapping, error) {
	if n == 0 {
		return []float32{}, mapping{}, nil
	}
	raw, err := syscall.Mmap(-1, 0, 4*n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, mapping{}, fmt.Errorf("mapping %d bytes: %w", 4*n, err)
	}
	m := mapping{raw: raw, page: os.Getpagesize() / 4}
	if len(raw) >= hugePage && syscall.Madvise(raw, syscall.MADV_HUGEPAGE) == nil {
		// Released ranges are then cut at huge page boundaries, so that
		// no huge page is split into small ones.
		m.page = hugePage / 4
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(raw))), n), m, nil
}

// release zeroes [lo, hi) and gives back the whole pages of [olo, ohi)
// that overlap it (the rest of [olo, ohi) reads zero already): to c
// while it has room, if c is not nil, else to the system.
func (m mapping) release(f []float32, lo, hi, olo, ohi int, c *PageCache) {
	base := int(uintptr(unsafe.Pointer(unsafe.SliceData(m.raw))) / 4 % uintptr(m.page)) // mapping start within a page
	// The pages that hold lo and hi, cut at the ends of the mapping, go
	// back too when they lie inside the outer range.
	plo := (base+lo+m.page-1)/m.page*m.page - base
	if down := max(plo-m.page, 0); plo > lo && down >= olo {
		plo = down
	}
	phi := (base+hi)/m.page*m.page - base
	if up := min(phi+m.page, len(f)); phi < hi && up <= ohi {
		phi = up
	}
	if plo >= phi {
		clear(f[lo:hi])
		return
	}
	clear(f[lo:max(lo, plo)])
	clear(f[min(hi, phi):hi])
	if c != nil && m.recycle(plo, phi, c) {
		return
	}
	if err := syscall.Madvise(m.raw[4*plo:4*phi], syscall.MADV_DONTNEED); err != nil {
		clear(f[plo:phi]) // cannot happen on a private anonymous mapping; zero by hand
	}
}

// addr is the address of element i.
func (m mapping) addr(i int) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(m.raw))) + 4*uintptr(i)
}

// recycle moves the whole huge pages of [plo, phi), which lies on page
// boundaries, into c while it has room, and maps [plo, phi) afresh:
// zero, asking for huge pages again, and one mapping where each page
// moved would otherwise leave a piece of its own (the kernel limits a
// process's mappings). It reports false when it moved no page: the
// caller then gives the range back itself.
func (m mapping) recycle(plo, phi int, c *PageCache) bool {
	if m.page != hugePage/4 {
		return false
	}
	start, end := m.addr(plo), m.addr(phi)
	moved := false
	for a := alignUp(start, hugePage); a+hugePage <= end; a += hugePage {
		if !c.put(a) {
			break
		}
		moved = true
	}
	if !moved {
		return false
	}
	// end is a huge page boundary, or the end of the mapping (which the
	// kernel rounded up to a whole page).
	n := alignUp(end, uintptr(os.Getpagesize())) - start
	if _, _, errno := syscall.Syscall6(syscall.SYS_MMAP, start, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_FIXED, ^uintptr(0), 0); errno != 0 {
		// The pages moved out read zero already; the caller gives back
		// the rest.
		c.disable()
		return false
	}
	syscall.Madvise(m.raw[4*plo:4*phi], syscall.MADV_HUGEPAGE)
	return true
}

// acquire replaces the whole huge pages of [lo, hi) with pages from c
// while it holds any, cleared unless overwrite.
func (m mapping) acquire(f []float32, lo, hi int, c *PageCache, overwrite bool) {
	if m.page != hugePage/4 {
		return
	}
	base := m.addr(0)
	for a := alignUp(m.addr(lo), hugePage); a+hugePage <= m.addr(hi); a += hugePage {
		if !c.take(a) {
			return
		}
		if !overwrite {
			i := int(a-base) / 4
			clear(f[i : i+hugePage/4])
		}
	}
}

func alignUp(a, to uintptr) uintptr { return (a + to - 1) &^ (to - 1) }

func (m mapping) unmap() {
	if m.raw != nil {
		syscall.Munmap(m.raw)
	}
}
