package zcore

// Pages is a zeroed float32 buffer whose ranges can be handed back to the
// operating system while the buffer stays mapped: a released range reads
// as zeros again, and on Linux its whole pages stop being resident until
// they are written again (madvise MADV_DONTNEED on an anonymous mapping).
// A buffer of 2 MiB or more asks for transparent huge pages
// (MADV_HUGEPAGE) and releases whole huge pages only: faulting a
// released gradient buffer back in 4 KiB at a time cost more than the
// backward pass (gpt2, 4 ranks). On other systems Release only zeroes,
// and the buffer stays resident.
//
// A buffer that recycles its pages through a PageCache (Recycle) parks
// the whole huge pages it releases in the cache instead, where they keep
// what they held: a released range reads zero except on parked pages,
// and Acquire, which takes a range back into use, clears them unless the
// caller overwrites the range anyway.
//
// Stage 2 binds the model's gradient buffer to Pages: backward writes a
// unit's gradients, the strategy reduces them into its gradient
// partition, and releases them, so the full-length gradient buffer is
// never resident at once — the role of DeepSpeed's short-lived param.grad
// tensors.
type Pages struct {
	f32    []float32
	m      mapping
	cache  *PageCache // Recycle; nil: releases go to the system
	parked []uint32   // per whole huge page: its generation in cache while parked, else 0
	taken  []int      // acquire's scratch
}

// hugePage is the transparent huge page size of x86-64 and arm64 (4 KiB
// granules) Linux. Buffers of at least this size ask for huge pages: the
// gradient pages stage 2 releases are faulted in again at every
// micro-step, and 4 KiB faults over hundreds of MiB cost more than the
// backward pass itself.
const hugePage = 2 << 20

// HugePageElems is the float32 elements of one huge page: the unit in
// which buffers of that size or more are released and a PageCache holds
// pages.
const HugePageElems = hugePage / 4

// NewPages maps n zeroed elements.
func NewPages(n int) (*Pages, error) {
	f, m, err := mapF32(n)
	if err != nil {
		return nil, err
	}
	return &Pages{f32: f, m: m, parked: make([]uint32, m.hugePages(n))}, nil
}

// F32 is the buffer. It must not be used after Close.
func (p *Pages) F32() []float32 { return p.f32 }

// Release hands elements [lo, hi) back: the pages that lie wholly inside
// the range are given back to the system, where they read zero (or
// parked, see Recycle), the partial pages at its ends are cleared.
func (p *Pages) Release(lo, hi int) {
	p.ReleaseIn(lo, hi, lo, hi)
}

// ReleaseIn is Release of [lo, hi) where the caller knows that the rest
// of [outerLo, outerHi), which holds [lo, hi), is released too (or was
// never written): a page at either end that lies wholly
// inside the outer range is given back too, where Release would only
// clear its part of it and leave it resident. Stage 3 releases a unit's
// gradients so, with the neighbouring units that hold none as the outer
// range: with Release alone every huge page that straddles two units
// stays resident after both are released.
func (p *Pages) ReleaseIn(lo, hi, outerLo, outerHi int) {
	if outerLo < 0 || outerHi > len(p.f32) || outerLo > lo || lo > hi || hi > outerHi {
		panic("zcore: Pages.ReleaseIn out of range")
	}
	p.m.release(p, lo, hi, outerLo, outerHi)
}

// Recycle makes the buffer share c: the whole huge pages it releases are
// parked in c while c has room, and Acquire draws on c. A nil c undoes
// it.
func (p *Pages) Recycle(c *PageCache) {
	if p.cache != nil {
		p.cache.forget(p)
	}
	p.cache = c
}

// Acquire readies [lo, hi), which was released, to be written: its whole
// huge pages parked in the cache are used where they are, the others are
// backed by pages parked elsewhere while the cache holds any, instead of
// by fresh pages at first touch (see PageCache). The range reads zero
// after it, unless overwrite: the caller then promises to write every
// element of [lo, hi) before it reads any, and the pages are not cleared
// (a gather, or a backward that overwrites its gradients). Without a
// cache it does nothing.
func (p *Pages) Acquire(lo, hi int, overwrite bool) {
	if lo < 0 || lo > hi || hi > len(p.f32) {
		panic("zcore: Pages.Acquire out of range")
	}
	if p.cache != nil {
		p.m.acquire(p, lo, hi, overwrite)
	}
}

// Close unmaps the buffer.
func (p *Pages) Close() {
	if p.f32 != nil {
		p.Recycle(nil)
		p.m.unmap()
		p.f32 = nil
	}
}
