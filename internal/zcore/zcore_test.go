package zcore

import (
	"context"
	"math"
	"os"
	"testing"

	"github.com/dszero/dszero/comm/commtest"
)

// TestSoloConformance: the world of one passes the suite every comm
// backend passes.
func TestSoloConformance(t *testing.T) {
	if err := commtest.Check(context.Background(), Solo(), commtest.Cases(1)); err != nil {
		t.Fatal(err)
	}
}

// TestAveraging: DeepSpeed's two rules, exact for powers of two, and the
// float32 operations they are made of otherwise.
func TestAveraging(t *testing.T) {
	g := func() []float32 { return []float32{3, 1, -7, 0.1} }
	apply := func(a Averaging, x []float32) []float32 {
		a.Before(nil, x, 1) // a sum over one rank: the rule does all its arithmetic here
		a.After(nil, x)
		return x
	}
	for _, tc := range []struct {
		name string
		a    Averaging
		want func(x float32) float32
	}{
		{"engine world 4", EngineAveraging(4, false, 1), func(x float32) float32 { return x * 0.25 }},
		{"engine world 3", EngineAveraging(3, false, 1), func(x float32) float32 { return x * float32(1.0/3) }},
		{"engine prescale 3", EngineAveraging(3, true, 1), func(x float32) float32 { return x * float32(1.0/3) }},
		{"engine predivide 2 of 3", EngineAveraging(3, false, 2), func(x float32) float32 { return x * 0.5 * float32(2.0/3) }},
		{"engine predivide = world", EngineAveraging(4, false, 4), func(x float32) float32 { return x * 0.25 }},
		{"zero world 3", ZeroAveraging(3), func(x float32) float32 { return x / 3 }},
		{"zero world 1", ZeroAveraging(1), func(x float32) float32 { return x }},
		{"engine world 1", EngineAveraging(1, false, 1), func(x float32) float32 { return x }},
	} {
		got := apply(tc.a, g())
		for i, x := range g() {
			if w := tc.want(x); math.Float32bits(got[i]) != math.Float32bits(w) {
				t.Errorf("%s: %g → %g, want %g", tc.name, x, got[i], w)
			}
		}
	}
}

// TestPagesRelease: released ranges read as zeros — but for the whole
// huge pages a cache parks, which keep their values until Acquire clears
// them — neighbours keep their values, and the buffer stays usable, for
// a small buffer (4 KiB pages) and one large enough for huge pages (2 MiB
// release granularity), with no page cache, one too small for a range
// and one large enough.
func TestPagesRelease(t *testing.T) {
	small := os.Getpagesize() / 4
	huge := (2 << 20) / 4
	for _, tc := range []struct {
		n      int
		ranges [][2]int
	}{
		{5*small + 7, [][2]int{{3, 3*small + 5}, {0, 2}, {4 * small, 5*small + 7}, {2, 3}}},
		{3*huge + 100, [][2]int{{5, 2*huge + 3}, {0, 3*huge + 100}, {huge - 1, huge + 1}, {huge / 2, 3 * huge}}},
	} {
		for _, cache := range []int{0, 1, 8} {
			releaseEach(t, tc.n, tc.ranges, cache)
		}
	}
}

// parkedAt reports whether element i of p lies on a parked page.
func parkedAt(p *Pages, i int) bool {
	k := (i - p.m.firstHuge()) / HugePageElems
	return i >= p.m.firstHuge() && k < len(p.parked) && p.parked[k] != 0
}

// releaseEach fills a buffer of n elements, recycling through a cache of
// cache pages (none for 0), and releases each range in turn, then
// acquires it back cleared.
func releaseEach(t *testing.T, n int, ranges [][2]int, cache int) {
	t.Helper()
	p, err := NewPages(n)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if cache > 0 {
		c := NewPageCache(cache)
		defer c.Close()
		p.Recycle(c)
	}
	f := p.F32()
	check := func(what string, r [2]int, inside func(i int) float32) {
		t.Helper()
		for i, v := range f {
			want := float32(i + 1)
			if i >= r[0] && i < r[1] {
				want = inside(i)
			}
			if v != want {
				t.Fatalf("n %d, cache %d, %s %v: element %d is %g, want %g", n, cache, what, r, i, v, want)
			}
		}
	}
	parked := 0
	for _, r := range ranges {
		p.Acquire(0, n, true) // the whole buffer in use again
		for i := range f {
			f[i] = float32(i + 1)
		}
		p.Release(r[0], r[1])
		check("release", r, func(i int) float32 {
			if parkedAt(p, i) {
				parked++
				return float32(i + 1) // parked where it was, as it was
			}
			return 0
		})
		p.Acquire(r[0], r[1], false)
		check("cleared acquire after release", r, func(int) float32 { return 0 })
	}
	if huge := n > 2*HugePageElems; huge && cache > 0 && p.m.hugePages(n) > 0 && parked == 0 {
		t.Errorf("n %d, cache %d: no release parked a page", n, cache)
	}
}

