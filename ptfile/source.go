package ptfile

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/dszero/dszero/half"
)

// A Source yields a storage's bytes to the writer a piece at a time, so
// that a checkpoint is written straight from the buffers that hold the
// values (a rank's partitions) instead of from a copy of them in the
// file's byte order: Storage.Src, when Storage.Data is nil.
//
// ReadAt fills p with the storage's bytes [off, off+len(p)), little-endian
// as the file holds them, or returns an error; off and len(p) are
// multiples of the element size. The writer reads every source twice, in
// order — once for the entry's CRC-32, which the zip's local header holds
// before the payload, and once to write it — and the values must not
// change in between (the caller does not step while it saves).
type Source interface {
	ReadAt(p []byte, off int64) (int, error)
}

// viewer is a source whose bytes are already in memory in the file's
// order: the writer hashes and writes them without copying.
type viewer interface {
	view() []byte
}

// littleEndian says the host stores float32 as the file does, so a
// []float32 can be written as its own memory.
func littleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// Float32Source is v as a float32 storage's bytes, without a copy on a
// little-endian host. v must not change until the file is written.
func Float32Source(v []float32) Source { return f32Source(v) }

type f32Source []float32

func (s f32Source) view() []byte {
	if len(s) == 0 || !littleEndian() {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
}

func (s f32Source) ReadAt(p []byte, off int64) (int, error) {
	if err := checkRange(len(p), off, 4, int64(len(s))); err != nil {
		return 0, err
	}
	if b := s.view(); b != nil {
		return copy(p, b[off:]), nil
	}
	v := s[off/4:]
	for i := 0; i < len(p)/4; i++ {
		binary.LittleEndian.PutUint32(p[4*i:], math.Float32bits(v[i]))
	}
	return len(p), nil
}

// Half16Source is v rounded to dt (Float16 or BFloat16, by
// half.F32ToF16 / half.F32ToBF16) as that storage's bytes, converted a
// piece at a time as the writer asks.
func Half16Source(dt DType, v []float32) Source {
	if dt != Float16 && dt != BFloat16 {
		panic("ptfile.Half16Source: " + dt.String())
	}
	return &h16Source{dt: dt, v: v}
}

type h16Source struct {
	dt  DType
	v   []float32
	buf []uint16
}

func (s *h16Source) ReadAt(p []byte, off int64) (int, error) {
	if err := checkRange(len(p), off, 2, int64(len(s.v))); err != nil {
		return 0, err
	}
	total := len(p)
	v := s.v[off/2 : off/2+int64(len(p)/2)]
	const piece = 1 << 16
	if s.buf == nil {
		s.buf = make([]uint16, piece)
	}
	for len(v) > 0 {
		n := min(len(v), piece)
		b := s.buf[:n]
		if s.dt == BFloat16 {
			half.F32ToBF16(b, v[:n])
		} else {
			half.F32ToF16(b, v[:n])
		}
		for i, x := range b {
			binary.LittleEndian.PutUint16(p[2*i:], x)
		}
		v, p = v[n:], p[2*n:]
	}
	return total, nil
}

// PaddedSource is src's first n bytes followed by zeros up to total
// bytes: a partition saved with its padding.
func PaddedSource(src Source, n, total int64) Source {
	if n < 0 || n > total {
		panic(fmt.Sprintf("ptfile.PaddedSource: %d of %d bytes", n, total))
	}
	return paddedSource{src, n, total}
}

type paddedSource struct {
	src      Source
	n, total int64
}

func (s paddedSource) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > s.total {
		return 0, fmt.Errorf("bytes [%d, %d) of a %d-byte source", off, off+int64(len(p)), s.total)
	}
	k := int(max(0, min(int64(len(p)), s.n-off)))
	if k > 0 {
		if _, err := s.src.ReadAt(p[:k], off); err != nil {
			return 0, err
		}
	}
	clear(p[k:])
	return len(p), nil
}

func checkRange(n int, off, size, elems int64) error {
	if off < 0 || off%size != 0 || int64(n)%size != 0 || off+int64(n) > elems*size {
		return fmt.Errorf("bytes [%d, %d) of a %d-byte source of %d-byte elements", off, off+int64(n), elems*size, size)
	}
	return nil
}

// NewSourceTensor makes a contiguous tensor of shape over a new storage
// whose bytes src yields (Storage.Src): a tensor the writer streams. src
// must hold the shape's elements of dt.
func NewSourceTensor(dt DType, shape []int64, src Source) *Tensor {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if !dt.valid() || src == nil {
		panic(fmt.Sprintf("ptfile.NewSourceTensor: %s%v", dt, shape))
	}
	st := &Storage{DType: dt, Numel: n, Location: "cpu", Src: src}
	return &Tensor{DType: dt, Shape: append([]int64{}, shape...), Stride: ContiguousStride(shape), Storage: st}
}

// ViewFloat32 is a float32 tensor of shape over v itself, not a copy
// (Float32Source): the values are read when the file is written.
func ViewFloat32(shape []int64, v []float32) *Tensor {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if n != int64(len(v)) {
		panic(fmt.Sprintf("ptfile.ViewFloat32: %d values for shape %v", len(v), shape))
	}
	return NewSourceTensor(Float32, shape, Float32Source(v))
}
