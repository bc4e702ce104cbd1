package fsdpconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// kind is the Python type a config value has after Accelerate or the
// Trainer loaded it: yaml.safe_load (YAML 1.1) or json.load.
type kind int

const (
	kNull kind = iota
	kBool
	kInt
	kFloat
	kStr
	kSeq
	kMap
)

var kindNames = [...]string{"null", "bool", "int", "float", "str", "list", "mapping"}

func (k kind) String() string { return kindNames[k] }

// node is one value of a loaded config, typed as Python sees it, with
// where it was written.
type node struct {
	kind kind
	pos  lenient.Pos
	b    bool     // kBool
	i    *big.Int // kInt (Python ints are unbounded)
	f    float64  // kFloat
	s    string   // kStr
	// text is a scalar as written (without quotes), for messages.
	text   string
	quoted bool
	elems  []*node  // kSeq
	keys   []member // kMap, in file order, keys unique
}

// member is one key of a mapping.
type member struct {
	key    string // the key as Python would print it (str(key))
	keyPos lenient.Pos
	val    *node
}

// get returns the value of key in mapping n.
func (n *node) get(key string) (*node, bool) {
	if n == nil || n.kind != kMap {
		return nil, false
	}
	for _, m := range n.keys {
		if m.key == key {
			return m.val, true
		}
	}
	return nil, false
}

// pyStr is Python's str() of the value: what accelerate launch writes into
// the FSDP_* environment variables (str(True) is "True", str(1e8) "100000000.0").
func (n *node) pyStr() string {
	if n == nil {
		return "None"
	}
	switch n.kind {
	case kNull:
		return "None"
	case kBool:
		if n.b {
			return "True"
		}
		return "False"
	case kInt:
		return n.i.String()
	case kFloat:
		return pyFloat(n.f)
	case kStr:
		return n.s
	}
	return n.pyRepr()
}

