package ptfile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strconv"
)

// Pickle opcodes the writer emits (protocol 2, plus protocol 3's BINBYTES
// for bytes, which every Python 3 unpickler reads).
const (
	opMark        = '('
	opStop        = '.'
	opBinInt      = 'J'
	opBinInt1     = 'K'
	opBinInt2     = 'M'
	opNone        = 'N'
	opBinPersID   = 'Q'
	opReduce      = 'R'
	opBinUnicode  = 'X'
	opAppend      = 'a'
	opBuild       = 'b'
	opGlobal      = 'c'
	opEmptyDict   = '}'
	opAppends     = 'e'
	opBinGet      = 'h'
	opLongBinGet  = 'j'
	opEmptyList   = ']'
	opBinPut      = 'q'
	opLongBinPut  = 'r'
	opSetItem     = 's'
	opTuple       = 't'
	opEmptyTuple  = ')'
	opSetItems    = 'u'
	opBinFloat    = 'G'
	opBinBytes    = 'B'
	opShortBytes  = 'C'
	opProto       = 0x80
	opNewObj      = 0x81
	opTuple1      = 0x85
	opNewTrue     = 0x88
	opNewFalse    = 0x89
	opLong1       = 0x8a
	opLong4       = 0x8b
	pickleBatch   = 1000 // items per MARK...SETITEMS/APPENDS, as Python batches
	pickleVersion = 2
)

type globalKey struct{ module, name string }

// pickler writes a value tree as torch.save's data.pkl, numbering storages
// in order of first reference (their archive keys "0", "1", ...).
type pickler struct {
	buf      bytes.Buffer
	memo     map[any]uint32 // strings, globals and shared *Dict/*Object/*Tensor
	busy     map[any]bool   // containers being written: meeting one again is a cycle
	storages []*Storage
	keys     map[*Storage]string
}

// marshal pickles root and returns data.pkl and the storages it references.
func marshal(root any) ([]byte, []*Storage, error) {
	p := &pickler{memo: map[any]uint32{}, busy: map[any]bool{}, keys: map[*Storage]string{}}
	p.buf.Write([]byte{opProto, pickleVersion})
	if err := p.value(root, "", 0); err != nil {
		return nil, nil, err
	}
	p.buf.WriteByte(opStop)
	return p.buf.Bytes(), p.storages, nil
}

func (p *pickler) op(b ...byte) { p.buf.Write(b) }

func (p *pickler) uint32(x uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], x)
	p.buf.Write(b[:])
}

// put memoizes the value just written under key.
func (p *pickler) put(key any) {
	i := uint32(len(p.memo))
	p.memo[key] = i
	if i < 256 {
		p.op(opBinPut, byte(i))
	} else {
		p.op(opLongBinPut)
		p.uint32(i)
	}
}

// get writes a reference to a memoized value and reports whether there was one.
func (p *pickler) get(key any) bool {
	i, ok := p.memo[key]
	if !ok {
		return false
	}
	if i < 256 {
		p.op(opBinGet, byte(i))
	} else {
		p.op(opLongBinGet)
		p.uint32(i)
	}
	return true
}

// global writes GLOBAL module\nname\n with Python 2's module names, as
// protocol 2 does.
func (p *pickler) global(module, name string) {
	switch module {
	case "builtins":
		module = "__builtin__"
	case "copyreg":
		module = "copy_reg"
	}
	k := globalKey{module, name}
	if p.get(k) {
		return
	}
	p.op(opGlobal)
	p.buf.WriteString(module + "\n" + name + "\n")
	p.put(k)
}

func (p *pickler) int(x int64) {
	switch {
	case x >= 0 && x < 1<<8:
		p.op(opBinInt1, byte(x))
	case x >= 0 && x < 1<<16:
		p.op(opBinInt2, byte(x), byte(x>>8))
	case x >= math.MinInt32 && x <= math.MaxInt32:
		p.op(opBinInt)
		p.uint32(uint32(int32(x)))
	default:
		p.long(big.NewInt(x))
	}
}

