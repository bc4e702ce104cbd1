package ptfile

import (
	"errors"
	"fmt"
)

// reduce is pickle's REDUCE (fn(*args)) restricted to the allow-list: the
// torch rebuild functions and OrderedDict, set, torch.Size, getattr and
// bytes are modelled here; an allowed class becomes an opaque CallObject.
// Nothing is called.
func (u *unpickler) reduce(fn, args any) (any, error) {
	g, ok := fn.(*global)
	if !ok {
		return nil, fmt.Errorf("REDUCE on a %s: only allow-listed functions and classes are called", kindOf(fn))
	}
	a, ok := args.(*tupleB)
	if !ok {
		return nil, fmt.Errorf("arguments of %s are a %s, not a tuple", g, kindOf(args))
	}
	items := a.items
	bad := func(what string) error { return fmt.Errorf("%s%s: %s", g, describeArgs(items), what) }
	switch g.role {
	case roleRebuildV2, roleRebuild:
		return rebuildTensor(g, items)
	case roleRebuildParam: // (data, requires_grad, backward_hooks)
		if len(items) != 3 {
			return nil, bad("want (tensor, requires_grad, hooks)")
		}
		t, ok1 := items[0].(*Tensor)
		rg, ok2 := items[1].(bool)
		if !ok1 || !ok2 || !emptyDict(items[2]) {
			return nil, bad("want (tensor, requires_grad, no hooks)")
		}
		p := *t
		p.Parameter, p.RequiresGrad = true, rg
		return &p, nil
	case roleOrderedDict: // () or ([(key, value), ...],)
		d := NewOrderedDict()
		if len(items) == 0 {
			return d, nil
		}
		pairs, ok := builderItems(items[0])
		if len(items) != 1 || !ok {
			return nil, bad("want () or a list of pairs")
		}
		for _, p := range pairs {
			kv, ok := p.(*tupleB)
			if !ok || len(kv.items) != 2 {
				return nil, bad("want () or a list of pairs")
			}
			if err := setItems(d, kv.items); err != nil {
				return nil, err
			}
		}
		return d, nil
	case roleSet: // () or (list,)
		if len(items) == 0 {
			return &setB{}, nil
		}
		elems, ok := builderItems(items[0])
		if len(items) != 1 || !ok {
			return nil, bad("want () or one list")
		}
		return &setB{items: append([]any(nil), elems...)}, nil
	case roleSize:
		if len(items) != 1 {
			return nil, bad("want one tuple of ints")
		}
		dims, err := ints(items[0])
		if err != nil {
			return nil, bad(err.Error())
		}
		return Size(dims), nil
	case roleGetattr: // getattr(EnumClass, "member")
		if len(items) != 2 {
			return nil, bad("want (class, name)")
		}
		c, ok1 := items[0].(*global)
		name, ok2 := items[1].(string)
		if !ok1 || !ok2 || c.role != roleOpaque {
			return nil, bad("getattr is only read as an allow-listed class's member")
		}
		return &Object{Module: c.module, Name: c.name, Kind: EnumMember, Attr: name}, nil
	case roleEncode: // _codecs.encode(str, "latin1"): protocol 2's bytes; bytes() for b""
		if g.name == "bytes" && len(items) == 0 {
			return Bytes{}, nil
		}
		if len(items) != 2 {
			return nil, bad("want (str, encoding)")
		}
		s, ok1 := items[0].(string)
		enc, ok2 := items[1].(string)
		if !ok1 || !ok2 || (enc != "latin1" && enc != "latin-1") {
			return nil, bad("only latin1 strings encode bytes")
		}
		b := make(Bytes, 0, len(s))
		for _, r := range s {
			if r > 0xff {
				return nil, bad("not latin1")
			}
			b = append(b, byte(r))
		}
		return b, nil
	case roleOpaque:
		return &Object{Module: g.module, Name: g.name, Kind: CallObject, Args: append(Tuple{}, items...)}, nil
	}
	return nil, fmt.Errorf("%s cannot be called", g)
}

func describeArgs(items []any) string {
	s := "("
	for i, x := range items {
		if i > 0 {
			s += ", "
		}
		s += kindOf(x)
	}
	return s + ")"
}

func builderItems(v any) ([]any, bool) {
	switch v := v.(type) {
	case *listB:
		return v.items, true
	case *tupleB:
		return v.items, true
	}
	return nil, false
}

func emptyDict(v any) bool {
	d, ok := v.(*Dict)
	return ok && d.Len() == 0 && d.Attrs == nil
}