// pyRepr is Python's repr(), used for values inside lists and dicts.
func (n *node) pyRepr() string {
	switch n.kind {
	case kStr:
		return "'" + strings.ReplaceAll(n.s, "'", `\'`) + "'"
	case kSeq:
		parts := make([]string, len(n.elems))
		for i, e := range n.elems {
			parts[i] = e.pyRepr()
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case kMap:
		parts := make([]string, len(n.keys))
		for i, m := range n.keys {
			parts[i] = "'" + m.key + "': " + m.val.pyRepr()
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return n.pyStr()
}

// pyFloat formats f as Python's repr(float) does: the shortest digits
// that round-trip, in exponent form below 1e-4 and from 1e16 on.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	case f == 0 && math.Signbit(f):
		return "-0.0"
	case f == 0:
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // 1.5e+16, 1e-05
	mant, exps, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(exps)
	if exp < -4 || exp >= 16 {
		digits := strconv.Itoa(max(exp, -exp))
		if len(digits) < 2 {
			digits = "0" + digits
		}
		sign := "+"
		if exp < 0 {
			sign = "-"
		}
		return mant + "e" + sign + digits
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// truthy is Python's bool(value): "False" (a non-empty string) is true.
func (n *node) truthy() bool {
	if n == nil {
		return false
	}
	switch n.kind {
	case kBool:
		return n.b
	case kInt:
		return n.i.Sign() != 0
	case kFloat:
		return n.f != 0
	case kStr:
		return n.s != ""
	case kSeq:
		return len(n.elems) > 0
	case kMap:
		return len(n.keys) > 0
	}
	return false
}

// describe names the value for messages: `"SIZE" (a string)`.
func (n *node) describe() string {
	switch n.kind {
	case kStr:
		return strconv.Quote(n.s) + " (a string)"
	case kSeq, kMap:
		return "a " + n.kind.String()
	case kNull:
		return "null"
	}
	if n.text != "" {
		return n.text + " (" + n.kind.String() + ")"
	}
	return n.pyStr() + " (" + n.kind.String() + ")"
}

// pyInt is Python's int(str(value)) as the FSDP plugin applies it to an
// environment string: an integer literal, surrounding white space and
// underscores between digits allowed; int("1e8") and int("2.0") fail.
func pyInt(s string) (int64, bool) {
	t := strings.TrimSpace(s)
	if t == "" || strings.HasPrefix(t, "_") || strings.HasSuffix(t, "_") || strings.Contains(t, "__") {
		return 0, false
	}
	t = strings.ReplaceAll(t, "_", "")
	v, err := strconv.ParseInt(t, 10, 64)
	return v, err == nil
}

// isDigit is Python's str.isdigit for ASCII text.
func isDigit(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// strToBool is accelerate's str_to_bool (and the Trainer's copy of it).
func strToBool(s string) (bool, bool) {
	switch strings.ToLower(s) {
	case "y", "yes", "t", "true", "on", "1":
		return true, true
	case "n", "no", "f", "false", "off", "0":
		return false, true
	}
	return false, false
}

// parseError is a syntax error located in the file.
type parseError struct {
	pos  lenient.Pos
	msg  string
	hint string
}

func (e *parseError) Error() string { return e.msg }

// ---- YAML, as yaml.safe_load (PyYAML, YAML 1.1) reads it ----

var (
	yamlBool  = regexp.MustCompile(`^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$`)
	yamlInt   = regexp.MustCompile(`^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$`)
	yamlFloat = regexp.MustCompile(`^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$`)
	yamlNull  = regexp.MustCompile(`^(?:~|null|Null|NULL|)$`)
	yamlLine  = regexp.MustCompile(`line (\d+)`)
)

// parseYAML reads data as accelerate's yaml.safe_load does: one document,
// YAML 1.1 scalars (yes/no/on/off are booleans, 1e8 is a string, 010 is 8).
func parseYAML(data []byte) (n *node, err error) {
	defer func() {
		if e := recover(); e != nil { // yaml.v3 panics on a few malformed inputs
			n, err = nil, &parseError{pos: lenient.Pos{Line: 1, Col: 1}, msg: fmt.Sprintf("YAML: the parser failed: %v", e)}
		}
	}()
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &parseError{pos: lenient.Pos{Line: 1, Col: 1}, msg: "the file is empty (yaml.safe_load returns None and accelerate fails)", hint: "write `distributed_type: FSDP` and an fsdp_config block"}
		}
		return nil, yamlError(data, err)
	}
	var second yaml.Node
	if err := dec.Decode(&second); err == nil && second.Kind != 0 {
		return nil, &parseError{pos: lenient.Pos{Line: second.Line, Col: second.Column}, msg: "a second YAML document: yaml.safe_load expects a single document in the stream", hint: "remove the `---` and what follows, or merge the documents"}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &parseError{pos: lenient.Pos{Line: 1, Col: 1}, msg: "the file holds no YAML value (yaml.safe_load returns None and accelerate fails)", hint: "write `distributed_type: FSDP` and an fsdp_config block"}
	}
	c := &yconv{}
	return c.conv(doc.Content[0], 0)
}

// yamlError turns yaml.v3's message ("yaml: line 3: mapping values are not
// allowed in this context") into a positioned error. yaml.v3 leaves out the
// line for errors on the first line and never gives a column; the column
// is the first tab when the message is about one, else the line's first
// character.
func yamlError(data []byte, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 1
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		if v, e := strconv.Atoi(m[1]); e == nil && v > 0 {
			line = v
		}
		msg = strings.TrimSpace(strings.Replace(msg, m[0]+":", "", 1))
	}
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	col := 1
	hint := ""
	if line <= len(lines) {
		text := lines[line-1]
		if i := strings.IndexByte(text, '\t'); i >= 0 && strings.Contains(msg, "cannot start any token") {
			col = len([]rune(text[:i])) + 1
			hint = "YAML does not allow tabs for indentation; indent with spaces"
		} else {
			col = len([]rune(text)) - len([]rune(strings.TrimLeft(text, " "))) + 1
		}
	}
	return &parseError{pos: lenient.Pos{Line: line, Col: col}, msg: "YAML: " + msg, hint: hint}
}

type yconv struct{ aliases int }

func (c *yconv) conv(y *yaml.Node, depth int) (*node, error) {
	pos := lenient.Pos{Line: y.Line, Col: y.Column}
	if depth > 200 {
		return nil, &parseError{pos: pos, msg: "nesting deeper than 200 levels"}
	}
	switch y.Kind {
	case yaml.AliasNode:
		c.aliases++
		if c.aliases > 1000 || y.Alias == nil {
			return nil, &parseError{pos: pos, msg: "too many YAML aliases"}
		}
		n, err := c.conv(y.Alias, depth+1)
		if err != nil {
			return nil, err
		}
		cp := *n
		cp.pos = pos
		return &cp, nil
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return &node{kind: kNull, pos: pos}, nil
		}
		return c.conv(y.Content[0], depth+1)
	case yaml.SequenceNode:
		if err := checkTag(y, "!!seq"); err != nil {
			return nil, err
		}
		n := &node{kind: kSeq, pos: pos}
		for _, e := range y.Content {
			v, err := c.conv(e, depth+1)
			if err != nil {
				return nil, err
			}
			n.elems = append(n.elems, v)
		}
		return n, nil
	case yaml.MappingNode:
		if err := checkTag(y, "!!map"); err != nil {
			return nil, err
		}
		return c.mapping(y, pos, depth)
	case yaml.ScalarNode:
		return scalar(y, pos)
	}
	return nil, &parseError{pos: pos, msg: "unexpected YAML node"}
}

func (c *yconv) mapping(y *yaml.Node, pos lenient.Pos, depth int) (*node, error) {
	n := &node{kind: kMap, pos: pos}
	seen := map[string]lenient.Pos{}
	add := func(m member, merged bool) error {
		if first, ok := seen[m.key]; ok {
			if merged { // keys written in the mapping win over merged ones
				return nil
			}
			return &parseError{pos: m.keyPos, msg: fmt.Sprintf("duplicate key %q (first at line %d); yaml.safe_load silently keeps the last one", m.key, first.Line),
				hint: "remove one of them"}
		}
		seen[m.key] = m.keyPos
		n.keys = append(n.keys, m)
		return nil
	}
	var merges []*node
	for i := 0; i+1 < len(y.Content); i += 2 {
		k, v := y.Content[i], y.Content[i+1]
		kn, err := c.conv(k, depth+1)
		if err != nil {
			return nil, err
		}
		vn, err := c.conv(v, depth+1)
		if err != nil {
			return nil, err
		}
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merges = append(merges, vn)
			continue
		}
		if kn.kind == kSeq || kn.kind == kMap {
			return nil, &parseError{pos: kn.pos, msg: "a " + kn.kind.String() + " as a mapping key", hint: "keys are names"}
		}
		if err := add(member{key: kn.pyStr(), keyPos: kn.pos, val: vn}, false); err != nil {
			return nil, err
		}
	}
	for _, m := range merges {
		srcs := []*node{m}
		if m.kind == kSeq {
			srcs = m.elems
		}
		for _, s := range srcs {
			if s.kind != kMap {
				return nil, &parseError{pos: s.pos, msg: "a merge key (<<) needs a mapping or a list of mappings"}
			}
			for _, mm := range s.keys {
				_ = add(mm, true)
			}
		}
	}
	return n, nil
}

