package device

import (
	"fmt"
	"sync/atomic"

	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/mem"
)

// Buffer is n elements of one DType, allocated and accounted by a Device.
// Exactly one of its views is non-nil: f32 for F32, bits for F16 and BF16.
type Buffer struct {
	acct  *mem.Accountant // whose bytes these are; Free must go to the same one
	cat   mem.Category
	tier  mem.Tier
	dtype DType
	n     int
	f32   []float32 // F32 storage, exactly as returned by mem (cap = n)
	bits  []uint16  // F16/BF16 bit patterns, exactly as returned by mem
	freed atomic.Bool
}

// DType is the element type.
func (b *Buffer) DType() DType { return b.dtype }

// Len is the number of elements.
func (b *Buffer) Len() int { return b.n }

// Bytes is the accounted size, Len × DType.Size.
func (b *Buffer) Bytes() int64 { return int64(b.n) * int64(b.dtype.Size()) }

// Category is what the buffer holds, for accounting.
func (b *Buffer) Category() mem.Category { return b.cat }

// Tier is where the buffer lives, for accounting.
func (b *Buffer) Tier() mem.Tier { return b.tier }

func (b *Buffer) String() string {
	return fmt.Sprintf("%s[%d] %s/%s", b.dtype, b.n, b.tier, b.cat)
}

func (b *Buffer) live(op string) {
	if b.freed.Load() {
		panic(fmt.Sprintf("device: %s on freed buffer %v", op, b))
	}
}

// F32 is the storage of an F32 buffer. It panics for other dtypes and after
// Free. The slice must not be used after Free.
func (b *Buffer) F32() []float32 {
	b.live("F32")
	if b.dtype != F32 {
		panic(fmt.Sprintf("device: F32 view of %v", b))
	}
	return b.f32
}

// Bits is the bit-pattern storage of an F16 or BF16 buffer. It panics for
// F32 and after Free. The slice must not be used after Free.
func (b *Buffer) Bits() []uint16 {
	b.live("Bits")
	if b.dtype == F32 {
		panic(fmt.Sprintf("device: Bits view of %v", b))
	}
	return b.bits
}

// CopyFromF32 stores src in the buffer, rounding to the buffer's dtype
// (nearest even, as torch does). len(src) must equal Len.
func (b *Buffer) CopyFromF32(src []float32) {
	b.live("CopyFromF32")
	if len(src) != b.n {
		panic(fmt.Sprintf("device: CopyFromF32 of %d values into %v", len(src), b))
	}
	switch b.dtype {
	case F32:
		copy(b.f32, src)
	case F16:
		half.F32ToF16(b.bits, src)
	case BF16:
		half.F32ToBF16(b.bits, src)
	}
}

// CopyToF32 writes the buffer's values to dst as float32 (exact for every
// dtype). len(dst) must equal Len.
func (b *Buffer) CopyToF32(dst []float32) {
	b.live("CopyToF32")
	if len(dst) != b.n {
		panic(fmt.Sprintf("device: CopyToF32 of %v into %d values", b, len(dst)))
	}
	switch b.dtype {
	case F32:
		copy(dst, b.f32)
	case F16:
		half.F16ToF32(dst, b.bits)
	case BF16:
		half.BF16ToF32(dst, b.bits)
	}
}

// alloc makes an accounted buffer; the Device checks its arguments first.
func alloc(acct *mem.Accountant, cat mem.Category, tier mem.Tier, dt DType, n int) (*Buffer, error) {
	b := &Buffer{acct: acct, cat: cat, tier: tier, dtype: dt, n: n}
	var err error
	if dt == F32 {
		b.f32, err = acct.F32(cat, tier, n)
	} else {
		b.bits, err = acct.U16(cat, tier, n)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// free releases b's bytes to acct, exactly once.
func (b *Buffer) free(acct *mem.Accountant) {
	if b.acct != acct {
		panic(fmt.Sprintf("device: buffer %v freed on a device of rank %d; it belongs to rank %d", b, acct.Rank(), b.acct.Rank()))
	}
	if !b.freed.CompareAndSwap(false, true) {
		panic(fmt.Sprintf("device: buffer %v freed twice", b))
	}
	if b.dtype == F32 {
		acct.FreeF32(b.cat, b.tier, b.f32)
	} else {
		acct.FreeU16(b.cat, b.tier, b.bits)
	}
	b.f32, b.bits = nil, nil
}
