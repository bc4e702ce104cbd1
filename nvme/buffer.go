package nvme

import (
	"fmt"
	"unsafe"
)

// bufState says who owns a swap buffer's memory.
type bufState uint8

const (
	// bufFree: in the pool; nobody uses it.
	bufFree bufState = iota
	// bufHeld: a caller's (Acquire, or a Read or Prefetch that
	// completed), or the swapper's own while SwapOut copies into it. The
	// holder may read and write its bytes.
	bufHeld
	// bufInFlight: an I/O reads or writes its bytes; nobody else touches
	// them until the I/O completes.
	bufInFlight
)

var bufStateNames = [...]string{"free", "held", "in flight"}

func (s bufState) String() string {
	if int(s) < len(bufStateNames) {
		return bufStateNames[s]
	}
	return fmt.Sprintf("bufState(%d)", uint8(s))
}

// legal transitions: Acquire (free→held), Read or Write submitted
// (held→in flight), Read completed (in flight→held), Write completed
// (in flight→free), Release (held→free).
var bufNext = [...][]bufState{
	bufFree:     {bufHeld},
	bufHeld:     {bufInFlight, bufFree},
	bufInFlight: {bufHeld, bufFree},
}

// Buffer is one swap buffer of a Swapper's pool: Align-aligned memory that
// I/O moves to and from files without another copy (DeepSpeed's pinned
// swap buffers). Its length is the bytes in use; the views F32, U16 and
// Bytes cover them. An acquired buffer holds whatever it held last. A Buffer is not safe for concurrent use, and its
// memory belongs to whoever holds it: the caller between Acquire (or a
// completed Read) and Write or Release, the I/O in between.
type Buffer struct {
	id     int
	data   []byte // Align-aligned; len is the buffer's capacity
	n      int    // bytes in use
	state  bufState
	caller bool // held by a caller, not by SwapOut/SwapIn inside the swapper
}

// to moves the buffer to state next. An illegal move is a programmer error.
func (b *Buffer) to(next bufState) {
	if !b.can(next) {
		panic(b.illegal(next))
	}
	b.state = next
}

func (b *Buffer) can(next bufState) bool {
	for _, ok := range bufNext[b.state] {
		if ok == next {
			return true
		}
	}
	return false
}

func (b *Buffer) illegal(next bufState) string {
	return fmt.Sprintf("nvme: swap buffer %d is %s and cannot become %s (a buffer was used after Write or Release, or by two swaps at once)", b.id, b.state, next)
}

// Len is the number of bytes in use.
func (b *Buffer) Len() int { return b.n }

// Cap is the most bytes the buffer holds.
func (b *Buffer) Cap() int { return len(b.data) }

// Bytes is the bytes in use.
func (b *Buffer) Bytes() []byte { return b.data[:b.n:b.n] }

// F32 views the bytes in use as float32s (Len/4 of them).
func (b *Buffer) F32() []float32 {
	if b.n < 4 {
		return []float32{}
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b.data[0])), b.n/4)
}

// U16 views the bytes in use as uint16s, the bit patterns of fp16 or bf16
// values (Len/2 of them).
func (b *Buffer) U16() []uint16 {
	if b.n < 2 {
		return []uint16{}
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b.data[0])), b.n/2)
}

// padded is the bytes in use rounded up to Align: what I/O moves.
func (b *Buffer) padded() []byte { return b.data[:roundUp(int64(b.n))] }

// alignedBytes returns n zeroed bytes whose address is a multiple of Align.
func alignedBytes(n int) []byte {
	raw := make([]byte, n+Align)
	off := 0
	if rem := int(uintptr(unsafe.Pointer(&raw[0])) % Align); rem != 0 {
		off = Align - rem
	}
	return raw[off : off+n : off+n]
}

// f32Bytes views a float32 slice as its bytes.
func f32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}