// checkTag rejects explicit tags that yaml.safe_load cannot construct.
func checkTag(y *yaml.Node, want string) error {
	if y.Tag == "" || y.Tag == want {
		return nil
	}
	return &parseError{pos: lenient.Pos{Line: y.Line, Col: y.Column},
		msg:  fmt.Sprintf("YAML tag %s: yaml.safe_load cannot construct it", y.Tag),
		hint: "remove the tag"}
}

// scalar types a YAML scalar with PyYAML's YAML 1.1 resolver.
func scalar(y *yaml.Node, pos lenient.Pos) (*node, error) {
	v := y.Value
	n := &node{pos: pos, text: v}
	tag := y.Tag
	plain := y.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0
	explicit := !plain && tag != "!!str" && tag != ""
	if plain && tag == "!!str" && (yamlBool.MatchString(v) || yamlNull.MatchString(v) || yamlInt.MatchString(v) || yamlFloat.MatchString(v)) {
		// yaml.v3 tags yes/no/on/off and 1e8-like text as YAML 1.2
		// strings, and an explicit `!!str yes` looks the same; PyYAML types
		// plain text by YAML 1.1, so follow it (an explicit !!str on such
		// a value, which no real config has, is read as PyYAML reads it
		// untagged).
		tag = ""
	}
	if !plain && !explicit {
		n.kind, n.s, n.quoted = kStr, v, true
		return n, nil
	}
	if plain && !explicit {
		switch tag {
		case "", "!!str", "!!int", "!!float", "!!bool", "!!null", "!!timestamp":
			tag = resolve(v)
		case "!!binary", "!!merge":
		default:
			return nil, checkTag(y, "!!str")
		}
	}
	switch tag {
	case "!!null":
		n.kind = kNull
	case "!!bool":
		n.kind, n.b = kBool, strings.EqualFold(v, "yes") || strings.EqualFold(v, "true") || strings.EqualFold(v, "on")
		if !yamlBool.MatchString(v) {
			return nil, &parseError{pos: pos, msg: fmt.Sprintf("!!bool %q is not a YAML boolean", v)}
		}
	case "!!int":
		i, ok := yamlIntValue(v)
		if !ok {
			return nil, &parseError{pos: pos, msg: fmt.Sprintf("!!int %q is not a YAML integer", v)}
		}
		n.kind, n.i = kInt, i
	case "!!float":
		f, ok := yamlFloatValue(v)
		if !ok {
			return nil, &parseError{pos: pos, msg: fmt.Sprintf("!!float %q is not a YAML float", v)}
		}
		n.kind, n.f = kFloat, f
	case "!!str", "!!timestamp":
		n.kind, n.s = kStr, v
	default:
		return nil, checkTag(y, "!!str")
	}
	return n, nil
}

