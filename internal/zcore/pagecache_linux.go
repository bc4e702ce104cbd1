//go:build linux

package zcore

import (
	"fmt"
	"syscall"
	"unsafe"
)

// mremap(2) flags (linux/mman.h). MREMAP_DONTUNMAP (Linux 5.7) leaves the
// source mapped, empty, so that no hole ever opens in a buffer for
// another mapping to land in.
const (
	mremapMayMove   = 1
	mremapFixed     = 2
	mremapDontUnmap = 4
)

// stash is the cache's address space: slots of one huge page each,
// aligned so that the kernel moves a huge page as one page table entry
// instead of splitting it. A slot that holds no page is mapped without
// memory (reserved, PROT_NONE, or the empty mapping a page left).
type stash struct {
	raw   []byte
	slots []int // byte offsets in raw
	held  []int // slots holding a page, most recently put last
	free  []int
	room  int  // the most pages to hold (setRoom); at most len(slots)
	off   bool // a move failed, or the kernel cannot move pages: hold none
}

func newStash(pages int) (stash, error) {
	if pages <= 0 {
		return stash{}, nil
	}
	raw, err := syscall.Mmap(-1, 0, (pages+1)*hugePage, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return stash{}, fmt.Errorf("reserving %d bytes for the page cache: %w", (pages+1)*hugePage, err)
	}
	s := stash{raw: raw, room: pages}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(raw)))
	first := int(alignUp(a, hugePage) - a)
	for k := range pages {
		s.slots = append(s.slots, first+k*hugePage)
		s.free = append(s.free, pages-1-k)
	}
	return s, nil
}

// move moves the huge page at from to to, replacing the mapping there
// and leaving from mapped and empty.
func move(from, to uintptr) error {
	_, _, errno := syscall.Syscall6(syscall.SYS_MREMAP, from, hugePage, hugePage, mremapMayMove|mremapFixed|mremapDontUnmap, to, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// slot is slot k's address.
func (s *stash) slot(k int) uintptr { return uintptr(unsafe.Pointer(&s.raw[s.slots[k]])) }

func (s *stash) put(a uintptr) bool {
	if s.off || len(s.free) == 0 || len(s.held) >= s.room {
		return false
	}
	k := s.free[len(s.free)-1]
	if move(a, s.slot(k)) != nil {
		s.disable()
		return false
	}
	s.free = s.free[:len(s.free)-1]
	s.held = append(s.held, k)
	return true
}

func (s *stash) take(a uintptr) bool {
	if len(s.held) == 0 {
		return false
	}
	k := s.held[len(s.held)-1]
	if move(s.slot(k), a) != nil {
		s.disable()
		return false
	}
	s.held = s.held[:len(s.held)-1]
	s.free = append(s.free, k)
	return true
}

// setRoom makes n the most pages s holds, giving back the oldest it
// holds beyond that.
func (s *stash) setRoom(n int) {
	s.room = min(max(n, 0), len(s.slots))
	if over := len(s.held) - s.room; over > 0 {
		for _, k := range s.held[:over] {
			syscall.Madvise(s.raw[s.slots[k]:][:hugePage], syscall.MADV_DONTNEED)
			s.free = append(s.free, k)
		}
		s.held = append(s.held[:0], s.held[over:]...)
	}
}

// disable gives the pages back and takes no more.
func (s *stash) disable() {
	s.trim()
	s.off = true
}

func (s *stash) trim() {
	room := s.room
	s.setRoom(0)
	s.room = room
}

func (s *stash) close() {
	if s.raw != nil {
		syscall.Munmap(s.raw)
		s.raw, s.slots, s.held, s.free, s.off = nil, nil, nil, nil, true
	}
}
