package ptfile

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// describe is the canonical description of a value that the tests compare:
// testdata/interop.py computes the same from what torch.load returns. Types,
// key order, float bits, tensor dtype/shape/stride/offset/flags/bytes and
// which tensors share a storage (storages labelled s0, s1, ... in order of
// first appearance; an empty storage is never shared) are all in it.
func describe(v any) string {
	d := &describer{labels: map[*Storage]string{}}
	b, err := json.Marshal(d.value(v))
	if err != nil {
		panic(err)
	}
	return string(b)
}

type describer struct {
	labels map[*Storage]string
	n      int
}

type jmap = map[string]any

func (d *describer) list(items []any) []any {
	out := make([]any, len(items))
	for i, x := range items {
		out[i] = d.value(x)
	}
	return out
}

func (d *describer) value(v any) any {
	switch x := v.(type) {
	case nil:
		return jmap{"t": "none"}
	case bool:
		return jmap{"t": "bool", "v": x}
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		if n, ok := goInt(x); ok {
			return jmap{"t": "int", "v": strconv.FormatInt(n, 10)}
		}
		return jmap{"t": "int", "v": fmt.Sprint(x)}
	case *big.Int:
		return jmap{"t": "int", "v": x.String()}
	case float64:
		return jmap{"t": "float", "v": fmt.Sprintf("%016x", math.Float64bits(x))}
	case string:
		return jmap{"t": "str", "v": x}
	case Bytes:
		return jmap{"t": "bytes", "v": hex.EncodeToString(x)}
	case List:
		return jmap{"t": "list", "items": d.list(x)}
	case Tuple:
		return jmap{"t": "tuple", "items": d.list(x)}
	case Set:
		items := d.list(x)
		sort.Slice(items, func(i, j int) bool { return jsonString(items[i]) < jsonString(items[j]) })
		return jmap{"t": "set", "items": items}
	case Size:
		return jmap{"t": "size", "v": nz(x)}
	case DType:
		return jmap{"t": "dtype", "v": x.String()}
	case *Dict:
		items := []any{}
		for k, val := range x.All() {
			items = append(items, []any{d.value(k), d.value(val)})
		}
		out := jmap{"t": "dict", "items": items}
		if x.OrderedDict {
			out["t"] = "OrderedDict"
		}
		if x.Attrs != nil && x.Attrs.Len() > 0 {
			out["attrs"] = d.value(x.Attrs)
		}
		return out
	case *Tensor:
		label, ok := d.labels[x.Storage]
		if !ok || x.Storage.Numel == 0 {
			label = fmt.Sprintf("s%d", d.n)
			d.n++
			d.labels[x.Storage] = label
		}
		data, err := x.Bytes()
		if err != nil { // an expanded view (fuzzing makes them): its storage
			data = append([]byte("storage:"), x.Storage.Data...)
		}
		return jmap{"t": "tensor", "dtype": x.DType.String(), "shape": nz(x.Shape), "stride": nz(x.Stride),
			"offset": x.Offset, "requires_grad": x.RequiresGrad, "param": x.Parameter, "storage": label,
			"storage_numel": x.Storage.Numel, "data": hex.EncodeToString(data)}
	case *Object:
		out := jmap{"t": "object", "class": x.Class(), "kind": x.Kind.String()}
		switch x.Kind {
		case EnumMember:
			out["attr"] = x.Attr
		case NewObject, CallObject:
			out["args"] = d.list(x.Args)
		}
		if x.State != nil {
			out["state"] = d.value(x.State)
		}
		return out
	}
	panic(fmt.Sprintf("describe: %T", v))
}

func nz(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// canonicalJSON re-encodes JSON text the way describe encodes (sorted keys).
func canonicalJSON(s string) (string, error) {
	var v any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	b, err := json.Marshal(v)
	return string(b), err
}

// firstDiff shows where two descriptions part.
func firstDiff(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	lo := max(0, i-120)
	return fmt.Sprintf("at byte %d:\n  go:    ...%s\n  other: ...%s", i, a[lo:min(len(a), i+120)], b[lo:min(len(b), i+120)])
}

// jnode is JSON with object keys in file order (checkpoint.json lists dict
// items in the order DeepSpeed saved them).
type jnode struct {
	obj  []jfield
	arr  []*jnode
	val  any // string, json.Number, bool, nil
	kind byte
}

type jfield struct {
	key string
	val *jnode
}

func parseOrdered(dec *json.Decoder) (*jnode, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		n := &jnode{kind: '{'}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := parseOrdered(dec)
			if err != nil {
				return nil, err
			}
			n.obj = append(n.obj, jfield{k.(string), v})
		}
		_, err := dec.Token()
		return n, err
	case json.Delim('['):
		n := &jnode{kind: '['}
		for dec.More() {
			v, err := parseOrdered(dec)
			if err != nil {
				return nil, err
			}
			n.arr = append(n.arr, v)
		}
		_, err := dec.Token()
		return n, err
	}
	return &jnode{val: tok}, nil
}

func (n *jnode) get(key string) *jnode {
	for _, f := range n.obj {
		if f.key == key {
			return f.val
		}
	}
	return nil
}

func (n *jnode) str(key string) string {
	if c := n.get(key); c != nil {
		s, _ := c.val.(string)
		return s
	}
	return ""
}
