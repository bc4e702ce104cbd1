package dsconfig

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// blockKind says how DeepSpeed reads a block, which decides what happens to
// unknown keys, to "auto" and to loosely typed values.
type blockKind int

const (
	// pydanticBlock: a DeepSpeedConfigModel (extra="forbid", lax coercion,
	// "auto" values dropped so the default applies). zero_optimization,
	// offload_*, fp16, bf16, monitors, comms_logger, compile, ...
	pydanticBlock blockKind = iota
	// scalarBlock: read key by key with dict.get (get_scalar_param):
	// unknown keys are ignored, values are used as they are, "auto" stays a
	// string and breaks whatever uses it. The top level, optimizer and
	// scheduler params, activation_checkpointing, aio, flops_profiler.
	scalarBlock
)

// block reads the keys of one JSON object, remembering which were used so
// that the rest can be reported.
type block struct {
	c     *compiler
	path  string         // canonical path of this object
	v     *lenient.Value // the object; nil when absent
	kind  blockKind
	used  map[string]bool
	known []string // every accepted key, for did-you-mean
	// unknownFix, when set, replaces the default advice for unknown keys.
	unknownFix string
}

func (c *compiler) newBlock(path string, v *lenient.Value, kind blockKind) *block {
	return &block{c: c, path: path, v: v, kind: kind, used: map[string]bool{}}
}

// present reports whether the block was written.
func (b *block) present() bool { return b.v != nil }

// lookup finds a field by name or alias. It returns the value, the key as
// written and whether it was written under an alias. Both spellings at once
// is a warning (DeepSpeed's pydantic model takes the alias).
func (b *block) lookup(name string, aliases ...string) (*lenient.Value, string, bool) {
	b.known = append(b.known, name)
	b.known = append(b.known, aliases...)
	if b.v == nil {
		return nil, "", false
	}
	var found *lenient.Value
	var foundKey string
	var viaAlias bool
	for i, key := range append(append([]string(nil), aliases...), name) {
		v, ok := b.v.Get(key)
		if !ok {
			continue
		}
		b.used[key] = true
		if found != nil {
			b.c.s.warnf(v, joinPath(b.path, key), "remove one of them",
				"%s and %s are the same field; DeepSpeed uses %s", quote(foundKey), quote(key), quote(foundKey))
			continue
		}
		found, foundKey, viaAlias = v, key, i < len(aliases)
	}
	return found, foundKey, viaAlias
}

// markUsed accepts keys that are read elsewhere (nested blocks, deprecated keys).
func (b *block) markUsed(keys ...string) {
	b.known = append(b.known, keys...)
	for _, k := range keys {
		if b.v != nil {
			if _, ok := b.v.Get(k); ok {
				b.used[k] = true
			}
		}
	}
}

// finish reports the keys that nothing read.
func (b *block) finish() {
	if b.v == nil || b.v.Kind != lenient.Object {
		return
	}
	var known []string        // b.known without repeats, made at the first unknown key
	var listed *lenient.Value // the unknown key whose fix lists the valid keys
	for _, m := range b.v.Members {
		if b.used[m.Key] {
			continue
		}
		if known == nil {
			known = uniq(b.known)
		}
		p := joinPath(b.path, m.Key)
		fix := didYouMean(m.Key, known, b.unknownFix)
		if b.kind == pydanticBlock {
			switch {
			case fix != "":
			case listed == nil:
				fix = "remove it; valid keys are " + strings.Join(known, ", ")
				listed = m.Value
			default:
				fix = fmt.Sprintf("remove it; the valid keys are listed at line %d", listed.Pos.Line)
			}
			b.c.s.errorf(m.Value, p, fix, "unknown key %s: DeepSpeed rejects it (%s forbids extra keys)", quote(m.Key), blockLabel(b.path))
		} else {
			if fix == "" {
				fix = "remove it if it is not meant for another tool"
			}
			b.c.s.warnf(m.Value, p, fix, "unknown key %s: DeepSpeed ignores it", quote(m.Key))
		}
	}
}

func blockLabel(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}