// ints reads a tuple of ints (a size or stride).
func ints(v any) ([]int64, error) {
	if s, ok := v.(Size); ok {
		return append([]int64{}, s...), nil
	}
	t, ok := v.(*tupleB)
	if !ok {
		return nil, fmt.Errorf("a %s where a tuple of ints goes", kindOf(v))
	}
	out := make([]int64, len(t.items))
	for i, x := range t.items {
		n, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("a %s in a tuple of ints", kindOf(x))
		}
		out[i] = n
	}
	return out, nil
}

// rebuildTensor models torch._utils._rebuild_tensor_v2(storage,
// storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
// and the older _rebuild_tensor(storage, storage_offset, size, stride).
func rebuildTensor(g *global, items []any) (*Tensor, error) {
	bad := func(what string) error { return fmt.Errorf("%s%s: %s", g, describeArgs(items), what) }
	want := 4
	if g.role == roleRebuildV2 {
		want = 6
	}
	if len(items) != want && !(want == 6 && len(items) == 7) {
		return nil, bad(fmt.Sprintf("want %d arguments", want))
	}
	st, ok := items[0].(*Storage)
	if !ok {
		return nil, bad("the first argument is not a storage")
	}
	off, ok := items[1].(int64)
	if !ok {
		return nil, bad("the storage offset is not an int")
	}
	shape, err := ints(items[2])
	if err != nil {
		return nil, bad("size: " + err.Error())
	}
	stride, err := ints(items[3])
	if err != nil {
		return nil, bad("stride: " + err.Error())
	}
	t := &Tensor{DType: st.DType, Shape: shape, Stride: stride, Offset: off, Storage: st}
	if want == 6 {
		rg, ok := items[4].(bool)
		if !ok || !emptyDict(items[5]) {
			return nil, bad("want requires_grad and no backward hooks")
		}
		if len(items) == 7 && items[6] != nil && !emptyDict(items[6]) {
			return nil, bad("tensor metadata is not supported")
		}
		t.RequiresGrad = rg
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	return t, nil
}

type frozen struct {
	v any
	n int64 // values under v, shared references counted each time
}

// freezer turns the machine's containers into final values once: shared
// containers stay shared, a container inside itself is an error (Python
// allows it; no checkpoint needs it and every walk would loop), and the
// expanded size is bounded by max (Options.MaxValues).
type freezer struct {
	done map[any]frozen
	busy map[any]bool
	max  int64
}

var errCycle = errors.New("the pickle has a cycle (a container inside itself)")

func (f *freezer) freeze(v any, depth int) (any, int64, error) {
	if depth > maxDepth {
		return nil, 0, fmt.Errorf("values nested deeper than %d", maxDepth)
	}
	switch x := v.(type) {
	case *global:
		switch x.role {
		case roleDType:
			return x.dtype, 1, nil
		case roleOpaque:
			return &Object{Module: x.module, Name: x.name, Kind: ClassRef}, 1, nil
		}
		return nil, 0, fmt.Errorf("%s used as a value", x)
	case *Storage:
		return nil, 0, errors.New("a storage outside a tensor is not supported")
	case *listB, *tupleB, *setB, *Dict, *Object:
	default:
		return v, 1, nil
	}
	if r, ok := f.done[v]; ok {
		return r.v, r.n, nil
	}
	if f.busy[v] {
		return nil, 0, errCycle
	}
	f.busy[v] = true
	var out any
	n := int64(1)
	add := func(items []any) error {
		for i, x := range items {
			fx, m, err := f.freeze(x, depth+1)
			if err != nil {
				return err
			}
			if n += m; n > f.max {
				return tooManyValues("expands to", f.max)
			}
			items[i] = fx
		}
		return nil
	}
	var err error
	switch x := v.(type) {
	case *listB:
		l := append(List{}, x.items...)
		err, out = add(l), l
	case *tupleB:
		t := append(Tuple{}, x.items...)
		err, out = add(t), t
	case *setB:
		s := append(Set{}, x.items...)
		err, out = add(s), s
	case *Dict:
		err, out = add(x.vals), x
		if err == nil && x.Attrs != nil {
			_, m, e := f.freeze(x.Attrs, depth+1)
			n, err = n+m, e
		}
	case *Object:
		err, out = add(x.Args), x
		if err == nil && x.State != nil {
			var m int64
			x.State, m, err = f.freeze(x.State, depth+1)
			n += m
		}
	}
	if err == nil && n > f.max {
		err = tooManyValues("expands to", f.max)
	}
	if err != nil {
		return nil, 0, err
	}
	delete(f.busy, v)
	f.done[v] = frozen{out, n}
	return out, n, nil
}
