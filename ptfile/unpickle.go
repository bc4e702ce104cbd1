package ptfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
)

// Limits on what a pickle may build. Real checkpoints are far inside them;
// they stop crafted files from exhausting the stack or memory.
const (
	// maxDepth bounds nesting (Python's own pickler stops near 1000).
	maxDepth = 1000
	// maxDims bounds a tensor's dimensions (NumPy's limit).
	maxDims = 64
)

// Containers under construction. Pickle builds lists, sets and dicts empty,
// memoizes them, then fills them, so they must be mutable while the machine
// runs; freeze turns them into List, Tuple and Set once it stops.
type (
	listB  struct{ items []any }
	tupleB struct{ items []any }
	setB   struct{ items []any }
)

// unpickler runs the pickle machine over one data.pkl. It supports the
// binary opcodes of protocols 2 to 5 that data needs (the set torch's
// weights_only unpickler supports, plus protocol 4's framing, short strings,
// memoize, stack_global and sets); text-protocol opcodes, extension codes
// and out-of-band buffers are errors.
type unpickler struct {
	data  []byte
	pos   int
	op    int // offset of the opcode being run, for errors
	stack []any
	marks []int // stack heights at each MARK
	memo  map[uint32]any
	allow *allowList
	built int64 // values pushed and memoized so far: bounded by allow.maxValues
	// persistent resolves a persistent id (a storage) to a *Storage.
	persistent func(pid []any) (*Storage, error)
}

var opNames = map[byte]string{
	'(': "MARK", '.': "STOP", '0': "POP", '1': "POP_MARK", '2': "DUP", 'J': "BININT", 'K': "BININT1",
	'M': "BININT2", 'N': "NONE", 'Q': "BINPERSID", 'R': "REDUCE", 'T': "BINSTRING", 'U': "SHORT_BINSTRING",
	'X': "BINUNICODE", 'a': "APPEND", 'b': "BUILD", 'c': "GLOBAL", 'd': "DICT", '}': "EMPTY_DICT",
	'e': "APPENDS", 'h': "BINGET", 'j': "LONG_BINGET", 'l': "LIST", ']': "EMPTY_LIST", 'q': "BINPUT",
	'r': "LONG_BINPUT", 's': "SETITEM", 't': "TUPLE", ')': "EMPTY_TUPLE", 'u': "SETITEMS", 'G': "BINFLOAT",
	0x80: "PROTO", 0x81: "NEWOBJ", 0x85: "TUPLE1", 0x86: "TUPLE2", 0x87: "TUPLE3", 0x88: "NEWTRUE",
	0x89: "NEWFALSE", 0x8a: "LONG1", 0x8b: "LONG4", 'B': "BINBYTES", 'C': "SHORT_BINBYTES",
	0x8c: "SHORT_BINUNICODE", 0x8d: "BINUNICODE8", 0x8e: "BINBYTES8", 0x8f: "EMPTY_SET", 0x90: "ADDITEMS",
	0x92: "NEWOBJ_EX", 0x93: "STACK_GLOBAL", 0x94: "MEMOIZE", 0x95: "FRAME",
}

// unpickle runs data and returns the frozen result.
func unpickle(data []byte, allow *allowList, persistent func([]any) (*Storage, error)) (any, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty pickle", errTruncated)
	}
	u := &unpickler{data: data, memo: map[uint32]any{}, allow: allow, persistent: persistent}
	v, err := u.run()
	if err != nil {
		code := u.data[min(u.op, len(u.data)-1)]
		name, ok := opNames[code]
		if !ok {
			name = fmt.Sprintf("opcode 0x%02x", code)
		}
		return nil, fmt.Errorf("offset %d (%s): %w", u.op, name, err)
	}
	f := &freezer{done: map[any]frozen{}, busy: map[any]bool{}, max: allow.maxValues}
	out, _, err := f.freeze(v, 0)
	return out, err
}

var errTruncated = errors.New("pickle data truncated")

func (u *unpickler) read(n uint64) ([]byte, error) {
	if n > uint64(len(u.data)-u.pos) {
		return nil, fmt.Errorf("%w: %d bytes wanted, %d left", errTruncated, n, len(u.data)-u.pos)
	}
	b := u.data[u.pos : u.pos+int(n)]
	u.pos += int(n)
	return b, nil
}