// long writes LONG1/LONG4: little-endian two's complement, shortest form.
func (p *pickler) long(x *big.Int) {
	n := x.BitLen()/8 + 1
	m := new(big.Int).Set(x)
	if x.Sign() < 0 {
		m.Add(m, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	}
	be := m.FillBytes(make([]byte, n))
	le := make([]byte, n)
	for i := range be {
		le[n-1-i] = be[i]
	}
	if n < 256 {
		p.op(opLong1, byte(n))
	} else {
		p.op(opLong4)
		p.uint32(uint32(n))
	}
	p.buf.Write(le)
}

func (p *pickler) str(s string) {
	if p.get(s) {
		return
	}
	p.op(opBinUnicode)
	p.uint32(uint32(len(s)))
	p.buf.WriteString(s)
	p.put(s)
}

func (p *pickler) value(v any, path string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%s: nested deeper than %d (a cycle?)", pathName(path), maxDepth)
	}
	switch x := v.(type) {
	case nil:
		p.op(opNone)
	case bool:
		p.bool(x)
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		n, ok := goInt(x)
		if !ok { // a uint or uint64 above MaxInt64
			u, isU64 := x.(uint64)
			if !isU64 {
				u = uint64(x.(uint))
			}
			p.long(new(big.Int).SetUint64(u))
		} else {
			p.int(n)
		}
	case *big.Int:
		if x.IsInt64() {
			p.int(x.Int64())
		} else {
			p.long(x)
		}
	case float64:
		p.float(x)
	case float32:
		p.float(float64(x))
	case string:
		if len(x) > math.MaxUint32 {
			return fmt.Errorf("%s: string of %d bytes", pathName(path), len(x))
		}
		p.str(x)
	case Bytes:
		if len(x) < 256 {
			p.op(opShortBytes, byte(len(x)))
		} else {
			if len(x) > math.MaxUint32 {
				return fmt.Errorf("%s: bytes of %d", pathName(path), len(x))
			}
			p.op(opBinBytes)
			p.uint32(uint32(len(x)))
		}
		p.buf.Write(x)
	case List:
		p.op(opEmptyList)
		return p.batch(x, path, depth, opAppend, opAppends)
	case Tuple:
		return p.tuple(x, path, depth)
	case Set: // set([items]), as protocol 2 pickles a set
		p.global("builtins", "set")
		p.op(opEmptyList)
		if err := p.batch(x, path, depth, opAppend, opAppends); err != nil {
			return err
		}
		p.op(opTuple1, opReduce)
	case Size: // torch.Size((d0, d1, ...))
		p.global("torch", "Size")
		p.ints(x)
		p.op(opTuple1, opReduce)
	case DType:
		if !x.valid() {
			return fmt.Errorf("%s: invalid dtype %d", pathName(path), x)
		}
		p.global("torch", x.String())
	case *Dict:
		return p.dict(x, path, depth)
	case *Tensor:
		return p.tensor(x, path)
	case *Object:
		return p.object(x, path, depth)
	default:
		return fmt.Errorf("%s: cannot pickle a Go %T", pathName(path), v)
	}
	return nil
}

// goInt converts a Go integer; false for a uint or uint64 above MaxInt64.
func goInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint:
		return int64(x), x <= math.MaxInt64
	case uint64:
		return int64(x), x <= math.MaxInt64
	}
	return 0, false
}

func (p *pickler) bool(b bool) {
	if b {
		p.op(opNewTrue)
	} else {
		p.op(opNewFalse)
	}
}

func pathName(path string) string {
	if path == "" {
		return "root"
	}
	return path
}

func (p *pickler) float(f float64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], math.Float64bits(f))
	p.op(opBinFloat)
	p.buf.Write(b[:])
}

func (p *pickler) ints(x []int64) {
	t := make(Tuple, len(x))
	for i, d := range x {
		t[i] = d
	}
	_ = p.tuple(t, "", 0) // a tuple of ints cannot fail
}

func (p *pickler) tuple(t Tuple, path string, depth int) error {
	if len(t) == 0 {
		p.op(opEmptyTuple)
		return nil
	}
	if len(t) > 3 {
		p.op(opMark)
	}
	for i, x := range t {
		if err := p.value(x, JoinPath(path, i), depth+1); err != nil {
			return err
		}
	}
	if len(t) > 3 {
		p.op(opTuple)
	} else {
		p.op(opTuple1 + byte(len(t)-1))
	}
	return nil
}

// batch appends items to the list (or set items to the dict: pairs) on top
// of the stack, in batches as Python's pickler does.
func (p *pickler) batch(items []any, path string, depth int, one, many byte) error {
	step := 1
	if one == opSetItem {
		step = 2
	}
	for start := 0; start < len(items); start += pickleBatch * step {
		end := min(start+pickleBatch*step, len(items))
		if end-start > step {
			p.op(opMark)
		}
		for i := start; i < end; i += step {
			if step == 2 {
				if err := p.value(items[i], path, depth+1); err != nil {
					return err
				}
				if err := p.value(items[i+1], JoinPath(path, items[i]), depth+1); err != nil {
					return err
				}
			} else if err := p.value(items[i], JoinPath(path, i), depth+1); err != nil {
				return err
			}
		}
		if end-start > step {
			p.op(many)
		} else {
			p.op(one)
		}
	}
	return nil
}

