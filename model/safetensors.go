package model

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/dszero/dszero/half"
)

// The safetensors format (https://github.com/huggingface/safetensors):
//
//	u64 little-endian N | N bytes of JSON header | data
//
// The header maps each tensor name to {dtype, shape, data_offsets:[begin,end]}
// (byte offsets into the data section, C order, little endian) and may hold
// "__metadata__": {string: string}. Writers pad the header with spaces to a
// multiple of 8. This reader reads tensors on demand with ReadAt, in
// chunks, straight into the caller's buffer, so a file of any size costs
// one small scratch buffer; the writer streams from the caller's slices.

// maxHeader bounds the JSON header we accept (the reference implementation
// uses 100 MB).
const maxHeader = 100 << 20

// dtypeSize is the element size of each safetensors dtype.
var dtypeSize = map[string]int64{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8,
}

// TensorInfo is one entry of a safetensors header.
type TensorInfo struct {
	Name  string
	DType string // "F32", "F16", "BF16", "I64", ...
	Shape []int
	Begin int64 // byte offsets into the data section: [Begin, End)
	End   int64
}

// Numel is the number of elements.
func (t TensorInfo) Numel() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// SafetensorsFile is an open safetensors file whose tensors are read on
// demand.
type SafetensorsFile struct {
	Path     string
	Tensors  []TensorInfo // in data order
	Metadata map[string]string

	f         *os.File
	dataStart int64
	index     map[string]int
}

// OpenSafetensors reads and validates the header of the file at path.
func OpenSafetensors(path string) (*SafetensorsFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := parseHeader(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return st, nil
}

func parseHeader(path string, f *os.File) (*SafetensorsFile, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var lenBuf [8]byte
	if _, err := io.ReadFull(f, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("%s: not a safetensors file: reading header length: %w", path, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxHeader || int64(n) > fi.Size()-8 {
		return nil, fmt.Errorf("%s: not a safetensors file: header length %d (file is %d bytes)", path, n, fi.Size())
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return nil, fmt.Errorf("%s: reading header: %w", path, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, fmt.Errorf("%s: header is not a JSON object: %w", path, err)
	}
	st := &SafetensorsFile{Path: path, f: f, dataStart: 8 + int64(n), index: map[string]int{}}
	dataLen := fi.Size() - st.dataStart
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &st.Metadata); err != nil {
				return nil, fmt.Errorf("%s: __metadata__ must map strings to strings: %w", path, err)
			}
			continue
		}
		var e struct {
			DType       string  `json:"dtype"`
			Shape       []int64 `json:"shape"`
			DataOffsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("%s: tensor %q: bad header entry: %w", path, name, err)
		}
		size, ok := dtypeSize[e.DType]
		if !ok {
			return nil, fmt.Errorf("%s: tensor %q: unknown dtype %q", path, name, e.DType)
		}
		if len(e.DataOffsets) != 2 {
			return nil, fmt.Errorf("%s: tensor %q: data_offsets %v is not [begin, end]", path, name, e.DataOffsets)
		}
		t := TensorInfo{Name: name, DType: e.DType, Begin: e.DataOffsets[0], End: e.DataOffsets[1]}
		numel := int64(1)
		for _, d := range e.Shape {
			if d < 0 || d > math.MaxInt32 || numel*d > 1<<48 {
				return nil, fmt.Errorf("%s: tensor %q: bad shape %v", path, name, e.Shape)
			}
			numel *= d
			t.Shape = append(t.Shape, int(d))
		}
		if t.Begin < 0 || t.End < t.Begin || t.End > dataLen {
			return nil, fmt.Errorf("%s: tensor %q: data_offsets [%d, %d] outside the %d data bytes", path, name, t.Begin, t.End, dataLen)
		}
		if t.End-t.Begin != numel*size {
			return nil, fmt.Errorf("%s: tensor %q: %s %v needs %d bytes, data_offsets give %d", path, name, t.DType, t.Shape, numel*size, t.End-t.Begin)
		}
		st.Tensors = append(st.Tensors, t)
	}
	slices.SortFunc(st.Tensors, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End), strings.Compare(a.Name, b.Name))
	})
	for i, t := range st.Tensors {
		if i > 0 && t.Begin < st.Tensors[i-1].End {
			return nil, fmt.Errorf("%s: tensors %q and %q overlap", path, st.Tensors[i-1].Name, t.Name)
		}
		st.index[t.Name] = i
	}
	return st, nil
}

// Close closes the file.
func (s *SafetensorsFile) Close() error { return s.f.Close() }

// Lookup returns the header entry of the named tensor.
func (s *SafetensorsFile) Lookup(name string) (TensorInfo, bool) {
	i, ok := s.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return s.Tensors[i], true
}

// chunkBytes is the size of the scratch buffer used to stream tensor data.
const chunkBytes = 1 << 20

