//go:build linux

package zcore

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// hugePage is the transparent huge page size of x86-64 and arm64 (4 KiB
// granules) Linux. Buffers of at least this size ask for huge pages: the
// gradient pages stage 2 releases are faulted in again at every
// micro-step, and 4 KiB faults over hundreds of MiB cost more than the
// backward pass itself.
const hugePage = 2 << 20

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
// that overlap it (the rest of [olo, ohi) reads zero already).
func (m mapping) release(f []float32, lo, hi, olo, ohi int) {
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
	if err := syscall.Madvise(m.raw[4*plo:4*phi], syscall.MADV_DONTNEED); err != nil {
		clear(f[plo:phi]) // cannot happen on a private anonymous mapping; zero by hand
	}
}

func (m mapping) unmap() {
	if m.raw != nil {
		syscall.Munmap(m.raw)
	}
}