func (p *pickler) enter(x any, path string) (done bool, err error) {
	if p.busy[x] {
		return false, fmt.Errorf("%s: a container inside itself (a cycle)", pathName(path))
	}
	if p.get(x) {
		return true, nil
	}
	p.busy[x] = true
	return false, nil
}

func (p *pickler) dict(d *Dict, path string, depth int) error {
	if done, err := p.enter(d, path); done || err != nil {
		return err
	}
	defer delete(p.busy, d)
	if d.OrderedDict {
		p.global("collections", "OrderedDict")
		p.op(opEmptyTuple, opReduce)
	} else {
		if d.Attrs != nil {
			return fmt.Errorf("%s: a plain dict cannot have attributes (Attrs); make it an OrderedDict", pathName(path))
		}
		p.op(opEmptyDict)
	}
	p.put(d)
	items := make([]any, 0, 2*d.Len())
	for k, v := range d.All() {
		items = append(items, k, v)
	}
	if err := p.batch(items, path, depth, opSetItem, opSetItems); err != nil {
		return err
	}
	if d.Attrs != nil {
		if err := p.dict(d.Attrs, JoinPath(path, "__attrs__"), depth+1); err != nil {
			return err
		}
		p.op(opBuild)
	}
	return nil
}

// tensor writes _rebuild_tensor_v2(storage, offset, size, stride,
// requires_grad, OrderedDict()), wrapped in _rebuild_parameter for an
// nn.Parameter, exactly as torch.save does.
func (p *pickler) tensor(t *Tensor, path string) error {
	if p.get(t) {
		return nil
	}
	if err := t.check(); err != nil {
		return fmt.Errorf("%s: %w", pathName(path), err)
	}
	st := t.Storage
	if !st.DType.valid() || (st.Data == nil || int64(len(st.Data)) != st.NBytes()) && (st.Data != nil || st.Src == nil) {
		return fmt.Errorf("%s: storage holds %d bytes for %d %s elements (not loaded?)", pathName(path), len(st.Data), st.Numel, st.DType)
	}
	if t.Parameter {
		p.global("torch._utils", "_rebuild_parameter")
	}
	p.global("torch._utils", "_rebuild_tensor_v2")
	p.op(opMark)
	// The persistent id: ('storage', torch.FloatStorage, key, location, numel).
	key, ok := p.keys[st]
	if !ok {
		key = strconv.Itoa(len(p.storages))
		p.keys[st] = key
		p.storages = append(p.storages, st)
	}
	loc := st.Location
	if loc == "" {
		loc = "cpu"
	}
	p.op(opMark)
	p.str("storage")
	p.global("torch", st.DType.StorageClass())
	p.str(key)
	p.str(loc)
	p.int(st.Numel)
	p.op(opTuple, opBinPersID)
	p.int(t.Offset)
	p.ints(t.Shape)
	p.ints(t.Stride)
	p.bool(t.RequiresGrad && !t.Parameter)
	p.global("collections", "OrderedDict")
	p.op(opEmptyTuple, opReduce, opTuple, opReduce)
	if t.Parameter {
		p.bool(t.RequiresGrad)
		p.global("collections", "OrderedDict")
		p.op(opEmptyTuple, opReduce, opTuple1+2, opReduce)
	}
	p.put(t)
	return nil
}

func (p *pickler) object(o *Object, path string, depth int) error {
	if done, err := p.enter(o, path); done || err != nil {
		return err
	}
	defer delete(p.busy, o)
	if o.Module == "" || o.Name == "" {
		return fmt.Errorf("%s: object without a class", pathName(path))
	}
	switch o.Kind {
	case ClassRef:
		p.global(o.Module, o.Name)
		return nil
	case EnumMember: // getattr(cls, "member")
		p.global("builtins", "getattr")
		p.global(o.Module, o.Name)
		p.str(o.Attr)
		p.op(opTuple1+1, opReduce)
		p.put(o)
		return nil
	case NewObject, CallObject:
		p.global(o.Module, o.Name)
		if err := p.tuple(o.Args, path, depth); err != nil {
			return err
		}
		if o.Kind == NewObject {
			p.op(opNewObj)
		} else {
			p.op(opReduce)
		}
	default:
		return fmt.Errorf("%s: object of kind %v", pathName(path), o.Kind)
	}
	p.put(o)
	if o.State != nil {
		if err := p.value(o.State, JoinPath(path, "__state__"), depth+1); err != nil {
			return err
		}
		p.op(opBuild)
	}
	return nil
}
