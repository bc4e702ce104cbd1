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
// pages alone was 14% of the CPU time of gpt2's stage 3 at 4 in-process
// ranks. A cache moves whole released huge pages aside (mremap(2), which
// keeps the physical page) and moves them into the next range acquired,
// where a gather or an overwriting backward writes them anyway, so they
// need no clearing either.
//
// The cache holds at most the pages it was made with; past that,
// releases go back to the system as before, so what it adds to the
// resident memory is bounded by its size. On systems other than Linux,
// or when a move fails, it holds nothing and Pages behave as without it.
// A PageCache is safe for concurrent use by the Pages that share it.
type PageCache struct {
	mu sync.Mutex
	s  stash
}

// NewPageCache makes a cache of up to pages huge pages (2 MiB each).
func NewPageCache(pages int) (*PageCache, error) {
	s, err := newStash(pages)
	if err != nil {
		return nil, err
	}
	return &PageCache{s: s}, nil
}

// Held is the bytes of the pages the cache holds now.
func (c *PageCache) Held() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.s.held)) * hugePage
}

// Close gives the pages back and unmaps the cache.
func (c *PageCache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.close()
}

// put moves the huge page at address a into the cache; false: it has no
// room (or cannot move pages), and the page stays where it is.
func (c *PageCache) put(a uintptr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s.put(a)
}

// take moves a page the cache holds to address a, replacing the empty
// page there; false: it holds none.
func (c *PageCache) take(a uintptr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s.take(a)
}

// SetRoom makes n huge pages the most the cache holds from now on (it
// never holds more than it was made with): pages it holds beyond n go
// back to the system at once, and releases beyond n go there too. A
// cache starts with room for all its pages. An owner that knows how much
// of its buffers was ever live at once keeps the cache within that peak
// less what is live now, so that the cache never makes the resident
// memory exceed the peak the buffers had without it — as a caching
// allocator reserves no more than its peak allocation.
func (c *PageCache) SetRoom(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.setRoom(n)
}

// disable stops the cache taking pages (a move failed).
func (c *PageCache) disable() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.disable()
}
