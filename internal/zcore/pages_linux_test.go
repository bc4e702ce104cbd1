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

// TestPageCacheMovesPages: released whole huge pages go to the cache up
// to its size (the rest back to the system), stay resident there and not
// in the buffer, and an overwriting Acquire maps those very pages
// elsewhere: they still hold the values released. Trimming gives them back.
func TestPageCacheMovesPages(t *testing.T) {
	huge := (2 << 20) / 4
	n := 6*huge + 9
	c, err := NewPageCache(2)
	if err != nil {
		t.Fatal(err)
	}
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
	f := src.F32()
	for i := range f {
		f[i] = 5
	}
	src.Release(0, n)
	if got := resident(t, src); got >= hugePage {
		t.Errorf("released buffer: %d bytes resident, want none (but what a neighbour's huge page covers)", got)
	}
	if got := c.Held(); got != 2*hugePage {
		t.Fatalf("cache holds %d bytes, want its 2 pages (%d)", got, 2*hugePage)
	}
	// Neighbouring mappings may merge, and a huge page faulted in for one
	// may cover the other's end: count what Acquire adds.
	before := resident(t, dst)
	dst.Acquire(0, n, true)
	if got := c.Held(); got != 0 {
		t.Errorf("cache holds %d bytes after Acquire, want none", got)
	}
	if got := resident(t, dst) - before; got != 2*hugePage {
		t.Errorf("Acquire made %d bytes resident, want the 2 cached pages", got)
	}
	fives := 0
	for _, v := range dst.F32() {
		if v == 5 {
			fives++
		}
	}
	if fives != 2*huge {
		t.Errorf("acquired buffer holds %d of the released values, want the 2 pages' %d", fives, 2*huge)
	}
	dst.Release(0, n)
	if c.Held() != 2*hugePage {
		t.Fatalf("cache holds %d bytes, want 2 pages", c.Held())
	}
	c.s.trim() // what a failed move does (disable)
	if got := c.Held(); got != 0 {
		t.Errorf("cache holds %d bytes after trimming", got)
	}
	before = resident(t, dst)
	dst.Acquire(0, n, true)
	if got := resident(t, dst) - before; got != 0 {
		t.Errorf("Acquire from a trimmed cache made %d bytes resident, want none", got)
	}
}
