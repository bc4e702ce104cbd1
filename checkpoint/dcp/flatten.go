package dcp

import (
	"fmt"
	"math"
	"strconv"

	"github.com/dszero/dszero/ptfile"
)

// Flattening, as torch ≥ 2.4's DefaultSavePlanner does before it plans
// (flatten_state_dict over traverse_state_dict):
//
//   - every dict is descended, its keys turned into strings (str(k));
//   - a list is descended, by index, when it holds a dict, a tensor or a
//     list that is itself descended; otherwise it is one value;
//   - anything else — a tensor, a tuple, a number, a string, a list of
//     plain values — is a leaf, stored under the path's elements joined by
//     dots: {"optimizer": {"state": {"fc.weight": {"exp_avg": t}}}} gives
//     "optimizer.state.fc.weight.exp_avg", and param_groups, a list of
//     dicts, gives "optimizer.param_groups.0.lr".
//
// An empty dict leaves nothing (torch's flattening loses it too). The
// paths go into planner_data, so that Unflatten rebuilds the nesting the
// keys' dots cannot tell.

// Leaf is one flattened value: Key is the dotted path, Path its elements
// (strings for dict keys, ints for list indices).
type Leaf struct {
	Key   string
	Path  []any
	Value any
}

// Flatten flattens a nested state dict; a key reached twice (a dict
// holding both "a.b" and "a": {"b": ...}) is an error, as in torch.
func Flatten(sd *ptfile.Dict) ([]Leaf, error) {
	var out []Leaf
	seen := map[string]bool{}
	var visit func(path []any, v any) error
	visit = func(path []any, v any) error {
		switch x := v.(type) {
		case *ptfile.Dict:
			for k, e := range x.All() {
				s, err := pyStr(k)
				if err != nil {
					return fmt.Errorf("dcp: flatten %s: %w", joinPath(path), err)
				}
				if err := visit(append(append([]any{}, path...), s), e); err != nil {
					return err
				}
			}
			return nil
		case ptfile.List:
			if !terminal(x) {
				for i, e := range x {
					if err := visit(append(append([]any{}, path...), int64(i)), e); err != nil {
						return err
					}
				}
				return nil
			}
		}
		key := joinPath(path)
		if seen[key] {
			return fmt.Errorf("dcp: flatten: the key %q is reached twice", key)
		}
		seen[key] = true
		out = append(out, Leaf{Key: key, Path: path, Value: v})
		return nil
	}
	for k, v := range sd.All() {
		s, err := pyStr(k)
		if err != nil {
			return nil, fmt.Errorf("dcp: flatten: %w", err)
		}
		if err := visit([]any{s}, v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// terminal is traverse_state_dict's _is_terminal for a list: it holds no
// dict, no tensor and no list that is not terminal itself.
func terminal(l ptfile.List) bool {
	for _, e := range l {
		switch x := e.(type) {
		case *ptfile.Dict, *ptfile.Tensor:
			return false
		case ptfile.List:
			if !terminal(x) {
				return false
			}
		}
	}
	return true
}

func joinPath(path []any) string {
	s := ""
	for i, p := range path {
		if i > 0 {
			s += "."
		}
		s += fmt.Sprint(p)
	}
	return s
}

// pyStr is Python's str() of a dict key.
func pyStr(k any) (string, error) {
	switch x := k.(type) {
	case string:
		return x, nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case bool:
		if x {
			return "True", nil
		}
		return "False", nil
	case nil:
		return "None", nil
	case float64:
		return pyFloat(x), nil
	}
	return "", fmt.Errorf("a dict key of type %s", ptfile.TypeName(k))
}

// pyFloat is Python's repr of a float: the shortest digits that read back,
// fixed-point from 1e-4 up to 1e16, scientific otherwise.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, exp := e, 0
	for i := len(e) - 1; i >= 0; i-- {
		if e[i] == 'e' {
			mant = e[:i]
			exp, _ = strconv.Atoi(e[i+1:])
			break
		}
	}
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			return s
		}
	}
	return s + ".0"
}

// Unflatten rebuilds the nested state dict from flat values and their
// mappings, as torch's unflatten_state_dict (set_element) does: a string
// path element is a dict key, an int one a list index (the list padded
// with None up to it). A value whose key has no mapping is kept at the
// top level under its key.
func Unflatten(values []Leaf) (*ptfile.Dict, error) {
	root := &node{dict: ptfile.NewDict()}
	for _, lf := range values {
		path := lf.Path
		if len(path) == 0 {
			path = []any{lf.Key}
		}
		if err := root.set(path, lf.Value); err != nil {
			return nil, fmt.Errorf("dcp: unflatten %s: %w", lf.Key, err)
		}
	}
	return root.build().(*ptfile.Dict), nil
}

// node is a container being rebuilt: a dict, or a list (items may grow).
type node struct {
	dict   *ptfile.Dict
	items  []any // for a list: values and *node children
	isList bool
}

func newNode(key any) *node {
	if _, ok := key.(string); ok {
		return &node{dict: ptfile.NewDict()}
	}
	return &node{isList: true}
}

func (n *node) set(path []any, v any) error {
	key := path[0]
	if len(path) == 1 {
		return n.put(key, v)
	}
	child, err := n.child(key, path[1])
	if err != nil {
		return err
	}
	return child.set(path[1:], v)
}

func (n *node) child(key, next any) (*node, error) {
	cur, err := n.get(key)
	if err != nil {
		return nil, err
	}
	if c, ok := cur.(*node); ok {
		return c, nil
	}
	if cur != nil {
		return nil, fmt.Errorf("%v holds a %s and a container", key, ptfile.TypeName(cur))
	}
	c := newNode(next)
	return c, n.put(key, c)
}

func (n *node) get(key any) (any, error) {
	if n.isList {
		i, ok := key.(int64)
		if !ok {
			return nil, fmt.Errorf("string key %q into a list", key)
		}
		if i < int64(len(n.items)) {
			return n.items[i], nil
		}
		return nil, nil
	}
	k, ok := key.(string)
	if !ok {
		return nil, fmt.Errorf("index %v into a dict", key)
	}
	v, _ := n.dict.Get(k)
	return v, nil
}

func (n *node) put(key, v any) error {
	if n.isList {
		i, ok := key.(int64)
		if !ok || i < 0 || i > 1<<24 {
			return fmt.Errorf("list index %v", key)
		}
		for int64(len(n.items)) <= i {
			n.items = append(n.items, nil)
		}
		n.items[i] = v
		return nil
	}
	k, ok := key.(string)
	if !ok {
		return fmt.Errorf("index %v into a dict", key)
	}
	n.dict.Set(k, v)
	return nil
}

func (n *node) build() any {
	if n.isList {
		l := make(ptfile.List, len(n.items))
		for i, v := range n.items {
			if c, ok := v.(*node); ok {
				v = c.build()
			}
			l[i] = v
		}
		return l
	}
	for k, v := range n.dict.All() {
		if c, ok := v.(*node); ok {
			n.dict.Set(k, c.build())
		}
	}
	return n.dict
}