// resolve is PyYAML's implicit resolver for a plain scalar.
func resolve(v string) string {
	switch {
	case yamlBool.MatchString(v):
		return "!!bool"
	case yamlNull.MatchString(v):
		return "!!null"
	case yamlInt.MatchString(v):
		return "!!int"
	case yamlFloat.MatchString(v):
		return "!!float"
	}
	return "!!str"
}

// yamlIntValue is PyYAML's construct_yaml_int.
func yamlIntValue(v string) (*big.Int, bool) {
	s := strings.ReplaceAll(v, "_", "")
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	i := new(big.Int)
	var ok bool
	switch {
	case s == "0":
		ok = true
	case strings.HasPrefix(s, "0b"):
		_, ok = i.SetString(s[2:], 2)
	case strings.HasPrefix(s, "0x"):
		_, ok = i.SetString(s[2:], 16)
	case strings.HasPrefix(s, "0"):
		_, ok = i.SetString(s[1:], 8)
	case strings.Contains(s, ":"):
		ok = true
		for _, d := range strings.Split(s, ":") {
			x, err := strconv.ParseInt(d, 10, 64)
			if err != nil {
				return nil, false
			}
			i.Mul(i, big.NewInt(60))
			i.Add(i, big.NewInt(x))
		}
	default:
		_, ok = i.SetString(s, 10)
	}
	if !ok {
		return nil, false
	}
	if neg {
		i.Neg(i)
	}
	return i, true
}

