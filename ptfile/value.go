package ptfile

import (
	"fmt"
	"iter"
	"math/big"
	"strconv"
	"strings"
)

// A checkpoint value (Value in the docs) is one of:
//
//	nil                 None
//	bool, int64, float64, string
//	*big.Int            an int outside int64
//	Bytes               bytes
//	List, Tuple, Set    list, tuple, set (a Set keeps the pickled order)
//	*Dict               dict or collections.OrderedDict, in key order
//	Size                torch.Size
//	DType               a torch.dtype value (torch.float32)
//	*Tensor             a tensor (views of one storage share its *Storage)
//	*Object             an allow-listed class kept opaque
//
// The writer also accepts Go int, int32, uint8...uint32 and float32 where an
// int64 or float64 goes.

// List is a Python list.
type List []any

// Tuple is a Python tuple.
type Tuple []any

// Set is a Python set, in the order the pickle listed it.
type Set []any

// Size is a torch.Size.
type Size []int64

// Bytes is a Python bytes object.
type Bytes []byte

// Dict is a Python dict or collections.OrderedDict. Both keep insertion
// order; setting an existing key replaces its value in place, as Python
// does. Keys are nil, bool, int64, float64, string or DType (Python would
// also take tuples; checkpoints do not use them). Python's 1 == 1.0 == True
// key equality is not modelled: they are three keys here.
type Dict struct {
	// OrderedDict records that the dict was (or is to be written as) a
	// collections.OrderedDict, as torch state dicts and DeepSpeed's
	// param_shapes are; otherwise it is a plain dict.
	OrderedDict bool
	// Attrs is the instance dictionary pickle's BUILD set on an OrderedDict:
	// a torch state dict keeps each module's version in Attrs "_metadata".
	// Nil when there is none.
	Attrs *Dict

	keys, vals []any
	index      map[any]int
}

// NewDict returns an empty plain dict.
func NewDict() *Dict { return &Dict{} }

// DictOf is a dict of the key, value pairs kv, in order. It panics on an
// odd number of arguments (a programmer's error).
func DictOf(kv ...any) *Dict {
	if len(kv)%2 != 0 {
		panic("ptfile: DictOf needs key, value pairs")
	}
	d := NewDict()
	for i := 0; i < len(kv); i += 2 {
		d.Set(kv[i], kv[i+1])
	}
	return d
}

// NewOrderedDict returns an empty collections.OrderedDict.
func NewOrderedDict() *Dict { return &Dict{OrderedDict: true} }

func validKey(k any) bool {
	switch k.(type) {
	case nil, bool, int64, float64, string, DType:
		return true
	}
	return false
}

// Set sets d[key] = v. Go ints are stored as int64. It panics on a key
// of another type: a programmer error.
func (d *Dict) Set(key, v any) {
	if i, ok := key.(int); ok {
		key = int64(i)
	}
	if !validKey(key) {
		panic(fmt.Sprintf("ptfile: dict key of type %T", key))
	}
	if d.index == nil {
		d.index = make(map[any]int)
	}
	if i, ok := d.index[key]; ok {
		d.vals[i] = v
		return
	}
	d.index[key] = len(d.keys)
	d.keys = append(d.keys, key)
	d.vals = append(d.vals, v)
}