func uniq(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// field is one resolved read: the value node (nil when absent), the path
// and provenance.
type field struct {
	b    *block
	name string
	path string // canonical path (field name)
	// diagPath is the path as written (the alias, if one was used), for
	// diagnostics, so that they point at what the user wrote.
	diagPath string
	v        *lenient.Value
	written  string
	source   Source
}

// get starts a read of a field. "auto" is handled here: in a pydantic block
// it is dropped (the default applies); in a scalar block it is an error,
// because DeepSpeed passes the string on and fails later.
func (b *block) get(name string, aliases ...string) *field {
	v, key, viaAlias := b.lookup(name, aliases...)
	f := &field{b: b, name: name, path: joinPath(b.path, name), diagPath: joinPath(b.path, name), v: v, written: key, source: FromDefault}
	if key != "" {
		f.diagPath = joinPath(b.path, key)
	}
	if v == nil {
		return f
	}
	f.source = FromFile
	if viaAlias {
		f.source = FromAlias
	}
	if b.c.hfFilled[f.path] || b.c.hfFilled[f.diagPath] {
		f.source = FromHF
	}
	if v.Kind == lenient.String && v.Str == "auto" {
		if b.kind == pydanticBlock {
			b.c.s.add(Warning, v, f.dp(), fmt.Sprintf(`"auto": DeepSpeed drops it and uses the default`), b.c.autoFix(f.path))
			f.v = nil
			f.source = FromAutoDefault
			return f
		}
		b.c.s.errorf(v, f.dp(), b.c.autoFix(f.path),
			`"auto" is not a value DeepSpeed understands here: it passes the string on and fails later (HF's Trainer or Accelerate fill "auto" before DeepSpeed sees it)`)
		f.v = nil
		f.source = FromAutoDefault
	}
	return f
}

func (f *field) record(value any) {
	s := Setting{Path: f.path, Value: value, Source: f.source}
	if f.v != nil {
		s.Line, s.Col = f.v.Pos.Line, f.v.Pos.Col
	}
	if f.written != "" && f.written != f.name {
		s.Written = f.written
	}
	f.b.c.rec.set(s)
}

func (f *field) errorf(fix, format string, args ...any) {
	f.b.c.s.errorf(f.v, f.dp(), fix, format, args...)
}

// describe writes a JSON value for a message.
func describe(v *lenient.Value) string {
	switch v.Kind {
	case lenient.String:
		return quoteStr(v.Str)
	case lenient.Number:
		return clip(v.Num)
	case lenient.Bool:
		return strconv.FormatBool(v.Bool)
	case lenient.Null:
		return "null"
	case lenient.Array:
		b, err := v.MarshalJSON()
		if err == nil && len(b) <= 40 {
			return string(b)
		}
		return "a list"
	case lenient.Object:
		return "an object"
	}
	return "?"
}

// Int reads an integer field. DeepSpeed's pydantic models accept integral
// floats (5e8) and numeric strings; fractions, lists and objects are errors.
// In a scalar block the value is used as Python would: numbers only.
func (f *field) Int(def int64, minimum int64) int64 {
	if f.v == nil {
		f.record(def)
		return def
	}
	v := f.v
	var n int64
	switch {
	case v.Kind == lenient.Number:
		i, ok := v.Int64()
		if !ok {
			if fv, isNum := v.Float64(); isNum && fv == math.Trunc(fv) {
				f.errorf("use a value within ±9.2e18", "%s is out of the int64 range", clip(v.Num))
			} else {
				f.errorf(fmt.Sprintf("write a whole number, e.g. %d", int64(math.Round(mustFloat(v)))),
					"must be an integer, got %s (DeepSpeed rejects a fraction for an int field)", clip(v.Num))
			}
			f.record(def)
			return def
		}
		n = i
	case v.Kind == lenient.String && f.b.kind == pydanticBlock:
		i, err := strconv.ParseInt(strings.TrimSpace(v.Str), 10, 64)
		if err != nil {
			f.errorf("write a number without quotes", "must be an integer, got the string %s", quoteStr(v.Str))
			f.record(def)
			return def
		}
		f.b.c.s.warnf(v, f.dp(), "write it without quotes", "the string %s is converted to the integer %d", quoteStr(v.Str), i)
		n = i
	case v.Kind == lenient.Bool && f.b.kind == pydanticBlock:
		f.b.c.s.warnf(v, f.dp(), "write a number", "the boolean %v is converted to the integer %d", v.Bool, b2i(v.Bool))
		n = b2i(v.Bool)
	default:
		if v.Kind == lenient.String {
			f.errorf("write a number without quotes", "must be an integer, got the string %s (DeepSpeed does arithmetic with it and fails)", quoteStr(v.Str))
		} else {
			f.errorf("write a single whole number", "must be an integer, got %s", describe(v))
		}
		f.record(def)
		return def
	}
	if n < minimum {
		fix := fmt.Sprintf("use a value ≥ %d", minimum)
		if f.source == FromHF {
			fix = fmt.Sprintf("the value was filled from %s: pass a value ≥ %d there", hfFlagFor[f.path], minimum)
		}
		f.errorf(fix, "must be ≥ %d, got %d", minimum, n)
		f.record(def)
		return def
	}
	f.record(n)
	return n
}

func mustFloat(v *lenient.Value) float64 {
	x, _ := v.Float64()
	return x
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Float reads a number field.
func (f *field) Float(def float64) float64 {
	if f.v == nil {
		f.record(def)
		return def
	}
	v := f.v
	switch {
	case v.Kind == lenient.Number:
		x, ok := v.Float64()
		if !ok || math.IsInf(x, 0) || math.IsNaN(x) {
			f.errorf("use a finite number", "must be a finite number, got %s", clip(v.Num))
			f.record(def)
			return def
		}
		f.record(x)
		return x
	case v.Kind == lenient.String && f.b.kind == pydanticBlock:
		x, err := strconv.ParseFloat(strings.TrimSpace(v.Str), 64)
		if err == nil && !math.IsInf(x, 0) && !math.IsNaN(x) {
			f.b.c.s.warnf(v, f.dp(), "write it without quotes", "the string %s is converted to the number %g", quoteStr(v.Str), x)
			f.record(x)
			return x
		}
	}
	if v.Kind == lenient.String {
		f.errorf("write a number without quotes", "must be a number, got the string %s", quoteStr(v.Str))
	} else {
		f.errorf("write a single number", "must be a number, got %s", describe(v))
	}
	f.record(def)
	return def
}

// pydantic's lax bool strings.
var laxTrue = map[string]bool{"1": true, "on": true, "t": true, "true": true, "y": true, "yes": true}
var laxFalse = map[string]bool{"0": true, "off": true, "f": true, "false": true, "n": true, "no": true}

// Bool reads a boolean field. Pydantic blocks accept 0/1 and the strings
// true/false/yes/no/on/off/1/0; a scalar block uses Python truthiness, which
// turns the string "false" into true — reported, because it is surely not
// what was meant.
func (f *field) Bool(def bool) bool {
	if f.v == nil {
		f.record(def)
		return def
	}
	v := f.v
	switch v.Kind {
	case lenient.Bool:
		f.record(v.Bool)
		return v.Bool
	case lenient.Number:
		x, _ := v.Float64()
		if f.b.kind == pydanticBlock {
			if x == 0 || x == 1 {
				f.b.c.s.warnf(v, f.dp(), fmt.Sprintf("write %v", x == 1), "the number %s is converted to %v", clip(v.Num), x == 1)
				f.record(x == 1)
				return x == 1
			}
			f.errorf("write true or false", "must be a boolean, got %s", clip(v.Num))
			f.record(def)
			return def
		}
		f.b.c.s.warnf(v, f.dp(), fmt.Sprintf("write %v", x != 0), "the number %s is read as %v (Python truthiness)", clip(v.Num), x != 0)
		f.record(x != 0)
		return x != 0
	case lenient.String:
		s := strings.ToLower(strings.TrimSpace(v.Str))
		if f.b.kind == pydanticBlock {
			if laxTrue[s] || laxFalse[s] {
				b := laxTrue[s]
				f.b.c.s.warnf(v, f.dp(), fmt.Sprintf("write %v without quotes", b), "the string %s is converted to %v", quoteStr(v.Str), b)
				f.record(b)
				return b
			}
			f.errorf("write true or false", "must be a boolean, got the string %s", quoteStr(v.Str))
			f.record(def)
			return def
		}
		truthy := v.Str != ""
		f.b.c.s.warnf(v, f.dp(), "write true or false without quotes",
			"the string %s is read as %v by DeepSpeed (any non-empty string is true in Python)", quoteStr(v.Str), truthy)
		f.record(truthy)
		return truthy
	case lenient.Null:
		if f.b.kind == scalarBlock {
			f.record(false)
			return false
		}
	}
	f.errorf("write true or false", "must be a boolean, got %s", describe(v))
	f.record(def)
	return def
}

// String reads a string field; null gives def.
func (f *field) String(def string) string {
	if f.v == nil || f.v.Kind == lenient.Null {
		f.record(def)
		return def
	}
	if f.v.Kind != lenient.String {
		f.errorf("write a quoted string", "must be a string, got %s", describe(f.v))
		f.record(def)
		return def
	}
	f.record(f.v.Str)
	return f.v.Str
}

// Enum reads a string that must be one of allowed (case-sensitive, like
// DeepSpeed's enums).
func (f *field) Enum(def string, allowed ...string) string {
	if f.v == nil {
		f.record(def)
		return def
	}
	if f.v.Kind == lenient.String {
		for _, a := range allowed {
			if f.v.Str == a {
				f.record(a)
				return a
			}
		}
		fix := didYouMean(f.v.Str, allowed, "")
		if fix == "" {
			fix = "use one of " + quoteAll(allowed)
		} else {
			fix += " (values are case-sensitive: " + quoteAll(allowed) + ")"
		}
		f.errorf(fix, "%s is not one of %s", quoteStr(f.v.Str), quoteAll(allowed))
	} else {
		f.errorf("use one of "+quoteAll(allowed), "must be one of %s, got %s", quoteAll(allowed), describe(f.v))
	}
	f.record(def)
	return def
}

func quoteAll(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = quote(x)
	}
	return strings.Join(q, ", ")
}

// Raw records and returns the value as a plain Go value (for blocks dszero
// passes through without interpreting, such as autotuning).
func (f *field) Raw() any {
	if f.v == nil {
		f.record(nil)
		return nil
	}
	x := f.v.Interface()
	f.record(x)
	return x
}

// Object returns the field as a nested block of the given kind. A value
// that is not an object (other than null) is an error.
func (f *field) Object(kind blockKind) *block {
	nb := f.b.c.newBlock(f.path, nil, kind)
	if f.v == nil || f.v.Kind == lenient.Null {
		return nb
	}
	if f.v.Kind != lenient.Object {
		f.errorf("write an object {...}", "must be an object, got %s", describe(f.v))
		return nb
	}
	nb.v = f.v
	return nb
}

// dp is the path for diagnostics: as written, falling back to canonical.
func (f *field) dp() string {
	if f.diagPath != "" {
		return f.diagPath
	}
	return f.path
}
