package ptfile

import (
	"errors"
	"fmt"
)

// Plain pickles: a file that is one pickle, not a torch.save archive, such
// as the .metadata of a torch.distributed.checkpoint directory (pickle.dump
// of a Metadata dataclass). They go through the same allow-listed machine
// as data.pkl, with two differences:
//
//   - a plain pickle has no archive, so it has no storages: a persistent id
//     (a tensor) is an error, and so is a tensor given to Pickle;
//   - a dict may be keyed by an allow-listed object: .metadata's
//     storage_data maps MetadataIndex dataclasses to _StorageInfo ones.
//     Such keys are compared by identity (Python compares them by value:
//     a pickle never holds two equal keys, since Python's dict would have
//     merged them before pickling). Dict.SetObjectKey sets one; Dict.All
//     and Dict.Keys return them in order with the other keys; Get does not
//     find them.

// Pickle returns root pickled with protocol 2 as the writer pickles
// data.pkl (see Write): what pickle.dumps(root, protocol=2) returns for the
// same Python values. root holds no tensors.
func Pickle(root any) ([]byte, error) {
	pkl, storages, err := marshal(root)
	if err != nil {
		return nil, fmt.Errorf("ptfile: %w", err)
	}
	if len(storages) > 0 {
		return nil, errors.New("ptfile: a tensor in a plain pickle: tensors need a torch.save archive (Write, Encode)")
	}
	return pkl, nil
}

// Unpickle reads a plain pickle through the allow-list of opts; name is
// the file errors name. Nothing from the file is run: allowed classes
// become Objects, as in Read.
func Unpickle(data []byte, name string, opts Options) (any, error) {
	f := &File{Name: name}
	allow := newAllowList(opts)
	if int64(len(data)) > allow.maxPickle {
		return nil, f.fileError("", &refusal{
			msg:    fmt.Sprintf("the pickle is %d bytes, more than the %d a checkpoint's may have: a corrupt or crafted file", len(data), allow.maxPickle),
			option: "MaxPickleBytes", hint: "Options.MaxPickleBytes raises the limit"})
	}
	if len(data) == 0 {
		return nil, f.fileError("", fmt.Errorf("%w: empty pickle", errTruncated))
	}
	noStorage := func([]any) (*Storage, error) {
		return nil, errors.New("a persistent id (a tensor's storage) in a plain pickle, which has no archive to hold it")
	}
	u := &unpickler{data: data, memo: map[uint32]any{}, allow: allow, persistent: noStorage}
	fz := &freezer{done: map[any]frozen{}, busy: map[any]bool{}, max: allow.maxValues}
	v, err := u.runPlain(fz)
	if err != nil {
		code := data[min(u.op, len(data)-1)]
		op, ok := opNames[code]
		if !ok {
			op = fmt.Sprintf("opcode 0x%02x", code)
		}
		return nil, f.fileError("", fmt.Errorf("offset %d (%s): %w", u.op, op, err))
	}
	out, _, err := fz.freeze(v, 0)
	if err != nil {
		return nil, f.fileError("", err)
	}
	return out, nil
}

// SetObjectKey sets d[key] = v for a key that is an allow-listed object
// (see Plain pickles above); setting the same *Object again replaces its
// value in place.
func (d *Dict) SetObjectKey(key *Object, v any) {
	if key == nil {
		panic("ptfile: SetObjectKey with a nil key")
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

// runPlain is run with SETITEM, SETITEMS and DICT taking object keys: each
// such key is complete (its NEWOBJ and BUILD ran) when it is set, and is
// frozen then, since the freezer walks values and not keys.
func (u *unpickler) runPlain(fz *freezer) (any, error) {
	for {
		u.op = u.pos
		if u.pos >= len(u.data) {
			u.op = len(u.data) - 1
			return nil, fmt.Errorf("%w: no STOP", errTruncated)
		}
		code := u.data[u.pos]
		u.pos++
		var err error
		switch code {
		case '.':
			return u.pop()
		case 's', 'u', 'd':
			err = u.setItemsKeyed(code, fz)
		default:
			err = u.step(code)
		}
		if err != nil {
			return nil, err
		}
		if u.built > u.allow.maxValues {
			return nil, tooManyValues("builds", u.allow.maxValues)
		}
	}
}

// setItemsKeyed is SETITEM, SETITEMS or DICT where a key may be an Object.
func (u *unpickler) setItemsKeyed(code byte, fz *freezer) error {
	var items []any
	var err error
	switch code {
	case 's':
		items, err = u.popN(2)
	default:
		items, err = u.popMark()
	}
	if err != nil {
		return err
	}
	var d *Dict
	if code == 'd' {
		d = NewDict()
		u.push(d)
	} else {
		top, err := u.top()
		if err != nil {
			return err
		}
		var ok bool
		if d, ok = top.(*Dict); !ok {
			return fmt.Errorf("set item on a %s", kindOf(top))
		}
	}
	if len(items)%2 != 0 {
		return fmt.Errorf("odd number of items (%d) for a dict", len(items))
	}
	for i := 0; i < len(items); i += 2 {
		k, v := items[i], items[i+1]
		if validKey(k) {
			d.Set(k, v)
			continue
		}
		obj, ok := k.(*Object)
		if !ok {
			return fmt.Errorf("dict key of type %s is not supported", kindOf(k))
		}
		fk, _, err := fz.freeze(obj, 0)
		if err != nil {
			return err
		}
		d.SetObjectKey(fk.(*Object), v)
	}
	return nil
}
