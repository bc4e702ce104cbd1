package ptfile

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/dszero/dszero/half"
)

// DType is a tensor element type, named as torch names it.
type DType uint8

// The element types a checkpoint can hold. Complex and quantized types are
// not supported.
const (
	Float32 DType = iota + 1
	Float64
	Float16
	BFloat16
	Int64
	Int32
	Int16
	Int8
	Uint8
	Bool
)

var dtypeInfo = [...]struct {
	name    string // torch.<name>
	storage string // torch.<storage>, the class in a storage's persistent id
	size    int64  // bytes per element
}{
	Float32:  {"float32", "FloatStorage", 4},
	Float64:  {"float64", "DoubleStorage", 8},
	Float16:  {"float16", "HalfStorage", 2},
	BFloat16: {"bfloat16", "BFloat16Storage", 2},
	Int64:    {"int64", "LongStorage", 8},
	Int32:    {"int32", "IntStorage", 4},
	Int16:    {"int16", "ShortStorage", 2},
	Int8:     {"int8", "CharStorage", 1},
	Uint8:    {"uint8", "ByteStorage", 1},
	Bool:     {"bool", "BoolStorage", 1},
}

func (d DType) valid() bool { return d > 0 && int(d) < len(dtypeInfo) }

// String is torch's name without the "torch." prefix: "float32", "bfloat16".
func (d DType) String() string {
	if !d.valid() {
		return fmt.Sprintf("DType(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}

// Size is the number of bytes of one element.
func (d DType) Size() int64 {
	if !d.valid() {
		return 0
	}
	return dtypeInfo[d].size
}

// StorageClass is the torch class naming storages of this type
// ("FloatStorage"); torch.save puts it in every storage's persistent id.
func (d DType) StorageClass() string { return dtypeInfo[d].storage }

func dtypeByStorage(name string) (DType, bool) {
	for d := Float32; d.valid(); d++ {
		if dtypeInfo[d].storage == name {
			return d, true
		}
	}
	return 0, false
}

func dtypeByName(name string) (DType, bool) {
	for d := Float32; d.valid(); d++ {
		if dtypeInfo[d].name == name {
			return d, true
		}
	}
	return 0, false
}

// Storage is one flat buffer of Numel elements: the unit torch.save writes
// as one archive entry (data/<Key>). Tensors are views into storages; views
// of one storage share one *Storage.
type Storage struct {
	DType    DType
	Numel    int64
	Location string // device it was saved from: "cpu", "cuda:0"; kept, never acted on
	// Key is the archive entry name under data/ when the storage came from a
	// file. The writer numbers storages itself and ignores it.
	Key string
	// Data holds Numel elements, little-endian, as saved (16-bit floats as
	// their bits). Nil until loaded (File.Load); Read loads every storage.
	Data []byte
	// Src, when Data is nil, yields the bytes to the writer (Source): a
	// storage written straight from the buffer that holds its values.
	Src Source
}

// NBytes is the storage's size in bytes.
func (s *Storage) NBytes() int64 { return s.Numel * s.DType.Size() }

// Tensor is a strided view into a storage, as torch._utils._rebuild_tensor_v2
// rebuilds it: element (i0, i1, ...) is Storage element
// Offset + i0*Stride[0] + i1*Stride[1] + ....
type Tensor struct {
	DType        DType
	Shape        []int64 // () for a scalar
	Stride       []int64 // in elements
	Offset       int64   // in elements
	Storage      *Storage
	RequiresGrad bool
	// Parameter records that the tensor was an nn.Parameter
	// (torch._utils._rebuild_parameter); the writer keeps it one.
	Parameter bool
}

// Numel is the number of elements of the view.
func (t *Tensor) Numel() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

func (t *Tensor) String() string {
	key := ""
	if t.Storage != nil {
		key = t.Storage.Key
	}
	return fmt.Sprintf("%s%v stride %v offset %d storage %q", t.DType, t.Shape, t.Stride, t.Offset, key)
}

// Contiguous reports whether the view is row-major with no gaps.
func (t *Tensor) Contiguous() bool {
	want := int64(1)
	for i := len(t.Shape) - 1; i >= 0; i-- {
		if t.Shape[i] != 1 && t.Stride[i] != want {
			return false
		}
		want *= t.Shape[i]
	}
	return true
}

// check verifies the view against its storage: non-negative sizes, strides
// and offset, no overflow, and every element inside the storage. It is the
// "storage shorter than its tensor view" check of the reader and writer.
func (t *Tensor) check() error {
	if t.Storage == nil {
		return fmt.Errorf("tensor has no storage")
	}
	if t.DType != t.Storage.DType {
		return fmt.Errorf("tensor dtype %s differs from its storage's %s", t.DType, t.Storage.DType)
	}
	if len(t.Shape) != len(t.Stride) {
		return fmt.Errorf("tensor has %d sizes but %d strides", len(t.Shape), len(t.Stride))
	}
	if len(t.Shape) > maxDims {
		return fmt.Errorf("tensor has %d dimensions, more than %d", len(t.Shape), maxDims)
	}
	if t.Offset < 0 {
		return fmt.Errorf("tensor storage offset %d is negative", t.Offset)
	}
	numel, last := uint64(1), uint64(t.Offset)
	for i, d := range t.Shape {
		if d < 0 || t.Stride[i] < 0 {
			return fmt.Errorf("tensor size %v or stride %v is negative", t.Shape, t.Stride)
		}
		hi, n := bits.Mul64(numel, uint64(d))
		if hi != 0 || n > math.MaxInt64 {
			return fmt.Errorf("tensor size %v overflows", t.Shape)
		}
		numel = n
		if d > 0 {
			hi, span := bits.Mul64(uint64(d-1), uint64(t.Stride[i]))
			last += span
			if hi != 0 || last > math.MaxInt64 {
				return fmt.Errorf("tensor view %v stride %v overflows", t.Shape, t.Stride)
			}
		}
	}
	if numel > 0 && int64(last) >= t.Storage.Numel {
		return fmt.Errorf("storage %q holds %d %s elements, shorter than the tensor view %v stride %v offset %d (needs %d)",
			t.Storage.Key, t.Storage.Numel, t.DType, t.Shape, t.Stride, t.Offset, last+1)
	}
	return nil
}

// Bytes returns the view's elements in row-major order as raw little-endian
// bytes (a copy; 16-bit floats stay bits). The storage must be loaded. A
// view with more elements than its storage (an expanded view, stride 0) is
// an error rather than a copy larger than the file: read Storage.Data.
func (t *Tensor) Bytes() ([]byte, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	if t.Storage.Data == nil {
		return nil, fmt.Errorf("storage %q is not loaded", t.Storage.Key)
	}
	if t.Numel() > t.Storage.Numel {
		return nil, fmt.Errorf("tensor view %v stride %v holds %d elements of a %d-element storage (an expanded view): read Storage.Data",
			t.Shape, t.Stride, t.Numel(), t.Storage.Numel)
	}
	es := t.DType.Size()
	out := make([]byte, 0, t.Numel()*es)
	if t.Contiguous() {
		return append(out, t.Storage.Data[t.Offset*es:(t.Offset+t.Numel())*es]...), nil
	}
	var walk func(dim int, at int64)
	walk = func(dim int, at int64) {
		if dim == len(t.Shape) {
			out = append(out, t.Storage.Data[at*es:(at+1)*es]...)
			return
		}
		for i := int64(0); i < t.Shape[dim]; i++ {
			walk(dim+1, at+i*t.Stride[dim])
		}
	}
	if t.Numel() > 0 {
		walk(0, t.Offset)
	}
	return out, nil
}

// Float32s returns the elements as float32 in row-major order. float16 and
// bfloat16 are widened (exactly); other dtypes are an error.
func (t *Tensor) Float32s() ([]float32, error) {
	b, err := t.Bytes()
	if err != nil {
		return nil, err
	}
	switch t.DType {
	case Float32:
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out, nil
	case Float16, BFloat16:
		u := bitsOf(b)
		out := make([]float32, len(u))
		if t.DType == Float16 {
			half.F16ToF32(out, u)
		} else {
			half.BF16ToF32(out, u)
		}
		return out, nil
	}
	return nil, fmt.Errorf("Float32s of a %s tensor", t.DType)
}

// Uint16s returns the bits of a float16 or bfloat16 tensor's elements in
// row-major order, unchanged.
func (t *Tensor) Uint16s() ([]uint16, error) {
	if t.DType != Float16 && t.DType != BFloat16 {
		return nil, fmt.Errorf("Uint16s of a %s tensor", t.DType)
	}
	b, err := t.Bytes()
	if err != nil {
		return nil, err
	}
	return bitsOf(b), nil
}

// Int64s returns an integer or bool tensor's elements as int64 in row-major
// order.
func (t *Tensor) Int64s() ([]int64, error) {
	b, err := t.Bytes()
	if err != nil {
		return nil, err
	}
	es := int(t.DType.Size())
	out := make([]int64, len(b)/max(es, 1))
	for i := range out {
		e := b[i*es:]
		switch t.DType {
		case Int64:
			out[i] = int64(binary.LittleEndian.Uint64(e))
		case Int32:
			out[i] = int64(int32(binary.LittleEndian.Uint32(e)))
		case Int16:
			out[i] = int64(int16(binary.LittleEndian.Uint16(e)))
		case Int8:
			out[i] = int64(int8(e[0]))
		case Uint8, Bool:
			out[i] = int64(e[0])
		default:
			return nil, fmt.Errorf("Int64s of a %s tensor", t.DType)
		}
	}
	return out, nil
}

func bitsOf(b []byte) []uint16 {
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return u
}

// NewTensor makes a contiguous tensor of the given shape over a new storage
// holding data (little-endian elements; not copied). It panics when data
// does not hold exactly the shape's elements: a programmer error.
func NewTensor(dt DType, shape []int64, data []byte) *Tensor {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if !dt.valid() || int64(len(data)) != n*dt.Size() {
		panic(fmt.Sprintf("ptfile.NewTensor: %d bytes for %s%v", len(data), dt, shape))
	}
	st := &Storage{DType: dt, Numel: n, Location: "cpu", Data: data}
	return &Tensor{DType: dt, Shape: append([]int64{}, shape...), Stride: ContiguousStride(shape), Storage: st}
}

// ContiguousStride is the row-major stride of shape.
func ContiguousStride(shape []int64) []int64 {
	s := make([]int64, len(shape))
	acc := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= max(shape[i], 1)
	}
	return s
}

// FromFloat32 makes a float32 tensor of shape holding v (copied).
func FromFloat32(shape []int64, v []float32) *Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return NewTensor(Float32, shape, b)
}

// FromBits16 makes a float16 or bfloat16 tensor of shape from element bits.
func FromBits16(dt DType, shape []int64, v []uint16) *Tensor {
	if dt.Size() != 2 {
		panic("ptfile.FromBits16: " + dt.String())
	}
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return NewTensor(dt, shape, b)
}

// FromInt64 makes an integer tensor (Int64, Int32, Int16, Int8, Uint8 or
// Bool) of shape from v, truncating each value to the dtype's width (Bool:
// nonzero is true).
func FromInt64(dt DType, shape []int64, v []int64) *Tensor {
	es := int(dt.Size())
	b := make([]byte, es*len(v))
	for i, x := range v {
		switch dt {
		case Int64:
			binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
		case Int32:
			binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
		case Int16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(x))
		case Int8, Uint8:
			b[i] = byte(x)
		case Bool:
			if x != 0 {
				b[i] = 1
			}
		default:
			panic("ptfile.FromInt64: " + dt.String())
		}
	}
	return NewTensor(dt, shape, b)
}

// View returns a tensor sharing t's storage with its own offset, shape and
// stride (all in elements); it is an error when the view leaves the storage.
func (t *Tensor) View(offset int64, shape, stride []int64) (*Tensor, error) {
	v := &Tensor{DType: t.DType, Shape: append([]int64{}, shape...), Stride: append([]int64{}, stride...),
		Offset: offset, Storage: t.Storage}
	if err := v.check(); err != nil {
		return nil, err
	}
	return v, nil
}
