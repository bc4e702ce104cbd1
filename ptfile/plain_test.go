package ptfile

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// keyClass is an allow-listed class for the object-keyed dict tests.
const keyClass = "plaintest.Key"

func keyObject(name string) *Object {
	return &Object{Module: "plaintest", Name: "Key", Kind: NewObject, State: DictOf("name", name, "at", Size{0, 4})}
}

func TestPlainObjectKeysRoundTrip(t *testing.T) {
	d := NewDict()
	d.Set("plain", int64(1))
	d.SetObjectKey(keyObject("a"), "first")
	d.SetObjectKey(keyObject("b"), List{int64(2), 3.5})
	pkl, err := Pickle(DictOf("storage_data", d))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unpickle(pkl, ".metadata", Options{Classes: []string{keyClass}})
	if err != nil {
		t.Fatal(err)
	}
	sd, err := Get[*Dict](got, "storage_data")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for k, v := range sd.All() {
		switch k := k.(type) {
		case string:
			names = append(names, k+"="+TypeName(v))
		case *Object:
			n, err := Get[string](k, "name")
			if err != nil {
				t.Fatal(err)
			}
			at, err := Get[Size](k, "at")
			if err != nil || len(at) != 2 || at[1] != 4 {
				t.Fatalf("key %s: at %v (%v)", n, at, err)
			}
			names = append(names, k.Class()+"("+n+")="+TypeName(v))
		default:
			t.Fatalf("key of type %T", k)
		}
	}
	want := "plain=int plaintest.Key(a)=str plaintest.Key(b)=list"
	if s := strings.Join(names, " "); s != want {
		t.Fatalf("keys: %s, want %s", s, want)
	}
}

func TestPlainRefusals(t *testing.T) {
	d := NewDict()
	d.SetObjectKey(keyObject("a"), int64(1))
	pkl, err := Pickle(d)
	if err != nil {
		t.Fatal(err)
	}
	// Without the class allowed, the key's class is refused by name.
	_, err = Unpickle(pkl, "x/.metadata", Options{})
	var pe *Error
	if !errors.As(err, &pe) || pe.Option != "Classes" || !strings.Contains(err.Error(), keyClass) || pe.File != "x/.metadata" {
		t.Fatalf("unknown key class: %v", err)
	}
	// A tensor cannot be pickled plainly, and a persistent id cannot be read.
	if _, err := Pickle(DictOf("t", FromFloat32([]int64{1}, []float32{1}))); err == nil || !strings.Contains(err.Error(), "plain pickle") {
		t.Fatalf("tensor: %v", err)
	}
	tensorPickle, _, err := marshal(FromFloat32([]int64{1}, []float32{1}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Unpickle(tensorPickle, "t.pkl", Options{}); err == nil || !strings.Contains(err.Error(), "persistent id") {
		t.Fatalf("persistent id: %v", err)
	}
	// A key of an unhashable kind (a list) is an error, not a panic.
	bad := []byte{opProto, 2, opEmptyDict, opEmptyList, opBinInt1, 1, opSetItem, opStop}
	if _, err := Unpickle(bad, "l.pkl", Options{}); err == nil || !strings.Contains(err.Error(), "dict key of type list") {
		t.Fatalf("list key: %v", err)
	}
	for _, b := range [][]byte{nil, pkl[:len(pkl)-1], {opProto, 2, opEmptyDict, opBinInt1, 1, opSetItem, opStop}} {
		if _, err := Unpickle(b, "t.pkl", Options{Classes: []string{keyClass}}); err == nil {
			t.Fatalf("%x: no error", b)
		}
	}
	if _, err := Unpickle(pkl, "big.pkl", Options{Classes: []string{keyClass}, MaxPickleBytes: 8}); !errors.As(err, &pe) || pe.Option != "MaxPickleBytes" {
		t.Fatalf("limit: %v", err)
	}
}

// TestPlainCPython reads what CPython's own pickler writes for a dict
// keyed by frozen dataclasses, with protocol 4 (framing, MEMOIZE,
// STACK_GLOBAL: pickle.dump's default) and protocol 2.
func TestPlainCPython(t *testing.T) {
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skip("no /usr/bin/python3: the CPython plain-pickle test did not run")
	}
	src := `
import dataclasses, pickle, sys, types
m = types.ModuleType("plaintest"); sys.modules["plaintest"] = m
@dataclasses.dataclass(frozen=True)
class Key:
    name: str
    at: tuple
Key.__module__ = "plaintest"; m.Key = Key
d = {"storage_data": {Key("a", (0, 4)): "first", Key("b", (0, 4)): [2, 3.5]}, "plain": 1}
sys.stdout.buffer.write(pickle.dumps(d, protocol=int(sys.argv[1])))
`
	for _, proto := range []string{"4", "2"} {
		out, err := exec.Command(py, "-c", src, proto).Output()
		if err != nil {
			t.Fatalf("python: %v", err)
		}
		got, err := Unpickle(out, "cpython.pkl", Options{Classes: []string{keyClass}})
		if err != nil {
			t.Fatalf("protocol %s: %v", proto, err)
		}
		sd, err := Get[*Dict](got, "storage_data")
		if err != nil || sd.Len() != 2 {
			t.Fatalf("protocol %s: storage_data %v (%v)", proto, sd, err)
		}
		i := 0
		for k, v := range sd.All() {
			o, ok := k.(*Object)
			if !ok {
				t.Fatalf("protocol %s: key %T", proto, k)
			}
			name, _ := Get[string](o, "name")
			at, _ := Get[Tuple](o, "at")
			if want := []string{"a", "b"}[i]; name != want || len(at) != 2 {
				t.Fatalf("protocol %s: key %d is %q %v", proto, i, name, at)
			}
			if i == 0 && v != "first" {
				t.Fatalf("protocol %s: value %v", proto, v)
			}
			i++
		}
	}
}
