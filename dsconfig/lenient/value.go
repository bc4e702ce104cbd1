package lenient

import (
	"bytes"
	"fmt"
	"math/big"
	"strconv"
	"unicode/utf8"
)

// Kind is the type of a Value, as in JSON.
type Kind int

const (
	Null Kind = iota
	Bool
	Number
	String
	Array
	Object
)

func (k Kind) String() string {
	switch k {
	case Null:
		return "null"
	case Bool:
		return "bool"
	case Number:
		return "number"
	case String:
		return "string"
	case Array:
		return "array"
	case Object:
		return "object"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Pos is a position in the input.
//
// Offset counts bytes from the start of the data handed to Parse (a UTF-8
// byte order mark included). Line and Col are 1-based; Col counts Unicode
// characters, not bytes, and a tab is one character. "\n", "\r\n" and a lone
// "\r" each end a line, as they do for Python's text-mode open, which is how
// DeepSpeed reads the file. A byte order mark takes no column.
type Pos struct {
	Offset int
	Line   int
	Col    int
}

// String formats p as "line:col".
func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Line, p.Col) }

// Member is one key/value pair of an Object, in file order.
type Member struct {
	Key    string
	KeyPos Pos // the key's first character (its opening quote when quoted)
	// KeyQuoteless reports a key written without quotes (Hjson's
	// `stage: 3`). DeepSpeed reads such keys; callers may warn, since a
	// strict JSON reader (HF Accelerate, json.load) rejects the file.
	KeyQuoteless bool
	Value        *Value
}

// Value is one node of a parsed config: a JSON value plus where it was
// written. Only the fields that belong to Kind are set.
type Value struct {
	Kind Kind
	Pos  Pos // the value's first character: its quote, '{', '[', digit or letter

	Bool bool   // Bool
	Str  string // String, unescaped
	// Num is a Number's literal text exactly as written, such as "5e8",
	// "1.0" or "-3". Parse only produces literals of JSON's number grammar.
	Num string
	// Quoteless reports a String written without quotes. Parse rejects
	// those; only ParseHjson returns them (DeepSpeed's view of `auto` or
	// `${zero_stage},`).
	Quoteless bool

	Members []Member // Object, in file order, keys unique
	Elems   []*Value // Array
}

// Get returns the value of key in object v. It reports false when v is not
// an object or has no such key.
func (v *Value) Get(key string) (*Value, bool) {
	if v == nil || v.Kind != Object {
		return nil, false
	}
	for i := range v.Members {
		if v.Members[i].Key == key {
			return v.Members[i].Value, true
		}
	}
	return nil, false
}

// Float64 returns the number as the nearest float64. It reports false when
// v is not a Number or its literal is out of float64 range (Parse never
// returns such a number: hjson-py fails on them too).
func (v *Value) Float64() (float64, bool) {
	if v == nil || v.Kind != Number {
		return 0, false
	}
	f, err := strconv.ParseFloat(v.Num, 64)
	if err != nil {
		return 0, false
	}
	return f, true
}

// IsIntegral reports whether v is a Number whose exact decimal value is a
// whole number: "3", "2.0", "5e8" and "1.5e1" are, "2.5" and "1e-3" are not.
// The test is on the literal, not on a rounded float, so "1e-400" is not.
func (v *Value) IsIntegral() bool {
	if v == nil || v.Kind != Number {
		return false
	}
	_, digits, exp, ok := splitDecimal(v.Num)
	return ok && (digits == "" || exp >= 0)
}