// ReadFloat32 reads the named tensor into dst, whose length must be the
// tensor's element count. F32 is copied; F16 and BF16 are widened exactly;
// any other dtype is an error.
func (s *SafetensorsFile) ReadFloat32(name string, dst []float32) error {
	if _, err := s.lookupN(name, len(dst)); err != nil {
		return err
	}
	return s.ReadFloat32Range(name, 0, dst)
}

// ReadFloat32Range reads elements [lo, lo+len(dst)) of the named tensor,
// in C order, into dst, reading only their bytes: a rank loads its slice
// of a checkpoint without the rest.
func (s *SafetensorsFile) ReadFloat32Range(name string, lo int, dst []float32) error {
	t, ok := s.Lookup(name)
	if !ok {
		return fmt.Errorf("%s: no tensor %q", s.Path, name)
	}
	if lo < 0 || lo+len(dst) > t.Numel() {
		return fmt.Errorf("%s: elements [%d, %d) of tensor %q, which has %d", s.Path, lo, lo+len(dst), name, t.Numel())
	}
	var conv func(b []byte, out []float32)
	switch t.DType {
	case "F32":
		conv = func(b []byte, out []float32) {
			for i := range out {
				out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			}
		}
	case "BF16":
		conv = func(b []byte, out []float32) {
			for i := range out {
				out[i] = half.F32FromBF16(binary.LittleEndian.Uint16(b[2*i:]))
			}
		}
	case "F16":
		conv = func(b []byte, out []float32) {
			for i := range out {
				out[i] = half.F32FromF16(binary.LittleEndian.Uint16(b[2*i:]))
			}
		}
	default:
		return fmt.Errorf("%s: tensor %q has dtype %s, want F32 (or F16/BF16, widened exactly)", s.Path, name, t.DType)
	}
	return readChunks(s, t, dtypeSize[t.DType], lo, len(dst), func(b []byte, a, z int) { conv(b, dst[a:z]) })
}

// ReadInt64 reads the named I64 tensor into dst.
func (s *SafetensorsFile) ReadInt64(name string, dst []int64) error {
	t, err := s.lookupN(name, len(dst))
	if err != nil {
		return err
	}
	if t.DType != "I64" {
		return fmt.Errorf("%s: tensor %q has dtype %s, want I64", s.Path, name, t.DType)
	}
	return readChunks(s, t, 8, 0, len(dst), func(b []byte, lo, hi int) {
		for i := lo; i < hi; i++ {
			dst[i] = int64(binary.LittleEndian.Uint64(b[8*(i-lo):]))
		}
	})
}

func (s *SafetensorsFile) lookupN(name string, n int) (TensorInfo, error) {
	t, ok := s.Lookup(name)
	if !ok {
		return t, fmt.Errorf("%s: no tensor %q", s.Path, name)
	}
	if t.Numel() != n {
		return t, fmt.Errorf("%s: tensor %q has %d elements %v, the destination %d", s.Path, name, t.Numel(), t.Shape, n)
	}
	return t, nil
}

// readChunks streams n elements of the tensor from element off in chunks
// of whole elements and hands each chunk, with its range in [0, n), to
// use.
func readChunks(s *SafetensorsFile, t TensorInfo, size int64, off, n int, use func(b []byte, lo, hi int)) error {
	per := int(chunkBytes / size)
	buf := make([]byte, min(int64(n)*size, chunkBytes))
	for lo := 0; lo < n; lo += per {
		hi := min(n, lo+per)
		b := buf[:int64(hi-lo)*size]
		if _, err := s.f.ReadAt(b, s.dataStart+t.Begin+int64(off+lo)*size); err != nil {
			return fmt.Errorf("%s: reading tensor %q: %w", s.Path, t.Name, err)
		}
		use(b, lo, hi)
	}
	return nil
}

// Tensor is a float32 tensor to write: a name, a shape and its data in C
// order (often a view of a flat buffer). If Transpose is set, Data holds
// the 2-D tensor Shape reversed, i.e. (Shape[1], Shape[0]), and is written
// transposed, so the file holds a Shape tensor.
type Tensor struct {
	Name      string
	Shape     []int
	Data      []float32
	Transpose bool
	// DType is the dtype written: "F32" (or ""), "BF16" or "F16" (rounded
	// to nearest even).
	DType string
	// Stream, instead of Data, yields the tensor's values in C order, a
	// piece at a time (not with Transpose): a tensor written without ever
	// being whole in memory.
	Stream func(yield func([]float32) error) error
	// ReadAt, instead of Data or Stream, reads values [off, off+len(dst))
	// of what Data would hold — with Transpose, of the (Shape[1],
	// Shape[0]) tensor — into dst. The writer reads a block of at most
	// readBlock values at a time, each value once: in order, or, with
	// Transpose, a run of every source row per block of the file's rows.
	// A tensor is then written, transposed or not, without ever being
	// whole in memory.
	ReadAt func(dst []float32, off int) error
}

// readBlock is how many values the writer reads from a Tensor.ReadAt at
// a time (16 MiB of float32).
const readBlock = 1 << 22