func (u *unpickler) uint(n int) (uint64, error) {
	b, err := u.read(uint64(n))
	if err != nil {
		return 0, err
	}
	var x uint64
	for i := n - 1; i >= 0; i-- {
		x = x<<8 | uint64(b[i])
	}
	return x, nil
}

// line reads up to and without the next '\n' (GLOBAL's operands).
func (u *unpickler) line() (string, error) {
	for i := u.pos; i < len(u.data); i++ {
		if u.data[i] == '\n' {
			s := string(u.data[u.pos:i])
			u.pos = i + 1
			return s, nil
		}
	}
	return "", fmt.Errorf("%w: no end of line", errTruncated)
}

func (u *unpickler) push(v any) {
	u.built++
	u.stack = append(u.stack, v)
}

// tooManyValues is the refusal of a pickle that builds or expands to more
// than max values.
func tooManyValues(what string, max int64) error {
	return &refusal{msg: fmt.Sprintf("the pickle %s more than %d values (a checkpoint's hold far fewer: a corrupt or crafted file)", what, max),
		option: "MaxValues", hint: "Options.MaxValues raises the limit"}
}

func (u *unpickler) floor() int {
	if len(u.marks) == 0 {
		return 0
	}
	return u.marks[len(u.marks)-1]
}

func (u *unpickler) pop() (any, error) {
	if len(u.stack) <= u.floor() {
		return nil, errors.New("stack underflow")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	if len(u.stack) <= u.floor() {
		return nil, errors.New("stack underflow")
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark returns the items pushed since the last MARK and drops the mark.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, errors.New("no MARK on the stack")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

// popN pops n items, deepest first.
func (u *unpickler) popN(n int) ([]any, error) {
	if len(u.stack)-u.floor() < n {
		return nil, errors.New("stack underflow")
	}
	items := append([]any(nil), u.stack[len(u.stack)-n:]...)
	u.stack = u.stack[:len(u.stack)-n]
	return items, nil
}

func (u *unpickler) run() (any, error) {
	for {
		u.op = u.pos
		if u.pos >= len(u.data) {
			u.op = len(u.data) - 1
			return nil, fmt.Errorf("%w: no STOP", errTruncated)
		}
		code := u.data[u.pos]
		u.pos++
		if code == '.' {
			return u.pop()
		}
		if err := u.step(code); err != nil {
			return nil, err
		}
		if u.built > u.allow.maxValues {
			return nil, tooManyValues("builds", u.allow.maxValues)
		}
	}
}

func (u *unpickler) step(code byte) error {
	switch code {
	case 0x80: // PROTO
		if _, err := u.read(1); err != nil {
			return err
		}
	case 0x95: // FRAME: framing only groups reads; the data is all here
		n, err := u.uint(8)
		if err != nil {
			return err
		}
		if n > uint64(len(u.data)-u.pos) {
			return fmt.Errorf("%w: frame of %d bytes, %d left", errTruncated, n, len(u.data)-u.pos)
		}
	case '(':
		u.marks = append(u.marks, len(u.stack))
	case '0': // POP
		if len(u.stack) == u.floor() && len(u.marks) > 0 {
			_, err := u.popMark()
			return err
		}
		_, err := u.pop()
		return err
	case '1': // POP_MARK
		_, err := u.popMark()
		return err
	case '2': // DUP
		v, err := u.top()
		if err != nil {
			return err
		}
		u.push(v)
	case 'N':
		u.push(nil)
	case 0x88:
		u.push(true)
	case 0x89:
		u.push(false)
	case 'K', 'M', 'J': // BININT1, BININT2, BININT
		n := argWidth(code)
		x, err := u.uint(n)
		if err != nil {
			return err
		}
		if code == 'J' {
			u.push(int64(int32(uint32(x))))
		} else {
			u.push(int64(x))
		}
	case 0x8a, 0x8b: // LONG1, LONG4
		var n uint64
		var err error
		if code == 0x8a {
			n, err = u.uint(1)
		} else if n, err = u.uint(4); err == nil && int32(uint32(n)) < 0 {
			err = errors.New("negative LONG4 length")
		}
		if err != nil {
			return err
		}
		b, err := u.read(n)
		if err != nil {
			return err
		}
		u.push(decodeLong(b))
	case 'G':
		x, err := u.read(8)
		if err != nil {
			return err
		}
		u.push(math.Float64frombits(binary.BigEndian.Uint64(x)))
	case 'X', 0x8c, 0x8d, 'T', 'U': // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8, BINSTRING, SHORT_BINSTRING
		b, err := u.counted(code)
		if err != nil {
			return err
		}
		u.push(string(b))
	case 'B', 'C', 0x8e: // BINBYTES, SHORT_BINBYTES, BINBYTES8
		b, err := u.counted(code)
		if err != nil {
			return err
		}
		u.push(Bytes(append([]byte{}, b...)))
	case ')':
		u.push(&tupleB{})
	case 0x85, 0x86, 0x87, 't': // TUPLE1, TUPLE2, TUPLE3, TUPLE
		var items []any
		var err error
		if code == 't' {
			items, err = u.popMark()
		} else {
			items, err = u.popN(int(code - 0x84))
		}
		if err != nil {
			return err
		}
		u.push(&tupleB{items: items})
	case ']':
		u.push(&listB{})
	case 'l': // LIST
		items, err := u.popMark()
		if err != nil {
			return err
		}
		u.push(&listB{items: items})
	case '}':
		u.push(NewDict())
	case 'd': // DICT
		items, err := u.popMark()
		if err != nil {
			return err
		}
		d := NewDict()
		u.push(d)
		return setItems(d, items)
	case 0x8f:
		u.push(&setB{})
	case 'a', 'e': // APPEND, APPENDS
		return u.appendOp(code)
	case 's', 'u': // SETITEM, SETITEMS
		var items []any
		var err error
		if code == 's' {
			items, err = u.popN(2)
		} else {
			items, err = u.popMark()
		}
		if err != nil {
			return err
		}
		d, err := u.top()
		if err != nil {
			return err
		}
		dict, ok := d.(*Dict)
		if !ok {
			return fmt.Errorf("set item on a %s", kindOf(d))
		}
		return setItems(dict, items)
	case 0x90: // ADDITEMS
		items, err := u.popMark()
		if err != nil {
			return err
		}
		s, err := u.top()
		if err != nil {
			return err
		}
		set, ok := s.(*setB)
		if !ok {
			return fmt.Errorf("add items to a %s", kindOf(s))
		}
		set.items = append(set.items, items...)
	case 'q', 'r', 0x94: // BINPUT, LONG_BINPUT, MEMOIZE
		v, err := u.top()
		if err != nil {
			return err
		}
		idx := uint64(len(u.memo))
		if code != 0x94 {
			if idx, err = u.uint(argWidth(code)); err != nil {
				return err
			}
		}
		u.memo[uint32(idx)] = v
		u.built++
	case 'h', 'j': // BINGET, LONG_BINGET
		idx, err := u.uint(argWidth(code))
		if err != nil {
			return err
		}
		v, ok := u.memo[uint32(idx)]
		if !ok {
			return fmt.Errorf("memo key %d is not defined", idx)
		}
		u.push(v)
	case 'c', 0x93: // GLOBAL, STACK_GLOBAL
		return u.globalOp(code)
	case 'Q': // BINPERSID
		pid, err := u.pop()
		if err != nil {
			return err
		}
		t, ok := pid.(*tupleB)
		if !ok {
			return fmt.Errorf("persistent id is a %s, not a tuple", kindOf(pid))
		}
		st, err := u.persistent(t.items)
		if err != nil {
			return err
		}
		u.push(st)
	case 'R': // REDUCE
		args, err := u.pop()
		if err != nil {
			return err
		}
		fn, err := u.top()
		if err != nil {
			return err
		}
		v, err := u.reduce(fn, args)
		if err != nil {
			return err
		}
		u.stack[len(u.stack)-1] = v
	case 0x81, 0x92: // NEWOBJ, NEWOBJ_EX
		return u.newObj(code)
	case 'b': // BUILD
		return u.build()
	default:
		return errors.New("unsupported opcode (not used for checkpoint data)")
	}
	return nil
}

// argWidth is the byte width of an opcode's integer argument (for strings
// and bytes, of their length).
func argWidth(code byte) int {
	switch code {
	case 'K', 'q', 'h', 0x8c, 'U', 'C':
		return 1
	case 'M':
		return 2
	case 'J', 'r', 'j', 'X', 'T', 'B':
		return 4
	}
	return 8 // BINUNICODE8, BINBYTES8
}

// counted reads a length-prefixed string or bytes operand.
func (u *unpickler) counted(code byte) ([]byte, error) {
	n, err := u.uint(argWidth(code))
	if err != nil {
		return nil, err
	}
	if code == 'T' && int32(uint32(n)) < 0 {
		return nil, errors.New("negative BINSTRING length")
	}
	return u.read(n)
}

// decodeLong decodes a little-endian two's complement integer (LONG1/LONG4).
func decodeLong(b []byte) any {
	if len(b) == 0 {
		return int64(0)
	}
	if len(b) <= 8 {
		var x uint64
		for i := len(b) - 1; i >= 0; i-- {
			x = x<<8 | uint64(b[i])
		}
		shift := 64 - 8*uint(len(b))
		return int64(x<<shift) >> shift
	}
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	x := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	if x.IsInt64() {
		return x.Int64()
	}
	return x
}

func setItems(d *Dict, items []any) error {
	if len(items)%2 != 0 {
		return fmt.Errorf("odd number of items (%d) for a dict", len(items))
	}
	for i := 0; i < len(items); i += 2 {
		if !validKey(items[i]) {
			return fmt.Errorf("dict key of type %s is not supported", kindOf(items[i]))
		}
		d.Set(items[i], items[i+1])
	}
	return nil
}

func (u *unpickler) appendOp(code byte) error {
	var items []any
	var err error
	if code == 'a' {
		items, err = u.popN(1)
	} else {
		items, err = u.popMark()
	}
	if err != nil {
		return err
	}
	l, err := u.top()
	if err != nil {
		return err
	}
	list, ok := l.(*listB)
	if !ok {
		return fmt.Errorf("append to a %s", kindOf(l))
	}
	list.items = append(list.items, items...)
	return nil
}

func (u *unpickler) globalOp(code byte) error {
	var module, name string
	if code == 'c' {
		var err error
		if module, err = u.line(); err == nil {
			name, err = u.line()
		}
		if err != nil {
			return err
		}
	} else {
		items, err := u.popN(2)
		if err != nil {
			return err
		}
		m, ok1 := items[0].(string)
		n, ok2 := items[1].(string)
		if !ok1 || !ok2 {
			return errors.New("STACK_GLOBAL operands are not strings")
		}
		module, name = m, n
	}
	g, err := u.allow.find(module, name)
	if err != nil {
		return err
	}
	u.push(g)
	return nil
}

func (u *unpickler) newObj(code byte) error {
	n := 2
	if code == 0x92 {
		n = 3
	}
	items, err := u.popN(n)
	if err != nil {
		return err
	}
	g, ok := items[0].(*global)
	if !ok || g.role != roleOpaque {
		return fmt.Errorf("NEWOBJ of %s: only allow-listed classes are instantiated", kindOf(items[0]))
	}
	args, ok := items[1].(*tupleB)
	if !ok {
		return fmt.Errorf("NEWOBJ arguments are a %s, not a tuple", kindOf(items[1]))
	}
	if n == 3 {
		if kw, ok := items[2].(*Dict); !ok || kw.Len() != 0 {
			return errors.New("NEWOBJ_EX with keyword arguments is not supported")
		}
	}
	u.push(&Object{Module: g.module, Name: g.name, Kind: NewObject, Args: append(Tuple{}, args.items...)})
	return nil
}

func (u *unpickler) build() error {
	state, err := u.pop()
	if err != nil {
		return err
	}
	inst, err := u.top()
	if err != nil {
		return err
	}
	switch inst := inst.(type) {
	case *Object:
		if inst.State != nil || inst.Kind == EnumMember {
			return fmt.Errorf("BUILD on %s twice or on an enum member", inst.Class())
		}
		inst.State = state
		return nil
	case *Dict:
		st, ok := state.(*Dict)
		if !inst.OrderedDict || !ok || inst.Attrs != nil {
			return errors.New("BUILD on a dict: only an OrderedDict takes one dict of attributes")
		}
		inst.Attrs = st
		return nil
	}
	return fmt.Errorf("BUILD on a %s", kindOf(inst))
}

// kindOf names a value of the machine (frozen or not) for errors.
func kindOf(v any) string {
	switch v := v.(type) {
	case *listB:
		return "list"
	case *tupleB:
		return "tuple"
	case *setB:
		return "set"
	case *global:
		return v.String()
	case *Storage:
		return "storage"
	}
	return TypeName(v)
}