// Int64 returns the exact value of an integral Number. It reports false
// when v is not a Number, is not a whole number ("2.5") or does not fit in
// an int64. "5e8" gives 500000000 and "2.0" gives 2, as DeepSpeed (pydantic,
// lax mode) reads them.
func (v *Value) Int64() (int64, bool) {
	if v == nil || v.Kind != Number {
		return 0, false
	}
	neg, digits, exp, ok := splitDecimal(v.Num)
	if !ok || (digits != "" && exp < 0) {
		return 0, false
	}
	if digits == "" {
		return 0, true
	}
	if len(digits)+exp > 19 { // at least 10^19 > MaxInt64
		return 0, false
	}
	var u uint64
	for i := 0; i < len(digits)+exp; i++ {
		d := uint64(0)
		if i < len(digits) {
			d = uint64(digits[i] - '0')
		}
		if u > (1<<64-1-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return int64(-u), true // wraps correctly for 1<<63
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

// BigInt returns the exact value of an integral Number of any size, as
// Python holds the integers DeepSpeed reads: "1099511627776", "1e30" and
// "2.0" are whole numbers, "2.5" is not. It reports false when v is not a
// Number, is not a whole number, or has more than 400 digits (beyond
// float64's range, which Parse never returns).
func (v *Value) BigInt() (*big.Int, bool) {
	if v == nil || v.Kind != Number {
		return nil, false
	}
	neg, digits, exp, ok := splitDecimal(v.Num)
	if !ok || (digits != "" && exp < 0) {
		return nil, false
	}
	if digits == "" {
		return new(big.Int), true
	}
	if len(digits)+exp > 400 {
		return nil, false
	}
	n, _ := new(big.Int).SetString(digits, 10)
	if exp > 0 {
		n.Mul(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(exp)), nil))
	}
	if neg {
		n.Neg(n)
	}
	return n, true
}

// splitDecimal splits a JSON number literal into its sign, its significant
// digits with leading and trailing zeros removed ("" for zero) and a power
// of ten, so that the value is ±digits × 10^exp. It reports false for text
// that is not a JSON number. Exponents are clamped to ±1<<30, far outside
// any range a caller tests, so huge exponents cannot overflow.
func splitDecimal(num string) (neg bool, digits string, exp int, ok bool) {
	if end, ok := matchNumber([]byte(num), 0); !ok || end != len(num) {
		return false, "", 0, false
	}
	s := num
	if s[0] == '-' {
		neg, s = true, s[1:]
	}
	mant := s
	if i := indexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		e := s[i+1:]
		sign := 1
		if e[0] == '+' || e[0] == '-' {
			if e[0] == '-' {
				sign = -1
			}
			e = e[1:]
		}
		for j := 0; j < len(e); j++ {
			if exp < 1<<30 {
				exp = exp*10 + int(e[j]-'0')
			}
		}
		exp *= sign
	}
	var buf []byte
	if i := indexAny(mant, "."); i >= 0 {
		buf = append(buf, mant[:i]...)
		buf = append(buf, mant[i+1:]...)
		exp -= len(mant) - i - 1
	} else {
		buf = []byte(mant)
	}
	buf = bytes.TrimLeft(buf, "0")
	for len(buf) > 0 && buf[len(buf)-1] == '0' {
		buf = buf[:len(buf)-1]
		exp++
	}
	if len(buf) == 0 {
		return neg, "", 0, true
	}
	return neg, string(buf), exp, true
}

func indexAny(s, chars string) int {
	for i := 0; i < len(s); i++ {
		for j := 0; j < len(chars); j++ {
			if s[i] == chars[j] {
				return i
			}
		}
	}
	return -1
}

// Interface returns v as plain Go values: map[string]any, []any, string,
// bool, nil, and for numbers int64 when Int64 succeeds, else float64. (This
// is not hjson-py's int/float split, which depends on how the number was
// written; use Num for that.)
func (v *Value) Interface() any {
	if v == nil {
		return nil
	}
	switch v.Kind {
	case Bool:
		return v.Bool
	case Number:
		if i, ok := v.Int64(); ok {
			return i
		}
		f, _ := v.Float64()
		return f
	case String:
		return v.Str
	case Array:
		out := make([]any, len(v.Elems))
		for i, e := range v.Elems {
			out[i] = e.Interface()
		}
		return out
	case Object:
		out := make(map[string]any, len(v.Members))
		for _, m := range v.Members {
			out[m.Key] = m.Value.Interface()
		}
		return out
	}
	return nil
}

// MarshalJSON writes v as compact JSON: members in file order, numbers as
// written (Parse only accepts literals that are valid JSON), strings with
// only the escapes JSON requires. Parsing the output gives back an equal
// tree, positions and quoting aside.
func (v *Value) MarshalJSON() ([]byte, error) {
	var b []byte
	b, err := appendJSON(b, v)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func appendJSON(b []byte, v *Value) ([]byte, error) {
	if v == nil {
		return append(b, "null"...), nil
	}
	switch v.Kind {
	case Null:
		return append(b, "null"...), nil
	case Bool:
		return strconv.AppendBool(b, v.Bool), nil
	case Number:
		if end, ok := matchNumber([]byte(v.Num), 0); !ok || end != len(v.Num) {
			return nil, fmt.Errorf("lenient: number %q at %v is not a JSON number", v.Num, v.Pos)
		}
		return append(b, v.Num...), nil
	case String:
		return appendString(b, v.Str), nil
	case Array:
		b = append(b, '[')
		for i, e := range v.Elems {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case Object:
		b = append(b, '{')
		for i, m := range v.Members {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, m.Key)
			b = append(b, ':')
			var err error
			if b, err = appendJSON(b, m.Value); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	return nil, fmt.Errorf("lenient: value at %v has unknown kind %v", v.Pos, v.Kind)
}

// appendString quotes s as a JSON string. Invalid UTF-8 (impossible for
// parsed values) becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, fmt.Sprintf(`\u%04x`, c)...)
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		b = utf8.AppendRune(b, r)
		i += n
	}
	return append(b, '"')
}