// TestPagesAcquire: two buffers share a cache. What one releases the
// other acquires: cleared, it reads zero; for overwriting, it holds
// whatever it holds until written. Neither buffer's other elements
// change, and a page moved away reads zero where it was.
func TestPagesAcquire(t *testing.T) {
	huge := (2 << 20) / 4
	n := 5*huge + 77
	c := NewPageCache(3)
	defer c.Close()
	var bufs [2]*Pages
	for k := range bufs {
		var err error
		if bufs[k], err = NewPages(n); err != nil {
			t.Fatal(err)
		}
		defer bufs[k].Close()
		bufs[k].Recycle(c)
	}
	a, b := bufs[0].F32(), bufs[1].F32()
	for i := range a {
		a[i], b[i] = float32(i+1), -float32(i+1)
	}
	bufs[0].Release(0, n)
	lo, hi := huge/3, 4*huge+5 // at least two whole pages, whatever the alignment
	bufs[1].Release(lo, hi)
	bufs[1].Acquire(lo, hi, false)
	for i, v := range b {
		want := -float32(i + 1)
		if i >= lo && i < hi {
			want = 0
		}
		if v != want {
			t.Fatalf("cleared acquire: element %d is %g, want %g", i, v, want)
		}
	}
	for i, v := range a {
		if want := float32(i + 1); v != 0 && !(parkedAt(bufs[0], i) && v == want) {
			t.Fatalf("released buffer: element %d is %g, want 0 (or %g, parked)", i, v, want)
		}
	}
	// Overwrite: release b's range into the cache and acquire it into a.
	bufs[1].Release(lo, hi)
	bufs[0].Acquire(lo, hi, true)
	for i := lo; i < hi; i++ {
		a[i] = 7
	}
	for i := range n {
		wantA, wantB := float32(0), -float32(i+1)
		if i >= lo && i < hi {
			wantA, wantB = 7, 0
		}
		if parkedAt(bufs[0], i) && a[i] == float32(i+1) {
			wantA = a[i] // still parked, outside the range acquired
		}
		if parkedAt(bufs[1], i) && b[i] != wantB {
			wantB = b[i] // parked: whatever it held
		}
		if a[i] != wantA || b[i] != wantB {
			t.Fatalf("overwriting acquire: element %d is %g and %g, want %g and %g", i, a[i], b[i], wantA, wantB)
		}
	}
}

// TestPagesReleaseIn: ReleaseIn zeroes [lo, hi) and nothing outside the
// outer range, whose rest reads zero as the caller promises.
func TestPagesReleaseIn(t *testing.T) {
	huge := (2 << 20) / 4
	n := 3*huge + 100
	p, err := NewPages(n)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f := p.F32()
	for _, r := range [][4]int{
		{huge / 2, huge + 3, 0, 2 * huge},
		{huge + 1, huge + 2, huge, huge + 5},
		{5, 3 * huge, 0, n},
		{2 * huge, n, huge, n},
		{0, 7, 0, huge},
	} {
		lo, hi, olo, ohi := r[0], r[1], r[2], r[3]
		for i := range f {
			f[i] = float32(i + 1)
			if i >= olo && i < ohi {
				f[i] = 0
			}
		}
		for i := lo; i < hi; i++ {
			f[i] = float32(i + 1)
		}
		p.ReleaseIn(lo, hi, olo, ohi)
		for i, v := range f {
			want := float32(i + 1)
			if i >= olo && i < ohi {
				want = 0
			}
			if v != want {
				t.Fatalf("release %v: element %d is %g, want %g", r, i, v, want)
			}
		}
	}
}

// TestChunks covers [0, n) in order with calls of at most size.
func TestChunks(t *testing.T) {
	for _, tc := range []struct{ n, size, calls int }{{10, 3, 4}, {10, 0, 1}, {10, 20, 1}, {0, 3, 0}, {9, 3, 3}} {
		calls, next := 0, 0
		Chunks(tc.n, tc.size, func(lo, hi int) {
			if lo != next || hi <= lo || tc.size > 0 && hi-lo > tc.size {
				t.Errorf("n %d size %d: chunk [%d, %d) after %d", tc.n, tc.size, lo, hi, next)
			}
			next, calls = hi, calls+1
		})
		if next != tc.n || calls != tc.calls {
			t.Errorf("n %d size %d: %d calls ending at %d, want %d calls", tc.n, tc.size, calls, next, tc.calls)
		}
	}
}