// Get returns d[key]. Go ints are looked up as int64.
func (d *Dict) Get(key any) (any, bool) {
	if i, ok := key.(int); ok {
		key = int64(i)
	}
	if !validKey(key) {
		return nil, false
	}
	i, ok := d.index[key]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

// Len is the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

// Keys returns the keys in order (a copy).
func (d *Dict) Keys() []any { return append([]any(nil), d.keys...) }

// All iterates over the items in order.
func (d *Dict) All() iter.Seq2[any, any] {
	return func(yield func(any, any) bool) {
		for i, k := range d.keys {
			if !yield(k, d.vals[i]) {
				return
			}
		}
	}
}

// ObjectKind says how the pickle made an Object.
type ObjectKind uint8

const (
	// NewObject is cls.__new__(cls, *Args) (pickle NEWOBJ) followed by
	// State: how plain Python objects and dataclasses pickle
	// (DeepSpeed's LossScaler, fragment_address; argparse.Namespace).
	NewObject ObjectKind = iota + 1
	// CallObject is cls(*Args) (pickle REDUCE): torch.device("cpu"), and
	// enums pickled by Python before 3.11 (ZeroStageEnum(2)).
	CallObject
	// EnumMember is getattr(cls, Attr): enums pickled by Python 3.11 and
	// later (ZeroStageEnum.gradients).
	EnumMember
	// ClassRef is the class itself used as a value.
	ClassRef
)

func (k ObjectKind) String() string {
	switch k {
	case NewObject:
		return "new"
	case CallObject:
		return "call"
	case EnumMember:
		return "enum"
	case ClassRef:
		return "class"
	}
	return fmt.Sprintf("ObjectKind(%d)", uint8(k))
}

// Object is an instance of an allow-listed class, kept as data: nothing of
// the class runs when it is read, and the writer pickles it back the same way.
type Object struct {
	Module, Name string // "deepspeed.runtime.fp16.loss_scaler", "LossScaler"
	Kind         ObjectKind
	Args         Tuple  // NewObject and CallObject arguments
	Attr         string // EnumMember's member name
	// State is BUILD's argument: usually a *Dict of attributes
	// ({cur_scale: 1.0, dynamic: false}); nil when the pickle had no BUILD.
	State any
}

// Class is "module.Name".
func (o *Object) Class() string { return o.Module + "." + o.Name }

func (o *Object) String() string {
	if o.Kind == EnumMember {
		return o.Class() + "." + o.Attr
	}
	return fmt.Sprintf("%s(%s)", o.Class(), o.Kind)
}

// TypeName names v's Python type for messages: "dict", "OrderedDict",
// "tensor", "deepspeed.utils.tensor_fragment.fragment_address".
func TypeName(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		return "bool"
	case int64, *big.Int, int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case Bytes:
		return "bytes"
	case List:
		return "list"
	case Tuple:
		return "tuple"
	case Set:
		return "set"
	case Size:
		return "torch.Size"
	case DType:
		return "torch.dtype"
	case *Dict:
		if v.OrderedDict {
			return "OrderedDict"
		}
		return "dict"
	case *Tensor:
		return "tensor"
	case *Object:
		return v.Class()
	}
	return fmt.Sprintf("Go %T", v)
}

