package ptfile

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/dszero/dszero/half"
)

// Reading in place. A loader that has somewhere to put a tensor's values
// — the partitions of the engine it restores — reads them there, a piece
// at a time, instead of loading the file's storages (File.Load: a copy of
// the file in memory) and converting them (Float32s: another copy).
// File.Stream makes a file's unloaded storages readable this way: each
// gets a Source reading its entry (File.ReadAt, checked against the
// entry's CRC-32 as it is read; File.Verify checks what a reader left
// unread). Tensor.ReadFloat32 then fills a caller's slice from the
// storage's bytes or its Source.

// Stream gives every storage of f that is not loaded a Source reading its
// bytes from the file (File.ReadAt). The sources are f's: valid until
// Close, and not safe for concurrent use.
func (f *File) Stream() {
	for _, s := range f.Storages {
		if s.Data == nil && s.Src == nil {
			s.Src = fileSource{f, s}
		}
	}
}

type fileSource struct {
	f *File
	s *Storage
}

func (fs fileSource) ReadAt(p []byte, off int64) (int, error) {
	if err := fs.f.ReadAt(fs.s, p, off); err != nil {
		return 0, err
	}
	return len(p), nil
}

// streamPiece is the most bytes ReadFloat32 reads at once.
const streamPiece = 1 << 20

// ReadFloat32 reads a contiguous float32, float16 or bfloat16 tensor's
// elements into dst (len(dst) == Numel), widening 16-bit floats exactly,
// from its storage's Data or, when not loaded, its Source a piece at a
// time: a float32 tensor is read into dst's own memory on a little-endian
// host, without a buffer.
func (t *Tensor) ReadFloat32(dst []float32) error {
	if err := t.check(); err != nil {
		return err
	}
	if !t.Contiguous() {
		return fmt.Errorf("ReadFloat32 of a non-contiguous view %v stride %v", t.Shape, t.Stride)
	}
	if int64(len(dst)) != t.Numel() {
		return fmt.Errorf("ReadFloat32 into %d elements of a tensor of %d", len(dst), t.Numel())
	}
	st, es := t.Storage, t.DType.Size()
	if t.DType != Float32 && t.DType != Float16 && t.DType != BFloat16 {
		return fmt.Errorf("ReadFloat32 of a %s tensor", t.DType)
	}
	read := func(p []byte, off int64) error {
		if st.Data != nil {
			copy(p, st.Data[off:])
			return nil
		}
		if st.Src == nil {
			return fmt.Errorf("storage %q is not loaded", st.Key)
		}
		_, err := st.Src.ReadAt(p, off)
		return err
	}
	base := t.Offset * es
	if t.DType == Float32 && littleEndian() && len(dst) > 0 {
		b := unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst))
		for off := 0; off < len(b); off += streamPiece {
			if err := read(b[off:min(len(b), off+streamPiece)], base+int64(off)); err != nil {
				return err
			}
		}
		return nil
	}
	buf := make([]byte, min(int64(streamPiece), t.Numel()*es))
	u := make([]uint16, len(buf)/2)
	for i := 0; i < len(dst); {
		n := min(len(dst)-i, len(buf)/int(es))
		b := buf[:n*int(es)]
		if err := read(b, base+int64(i)*es); err != nil {
			return err
		}
		v := dst[i : i+n]
		switch t.DType {
		case Float32:
			for j := range v {
				v[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
			}
		default:
			w := u[:n]
			for j := range w {
				w[j] = binary.LittleEndian.Uint16(b[2*j:])
			}
			if t.DType == BFloat16 {
				half.BF16ToF32(v, w)
			} else {
				half.F16ToF32(v, w)
			}
		}
		i += n
	}
	return nil
}
