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

// TestPageCacheParksPages: released whole huge pages stay parked in place
// up to the cache's room (the rest go back to the system), still
// resident and holding their values; an acquire of the same range takes
// them back where they are, an acquire elsewhere moves those very pages
// there (they read zero where they were), a clearing acquire zeroes
// them, and SetRoom(0) gives them back.
func TestPageCacheParksPages(t *testing.T) {
	huge := (2 << 20) / 4
	n := 6*huge + 9
	c := NewPageCache(2)
	defer c.Close()
	src, err := NewPages(n)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := NewPages(n)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	src.Recycle(c)
	dst.Recycle(c)
	count := func(f []float32, v float32) (k int) {
		for _, x := range f {
			if x == v {
				k++
			}
		}
		return k
	}
	// Neighbouring mappings may merge, and a huge page faulted in for one
	// may cover the other's end: compare residency with slack below a page.
	near := func(got, want int) bool { return got >= want && got < want+hugePage }
	f := src.F32()
	for i := range f {
		f[i] = 5
	}
	src.Release(0, n)
	if got := c.Held(); got != 2*hugePage {
		t.Fatalf("cache holds %d bytes, want its 2 pages (%d)", got, 2*hugePage)
	}
	if got := resident(t, src); !near(got, 2*hugePage) {
		t.Errorf("released buffer: %d bytes resident, want the 2 parked pages", got)
	}
	if got := count(f, 5); got != 2*huge {
		t.Errorf("released buffer holds %d fives, want the 2 parked pages' %d", got, 2*huge)
	}
	src.Acquire(0, n, true) // in place
	if got := c.Held(); got != 0 {
		t.Errorf("cache holds %d bytes after Acquire, want none", got)
	}
	if got := count(f, 5); got != 2*huge {
		t.Errorf("acquired in place: %d fives, want the parked pages' %d", got, 2*huge)
	}
	src.Release(0, n)
	before := resident(t, dst)
	dst.Acquire(0, n, true) // moved here
	if got := c.Held(); got != 0 {
		t.Errorf("cache holds %d bytes after stealing, want none", got)
	}
	if got := resident(t, dst) - before; got != 2*hugePage {
		t.Errorf("Acquire made %d bytes resident, want the 2 parked pages", got)
	}
	if got := count(dst.F32(), 5); got != 2*huge {
		t.Errorf("acquired buffer holds %d of the released values, want the 2 pages' %d", got, 2*huge)
	}
	if got := resident(t, src); got >= hugePage { // before reading src maps the zero page
		t.Errorf("the pages moved away: %d bytes still resident", got)
	}
	if got := count(f, 0); got != n {
		t.Errorf("the pages moved away: %d of %d elements read zero", got, n)
	}
	dst.Release(0, n)
	dst.Acquire(0, n, false) // cleared
	if got := count(dst.F32(), 0); got != n {
		t.Errorf("cleared acquire: %d of %d elements read zero", got, n)
	}
	dst.Release(0, n)
	c.SetRoom(0)
	if got := c.Held(); got != 0 {
		t.Errorf("cache holds %d bytes after SetRoom(0)", got)
	}
	if got := count(dst.F32(), 0); got != n {
		t.Errorf("given back: %d of %d elements read zero", got, n)
	}
	before = resident(t, src)
	src.Acquire(0, n, true)
	if got := resident(t, src) - before; got != 0 {
		t.Errorf("Acquire from an empty cache made %d bytes resident, want none", got)
	}
}
