package zcore

import "sync"

// PageCache keeps physical memory that recycling Pages release, to back
// the next range they acquire, instead of handing it to the operating
// system and faulting fresh zeroed pages in again — as PyTorch's caching
// allocator keeps freed blocks reserved for the next allocation.
//
// Stage 3 needs this: every step it gathers each unit's parameters and
// writes its gradients into full-length buffers, and releases them again
// as soon as it is done with them, so that only a few units are ever
// resident. With plain releases the kernel allocated, zeroed and mapped
// a fresh 2 MiB page for every 2 MiB a step gathered or wrote: zeroing
// pages alone was 19% of the CPU time of gpt2's stage 3 at 4 in-process
// ranks.
//
// A released whole huge page is parked where it is: it stays mapped and
// resident, holding what it held, and the cache remembers it. A step
// gathers and writes each unit at the same place as the last one, so
// most acquires find their pages parked in place and cost nothing. An
// acquire whose page is not parked steals the oldest parked page of any
// buffer, moved into place with mremap(2) (one system call; the source
// reads zero after it). A gather, or a backward that overwrites its
// gradients, writes the page anyway; any other acquire clears it.
//
// The cache parks at most its room (SetRoom); past that, parking a page
// gives the oldest parked page back to the system. What it adds to the
// resident memory is bounded by its room. On systems other than Linux it
// parks nothing and Pages behave as without it; when a move fails it
// steals no more. A PageCache is safe for concurrent use by the Pages
// that share it.
type PageCache struct {
	mu    sync.Mutex
	room  int          // the most pages parked at once
	n     int          // pages parked now
	queue []parkedPage // parked pages, oldest first; stale entries are skipped
	gen   uint32       // the last generation handed out (never 0)
	still bool         // a move failed: steal no more
}

// parkedPage is page k of p's huge pages, parked as generation gen: the
// entry is stale once p.parked[k] no longer says gen.
type parkedPage struct {
	p   *Pages
	k   int
	gen uint32
}

// NewPageCache makes a cache with room for pages huge pages (2 MiB each).
func NewPageCache(pages int) *PageCache { return &PageCache{room: max(pages, 0)} }

// Held is the bytes of the pages parked now.
func (c *PageCache) Held() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(c.n) * hugePage
}

// SetRoom makes n huge pages the most the cache keeps parked from now on:
// the oldest pages parked beyond n go back to the system at once. An
// owner that knows how much of its buffers was ever live at once keeps
// the cache within that peak less what is live now, so that the cache
// never makes the resident memory exceed the peak the buffers had
// without it — as a caching allocator reserves no more than its peak
// allocation.
func (c *PageCache) SetRoom(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.room = max(n, 0)
	for c.n > c.room {
		c.evictOldest()
	}
}

// Close gives every parked page back to the system.
func (c *PageCache) Close() { c.SetRoom(0) }

// park parks page k of p (if it is not parked already), giving the
// oldest parked page back to make room when the cache is full; false: it
// has no room at all.
func (c *PageCache) park(p *Pages, k int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.parked[k] != 0 {
		return true
	}
	if c.room == 0 {
		return false
	}
	if c.n >= c.room {
		c.evictOldest()
	}
	c.gen++
	if c.gen == 0 {
		c.gen = 1
	}
	p.parked[k] = c.gen
	c.queue = append(c.queue, parkedPage{p, k, c.gen})
	c.n++
	return true
}

// unpark takes page k of p back into use where it is, if it is parked,
// and reports whether it was.
func (c *PageCache) unpark(p *Pages, k int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.parked[k] == 0 {
		return false
	}
	p.parked[k] = 0
	c.n--
	c.compact()
	return true
}

// steal moves the oldest parked page to page k of p, which is not
// parked; false: none is parked, or moves fail.
func (c *PageCache) steal(p *Pages, k int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.still {
		return false
	}
	src, ok := c.oldest()
	if !ok {
		return false
	}
	if movePage(src.p.m.hugeAddr(src.k), p.m.hugeAddr(k)) != nil {
		c.still = true
		return false
	}
	src.p.parked[src.k] = 0
	c.n--
	c.compact()
	return true
}

// forget drops p's parked pages (p is being unmapped or leaves the cache).
func (c *PageCache) forget(p *Pages) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, g := range p.parked {
		if g != 0 {
			p.parked[k] = 0
			c.n--
		}
	}
	c.compact()
}

// oldest pops the oldest entry that is not stale.
func (c *PageCache) oldest() (parkedPage, bool) {
	for len(c.queue) > 0 {
		e := c.queue[0]
		c.queue = c.queue[1:]
		if e.p.parked[e.k] == e.gen {
			return e, true
		}
	}
	return parkedPage{}, false
}

// evictOldest gives the oldest parked page back to the system.
func (c *PageCache) evictOldest() {
	if e, ok := c.oldest(); ok {
		e.p.m.dropHuge(e.k)
		e.p.parked[e.k] = 0
		c.n--
	}
}

// compact drops stale entries once they outnumber the live ones.
func (c *PageCache) compact() {
	if len(c.queue) < 2*c.n+64 {
		return
	}
	q := c.queue[:0]
	for _, e := range c.queue {
		if e.p.parked[e.k] == e.gen {
			q = append(q, e)
		}
	}
	clear(c.queue[len(q):])
	c.queue = q
}