// Lookup follows path from v and returns the value there. A path is a
// sequence of steps:
//
//	name or .name   a string key of a dict, or a key of an Object's State dict
//	[N]             element N of a list, tuple, set or torch.Size; int key N
//	                of a dict; argument N of an Object
//	["any key"]     a string key in Go quoted syntax, for keys with dots
//
// so "optimizer_state_dict.fp32_flat_groups[0]",
// `module["fc1.weight"]` and "base_optimizer_state.state[0].exp_avg".
func Lookup(v any, path string) (any, error) {
	i := 0
	for i < len(path) {
		var key any
		switch {
		case path[i] == '[' && i+1 < len(path) && path[i+1] == '"':
			q, err := strconv.QuotedPrefix(path[i+1:])
			if err != nil || i+1+len(q) >= len(path) || path[i+1+len(q)] != ']' {
				return nil, fmt.Errorf("path %q: bad quoted key at %d", path, i)
			}
			key, _ = strconv.Unquote(q)
			i += len(q) + 2
		case path[i] == '[':
			j := strings.IndexByte(path[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("path %q: unclosed [ at %d", path, i)
			}
			n, err := strconv.ParseInt(path[i+1:i+j], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("path %q: bad index %q", path, path[i+1:i+j])
			}
			key = n
			i += j + 1
		default:
			if path[i] == '.' {
				i++
			}
			j := i
			for j < len(path) && path[j] != '.' && path[j] != '[' {
				j++
			}
			if j == i {
				return nil, fmt.Errorf("path %q: empty name at %d", path, i)
			}
			key = path[i:j]
			i = j
		}
		next, err := step(v, key)
		if err != nil {
			return nil, fmt.Errorf("path %s: %w", path[:i], err)
		}
		v = next
	}
	return v, nil
}

func step(v any, key any) (any, error) {
	idx := func(n int) (int, error) {
		k, ok := key.(int64)
		if !ok {
			return 0, fmt.Errorf("%s has no key %q", TypeName(v), key)
		}
		if k < 0 || k >= int64(n) {
			return 0, fmt.Errorf("index %d out of range (%s of %d)", k, TypeName(v), n)
		}
		return int(k), nil
	}
	switch v := v.(type) {
	case *Dict:
		if x, ok := v.Get(key); ok {
			return x, nil
		}
		return nil, fmt.Errorf("%s has no key %#v", TypeName(v), key)
	case List, Tuple, Set:
		s := asSlice(v)
		i, err := idx(len(s))
		if err != nil {
			return nil, err
		}
		return s[i], nil
	case Size:
		i, err := idx(len(v))
		if err != nil {
			return nil, err
		}
		return v[i], nil
	case *Object:
		if _, ok := key.(int64); ok {
			i, err := idx(len(v.Args))
			if err != nil {
				return nil, err
			}
			return v.Args[i], nil
		}
		if st, ok := v.State.(*Dict); ok {
			if x, ok := st.Get(key); ok {
				return x, nil
			}
		}
		if key == "__state__" && v.State != nil {
			return v.State, nil
		}
		return nil, fmt.Errorf("%s has no attribute %#v", v.Class(), key)
	}
	return nil, fmt.Errorf("cannot index a %s", TypeName(v))
}

func asSlice(v any) []any {
	switch v := v.(type) {
	case List:
		return v
	case Tuple:
		return v
	case Set:
		return v
	}
	return nil
}

// Get is Lookup followed by a type check: Get[*Tensor](root, "module.w").
func Get[T any](v any, path string) (T, error) {
	var zero T
	x, err := Lookup(v, path)
	if err != nil {
		return zero, err
	}
	t, ok := x.(T)
	if !ok {
		return zero, fmt.Errorf("path %s: is a %s, not %T", path, TypeName(x), zero)
	}
	return t, nil
}

// JoinPath appends one step for key to path: "a" + "b" is "a.b", "a" + 3
// is "a[3]", "a" + "fc1.weight" is `a["fc1.weight"]`; Lookup reads it back.
func JoinPath(path string, key any) string {
	k := pathKey(key)
	if path == "" && k[0] == '.' {
		return k[1:]
	}
	return path + k
}

func pathKey(key any) string {
	switch k := key.(type) {
	case int64:
		return "[" + strconv.FormatInt(k, 10) + "]"
	case int:
		return "[" + strconv.Itoa(k) + "]"
	case string:
		if k != "" && !strings.ContainsAny(k, ".[]") {
			return "." + k
		}
		return "[" + strconv.Quote(k) + "]"
	}
	return fmt.Sprintf("[%v]", key)
}

// Walk calls fn for v and every value inside it, depth first, with its
// path (as Lookup reads it; the root is ""). Dict keys, tensors' storages
// and Dict.Attrs are not visited. fn's error stops the walk.
func Walk(v any, fn func(path string, v any) error) error {
	return walk("", v, fn, 0)
}

func walk(path string, v any, fn func(string, any) error, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("path %s: nested deeper than %d", path, maxDepth)
	}
	if err := fn(path, v); err != nil {
		return err
	}
	switch v := v.(type) {
	case *Dict:
		for k, x := range v.All() {
			if err := walk(JoinPath(path, k), x, fn, depth+1); err != nil {
				return err
			}
		}
	case List, Tuple, Set:
		for i, x := range asSlice(v) {
			if err := walk(JoinPath(path, i), x, fn, depth+1); err != nil {
				return err
			}
		}
	case *Object:
		for i, x := range v.Args {
			if err := walk(JoinPath(path, i), x, fn, depth+1); err != nil {
				return err
			}
		}
		if st, ok := v.State.(*Dict); ok {
			for k, x := range st.All() {
				if err := walk(JoinPath(path, k), x, fn, depth+1); err != nil {
					return err
				}
			}
		} else if v.State != nil {
			return walk(JoinPath(path, "__state__"), v.State, fn, depth+1)
		}
	}
	return nil
}
