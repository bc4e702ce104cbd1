//go:build linux

package zcore

import (
	"os"
	"syscall"
	"testing"
	"unsafe"
)

// resident counts the resident bytes of p's mapping (mincore(2)).
func resident(t *testing.T, p *Pages) int {
	t.Helper()
	pg := os.Getpagesize()
	vec := make([]byte, (len(p.m.raw)+pg-1)/pg)
	_, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(p.m.raw))), uintptr(len(p.m.raw)), uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n * pg
}

// TestPagesReleaseInResidency: two neighbouring ranges, the second
// released with the first (already released) in its outer range, leave no
// page of the buffer resident, where Release alone keeps the page that
// straddles them.
func TestPagesReleaseInResidency(t *testing.T) {
	huge := (2 << 20) / 4
	n := 4*huge + 100
	mid := 2*huge + huge/2 + 3 // inside a page, whatever the mapping's alignment
	for _, in := range []bool{false, true} {
		p, err := NewPages(n)
		if err != nil {
			t.Fatal(err)
		}
		f := p.F32()
		for i := range f {
			f[i] = 1
		}
		p.Release(0, mid)
		if in {
			p.ReleaseIn(mid, n, 0, n)
		} else {
			p.Release(mid, n)
		}
		switch got := resident(t, p); {
		case in && got != 0:
			t.Errorf("ReleaseIn: %d bytes still resident, want none", got)
		case !in && got == 0:
			t.Errorf("Release: nothing resident, want the page that holds element %d", mid)
		}
		p.Close()
	}
}