// WriteSafetensors writes F32 tensors, in the given order, to path. It
// writes path+".tmp" and renames it, so a crash never leaves a truncated
// file under the final name.
func WriteSafetensors(path string, tensors []Tensor, metadata map[string]string) (err error) {
	var hdr strings.Builder
	hdr.WriteByte('{')
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		hdr.WriteString(`"__metadata__":{`)
		for i, k := range keys {
			if i > 0 {
				hdr.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			vb, _ := json.Marshal(metadata[k])
			fmt.Fprintf(&hdr, "%s:%s", kb, vb)
		}
		hdr.WriteByte('}')
	}
	var off int64
	for i, t := range tensors {
		n := 1
		for _, d := range t.Shape {
			n *= d
		}
		if t.Stream == nil && t.ReadAt == nil && n != len(t.Data) || t.Transpose && (len(t.Shape) != 2 || t.Stream != nil) {
			panic(fmt.Sprintf("model: tensor %s: shape %v (transpose %v) does not fit %d elements", t.Name, t.Shape, t.Transpose, len(t.Data)))
		}
		dt := t.DType
		if dt == "" {
			dt = "F32"
		}
		size, ok := dtypeSize[dt]
		if !ok || dt != "F32" && dt != "BF16" && dt != "F16" {
			panic(fmt.Sprintf("model: tensor %s: dtype %q", t.Name, dt))
		}
		if i > 0 || len(metadata) > 0 {
			hdr.WriteByte(',')
		}
		nb, _ := json.Marshal(t.Name)
		sb, _ := json.Marshal(t.Shape)
		if t.Shape == nil {
			sb = []byte("[]")
		}
		fmt.Fprintf(&hdr, `%s:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}`, nb, dt, sb, off, off+size*int64(n))
		off += size * int64(n)
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}

	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(f, chunkBytes)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(hdr.Len()))
	w.Write(lenBuf[:])
	w.WriteString(hdr.String())
	var chunk [4096]byte // 1024 elements
	k := 0
	var put func(v float32)
	put32 := func(v float32) {
		binary.LittleEndian.PutUint32(chunk[k:], math.Float32bits(v))
		if k += 4; k == len(chunk) {
			w.Write(chunk[:])
			k = 0
		}
	}
	put16 := func(b uint16) {
		binary.LittleEndian.PutUint16(chunk[k:], b)
		if k += 2; k == len(chunk) {
			w.Write(chunk[:])
			k = 0
		}
	}
	for _, t := range tensors {
		switch t.DType {
		case "BF16":
			put = func(v float32) { put16(half.BF16FromF32(v)) }
		case "F16":
			put = func(v float32) { put16(half.F16FromF32(v)) }
		default:
			put = put32
		}
		if t.Stream != nil {
			n, want := 0, 1
			for _, d := range t.Shape {
				want *= d
			}
			if err := t.Stream(func(vs []float32) error {
				n += len(vs)
				for _, v := range vs {
					put(v)
				}
				return nil
			}); err != nil {
				return fmt.Errorf("%s: tensor %s: %w", path, t.Name, err)
			}
			if n != want {
				return fmt.Errorf("%s: tensor %s: %d values streamed for shape %v", path, t.Name, n, t.Shape)
			}
			continue
		}
		if t.ReadAt != nil {
			if err := readBlocks(t, put); err != nil {
				return fmt.Errorf("%s: tensor %s: %w", path, t.Name, err)
			}
			continue
		}
		if !t.Transpose {
			for _, v := range t.Data {
				put(v)
			}
			continue
		}
		rows, cols := t.Shape[0], t.Shape[1] // file shape; Data is (cols, rows)
		for r := range rows {
			for c := range cols {
				put(t.Data[c*rows+r])
			}
		}
	}
	w.Write(chunk[:k])
	if err := w.Flush(); err != nil {
		return fmt.Errorf("%s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", tmp, err)
	}
	return os.Rename(tmp, path)
}

// readBlocks puts t's values, in the file's C order, reading them from
// t.ReadAt a block at a time. Transposed, the file's (rows, cols) tensor
// is the source's (cols, rows) one: a block of the file's rows [r0, r1)
// is, in each of the source's cols rows, the run [r0, r1).
func readBlocks(t Tensor, put func(float32)) error {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	if !t.Transpose {
		buf := make([]float32, min(n, readBlock))
		for off := 0; off < n; off += len(buf) {
			b := buf[:min(len(buf), n-off)]
			if err := t.ReadAt(b, off); err != nil {
				return err
			}
			for _, v := range b {
				put(v)
			}
		}
		return nil
	}
	rows, cols := t.Shape[0], t.Shape[1]
	if n == 0 {
		return nil
	}
	per := max(1, readBlock/cols) // file rows per block
	buf := make([]float32, min(rows, per)*cols)
	for r0 := 0; r0 < rows; r0 += per {
		k := min(per, rows-r0)
		for c := range cols { // source row c holds file column c
			if err := t.ReadAt(buf[c*k:(c+1)*k], c*rows+r0); err != nil {
				return err
			}
		}
		for r := range k {
			for c := range cols {
				put(buf[c*k+r])
			}
		}
	}
	return nil
}