// yamlFloatValue is PyYAML's construct_yaml_float.
func yamlFloatValue(v string) (float64, bool) {
	s := strings.ToLower(strings.ReplaceAll(v, "_", ""))
	sign := 1.0
	if s != "" && (s[0] == '-' || s[0] == '+') {
		if s[0] == '-' {
			sign = -1
		}
		s = s[1:]
	}
	switch {
	case s == ".inf":
		return sign * math.Inf(1), true
	case s == ".nan":
		return math.NaN(), true
	case strings.Contains(s, ":"):
		parts := strings.Split(s, ":")
		f := 0.0
		for _, d := range parts {
			x, err := strconv.ParseFloat(d, 64)
			if err != nil {
				return 0, false
			}
			f = f*60 + x
		}
		return sign * f, true
	}
	if strings.HasSuffix(s, ".") {
		s += "0"
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return sign * f, true
}

// ---- JSON, as json.load reads it ----

// parseJSON reads data as Python's json.load does. lenient gives positions
// and good messages; encoding/json then rejects what lenient's Hjson
// leniency accepts but json.load does not (comments, trailing commas).
func parseJSON(file string, data []byte) (*node, error) {
	v, err := lenient.Parse(file, data)
	if err != nil {
		var le *lenient.Error
		if errors.As(err, &le) {
			return nil, &parseError{pos: le.Pos, msg: le.Msg, hint: le.Hint}
		}
		return nil, &parseError{pos: lenient.Pos{Line: 1, Col: 1}, msg: err.Error()}
	}
	if off, msg, bad := strictJSON(data); bad {
		return nil, &parseError{pos: offsetPos(data, off), msg: "json.load rejects this file: " + msg,
			hint: "remove comments and trailing commas, and quote every key"}
	}
	return fromLenient(v), nil
}

func fromLenient(v *lenient.Value) *node {
	n := &node{pos: v.Pos}
	switch v.Kind {
	case lenient.Null:
		n.kind, n.text = kNull, "null"
	case lenient.Bool:
		n.kind, n.b = kBool, v.Bool
		n.text = strconv.FormatBool(v.Bool)
	case lenient.Number:
		n.text = v.Num
		if strings.ContainsAny(v.Num, ".eE") {
			f, _ := v.Float64()
			n.kind, n.f = kFloat, f
		} else {
			n.kind, n.i = kInt, new(big.Int)
			n.i.SetString(v.Num, 10)
		}
	case lenient.String:
		n.kind, n.s, n.quoted = kStr, v.Str, true
	case lenient.Array:
		n.kind = kSeq
		for _, e := range v.Elems {
			n.elems = append(n.elems, fromLenient(e))
		}
	case lenient.Object:
		n.kind = kMap
		for _, m := range v.Members {
			n.keys = append(n.keys, member{key: m.Key, keyPos: m.KeyPos, val: fromLenient(m.Value)})
		}
	}
	return n
}

// offsetPos converts a byte offset into a line and column (characters).
func offsetPos(data []byte, off int) lenient.Pos {
	if off > len(data) {
		off = len(data)
	}
	p := lenient.Pos{Offset: off, Line: 1, Col: 1}
	for _, r := range string(data[:off]) {
		if r == '\n' {
			p.Line++
			p.Col = 1
		} else if r != '\r' && r != '\uFEFF' {
			p.Col++
		}
	}
	return p
}

// strictJSON reports where json.load would fail on data that lenient
// accepted.
func strictJSON(data []byte) (off int, msg string, bad bool) {
	if bytes.HasPrefix(data, []byte("\xEF\xBB\xBF")) {
		return 0, "a UTF-8 byte order mark (json.load: Unexpected UTF-8 BOM)", true
	}
	var v any
	err := json.Unmarshal(data, &v)
	if err == nil {
		return 0, "", false
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		o := int(se.Offset) - 1
		if o < 0 {
			o = 0
		}
		return o, se.Error(), true
	}
	return 0, err.Error(), true
}
