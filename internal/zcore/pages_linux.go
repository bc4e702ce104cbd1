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
		m.page = HugePageElems
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(raw))), n), m, nil
}

// release zeroes [lo, hi) and gives back the whole pages of [olo, ohi)
// that overlap it (the rest of [olo, ohi) is released already): whole
// huge pages parked in p's cache while it has room, the rest to the
// system.
func (m mapping) release(p *Pages, lo, hi, olo, ohi int) {
	f := p.f32
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
	// Park the whole huge pages of [plo, phi); give back the rest in runs.
	from := plo
	if p.cache != nil {
		klo, khi := m.hugeInside(plo, phi, len(p.parked))
		for k := klo; k < khi && p.cache.park(p, k); k++ {
			m.drop(from, m.hugeLo(k))
			from = m.hugeLo(k + 1)
		}
	}
	m.drop(from, phi)
}

// drop gives elements [lo, hi), which lie on page boundaries or at the
// ends of the mapping, back to the system: they read zero.
func (m mapping) drop(lo, hi int) {
	if lo >= hi {
		return
	}
	if err := syscall.Madvise(m.raw[4*lo:4*hi], syscall.MADV_DONTNEED); err != nil {
		clear(unsafe.Slice((*float32)(unsafe.Pointer(&m.raw[4*lo])), hi-lo)) // cannot happen on a private anonymous mapping; zero by hand
	}
}

// firstHuge is the element at which the mapping's first whole huge page
// starts.
func (m mapping) firstHuge() int {
	a := uintptr(unsafe.Pointer(unsafe.SliceData(m.raw)))
	return int(alignUp(a, hugePage)-a) / 4
}

// hugePages is how many whole, aligned huge pages a mapping of n
// elements holds: the pages a cache parks (none without huge pages).
func (m mapping) hugePages(n int) int {
	if m.page != HugePageElems || m.firstHuge() > n {
		return 0
	}
	return (n - m.firstHuge()) / HugePageElems
}

// hugeLo is the first element of whole huge page k.
func (m mapping) hugeLo(k int) int { return m.firstHuge() + k*HugePageElems }

// hugeInside is the whole huge pages [klo, khi) of the first n that lie
// inside elements [lo, hi).
func (m mapping) hugeInside(lo, hi, n int) (klo, khi int) {
	first := m.firstHuge()
	return max(0, ceilDiv(lo-first, HugePageElems)), min(n, (hi-first)/HugePageElems)
}

// hugeOverlapping is the whole huge pages [klo, khi) of the first n that
// overlap elements [lo, hi).
func (m mapping) hugeOverlapping(lo, hi, n int) (klo, khi int) {
	first := m.firstHuge()
	return max(0, (lo-first)/HugePageElems), min(n, ceilDiv(hi-first, HugePageElems))
}

// hugeAddr is the address of whole huge page k.
func (m mapping) hugeAddr(k int) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(m.raw))) + 4*uintptr(m.hugeLo(k))
}

// dropHuge gives whole huge page k back to the system.
func (m mapping) dropHuge(k int) { m.drop(m.hugeLo(k), m.hugeLo(k+1)) }

// movePage moves the huge page at from to to, replacing the mapping
// there and leaving from mapped and empty (MREMAP_DONTUNMAP, Linux 5.7):
// no hole ever opens in a buffer for another mapping to land in.
func movePage(from, to uintptr) error {
	_, _, errno := syscall.Syscall6(syscall.SYS_MREMAP, from, hugePage, hugePage, mremapMayMove|mremapFixed|mremapDontUnmap, to, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// mremap(2) flags (linux/mman.h).
const (
	mremapMayMove   = 1
	mremapFixed     = 2
	mremapDontUnmap = 4
)

// acquire readies [lo, hi) to be written (see Pages.Acquire): its huge
// pages parked in place are taken back into use, the other whole ones
// are backed by parked pages moved here while the cache holds any, and
// all of them are cleared unless overwrite — as are the parts of parked
// pages outside [lo, hi), which belong to released ranges and must read
// zero once the page is in use.
func (m mapping) acquire(p *Pages, lo, hi int, overwrite bool) {
	if len(p.parked) == 0 {
		return
	}
	f := p.f32
	p.taken = p.taken[:0]
	klo, khi := m.hugeOverlapping(lo, hi, len(p.parked))
	for k := klo; k < khi; k++ { // in place first: a steal must not take them
		if !p.cache.unpark(p, k) {
			continue
		}
		p.taken = append(p.taken, k)
		s, e := m.hugeLo(k), m.hugeLo(k+1)
		clear(f[s:max(s, min(lo, e))])
		clear(f[min(e, max(hi, s)):e])
		if !overwrite {
			clear(f[max(s, lo):min(e, hi)])
		}
	}
	taken := p.taken
	klo, khi = m.hugeInside(lo, hi, len(p.parked))
	for k := klo; k < khi; k++ {
		for len(taken) > 0 && taken[0] < k {
			taken = taken[1:]
		}
		if len(taken) > 0 && taken[0] == k {
			continue // in use again where it was parked
		}
		if !p.cache.steal(p, k) {
			return
		}
		if !overwrite {
			clear(f[m.hugeLo(k):m.hugeLo(k+1)])
		}
	}
}

func ceilDiv(a, b int) int {
	if a <= 0 {
		return -((-a) / b)
	}
	return (a + b - 1) / b
}

func alignUp(a, to uintptr) uintptr { return (a + to - 1) &^ (to - 1) }

func (m mapping) unmap() {
	if m.raw != nil {
		syscall.Munmap(m.raw)
	}
}
