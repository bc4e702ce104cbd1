package dcp

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/ptfile"
)

// The interop fixture: testdata/spec.json describes a state dict shaped
// like Accelerate's model and optimizer states, built here and by
// testdata/gen/common.py from the same formula, so that a file either side
// wrote is checked against values neither side read from the other.

type spec struct {
	Tensors []struct {
		Path  []any   `json:"path"`
		DType string  `json:"dtype"`
		Shape []int64 `json:"shape"`
		Seed  int64   `json:"seed"`
	} `json:"tensors"`
	Values []struct {
		Path  []any     `json:"path"`
		Value any       `json:"value"`
		Tuple []float64 `json:"tuple"`
	} `json:"values"`
}

// specValue is element i of a float tensor of seed s: a multiple of 1/4
// between -8 and 7.75, exact in bfloat16, distinct for the first 64 i.
func specValue(s, i int64) float32 { return float32((s*37+i*11)%64-32) * 0.25 }

// specInt is element i of an integer tensor of seed s.
func specInt(s, i int64) int64 { return s*1000 + i }

func loadSpec(t testing.TB) spec {
	t.Helper()
	b, err := os.ReadFile("testdata/spec.json")
	if err != nil {
		t.Fatal(err)
	}
	var s spec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// specTensor is the tensor of seed s.
func specTensor(dtype string, shape []int64, s int64) *ptfile.Tensor {
	n := Numel(shape)
	switch dtype {
	case "float32", "bfloat16":
		v := make([]float32, n)
		for i := range v {
			v[i] = specValue(s, int64(i))
		}
		if dtype == "float32" {
			return ptfile.FromFloat32(shape, v)
		}
		bits := make([]uint16, n)
		half.F32ToBF16(bits, v)
		return ptfile.FromBits16(ptfile.BFloat16, shape, bits)
	case "int64":
		v := make([]int64, n)
		for i := range v {
			v[i] = specInt(s, int64(i))
		}
		return ptfile.FromInt64(ptfile.Int64, shape, v)
	}
	panic("spec dtype " + dtype)
}

func jsonPath(p []any) []any {
	out := make([]any, len(p))
	for i, e := range p {
		if f, ok := e.(float64); ok {
			out[i] = int64(f)
		} else {
			out[i] = e
		}
	}
	return out
}

func jsonValue(v any) any {
	switch x := v.(type) {
	case []any:
		l := make(ptfile.List, len(x))
		for i, e := range x {
			l[i] = jsonValue(e)
		}
		return l
	}
	return v
}

// specStateDict builds the fixture's nested state dict, inserting in
// spec order (tensors, then values) with a setter of its own.
func specStateDict(t testing.TB) *ptfile.Dict {
	s := loadSpec(t)
	root := ptfile.NewDict()
	for _, e := range s.Tensors {
		setPath(t, root, jsonPath(e.Path), specTensor(e.DType, e.Shape, e.Seed))
	}
	for _, e := range s.Values {
		var v any = jsonValue(e.Value)
		if e.Tuple != nil {
			tup := make(ptfile.Tuple, len(e.Tuple))
			for i, f := range e.Tuple {
				tup[i] = f
			}
			v = tup
		}
		setPath(t, root, jsonPath(e.Path), v)
	}
	return root
}

// setPath sets v at path, creating a dict for a string element and a
// one-dict list for an int one (the fixture's only list is param_groups,
// of one group).
func setPath(t testing.TB, root *ptfile.Dict, path []any, v any) {
	var cur any = root
	for i, p := range path {
		last := i == len(path)-1
		switch c := cur.(type) {
		case *ptfile.Dict:
			k := p.(string)
			if last {
				c.Set(k, v)
				return
			}
			x, ok := c.Get(k)
			if !ok {
				if _, idx := path[i+1].(int64); idx {
					x = ptfile.List{ptfile.NewDict()}
				} else {
					x = ptfile.NewDict()
				}
				c.Set(k, x)
			}
			cur = x
		case ptfile.List:
			if last || p.(int64) != 0 {
				t.Fatalf("fixture path %v: only [0] of a list, holding a dict", path)
			}
			cur = c[0]
		}
	}
}

// specLeaves is the fixture flattened by hand, in the order torch's
// DefaultSavePlanner meets the keys: key, path and value.
func specLeaves(t testing.TB) []Leaf {
	s := loadSpec(t)
	var out []Leaf
	for _, e := range s.Tensors {
		p := jsonPath(e.Path)
		out = append(out, Leaf{Key: joinPath(p), Path: p, Value: specTensor(e.DType, e.Shape, e.Seed)})
	}
	for _, e := range s.Values {
		p := jsonPath(e.Path)
		var v any = jsonValue(e.Value)
		if e.Tuple != nil {
			v = ptfile.Tuple{e.Tuple[0], e.Tuple[1]}
		}
		out = append(out, Leaf{Key: joinPath(p), Path: p, Value: v})
	}
	// A nested dict is walked in its insertion order: a leaf comes where
	// its first differing path prefix was first inserted.
	first := map[string]int{}
	for i, l := range out {
		for j := range l.Path {
			k := fmt.Sprint(l.Path[:j+1])
			if _, ok := first[k]; !ok {
				first[k] = i
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Leaf) int {
		for j := 0; j < len(a.Path) && j < len(b.Path); j++ {
			if fmt.Sprint(a.Path[j]) != fmt.Sprint(b.Path[j]) {
				return first[fmt.Sprint(a.Path[:j+1])] - first[fmt.Sprint(b.Path[:j+1])]
			}
		}
		return 0
	})
	return out
}

// describe renders a value for comparisons: tensors by dtype, shape and
// elements.
func describe(v any) string {
	switch x := v.(type) {
	case *ptfile.Tensor:
		b, err := x.Bytes()
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("%s%v %x", x.DType, x.Shape, b)
	case *ptfile.Dict:
		s := "{"
		for k, e := range x.All() {
			s += fmt.Sprintf("%v: %s, ", k, describe(e))
		}
		return s + "}"
	case ptfile.List:
		s := "["
		for _, e := range x {
			s += describe(e) + ", "
		}
		return s + "]"
	case ptfile.Tuple:
		s := "("
		for _, e := range x {
			s += describe(e) + ", "
		}
		return s + ")"
	}
	return fmt.Sprintf("%T(%v)", v, v)
}
