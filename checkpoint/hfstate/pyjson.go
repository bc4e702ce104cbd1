package hfstate

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// JSON as Python's json module writes it. trainer_state.json is
// json.dumps(dataclasses.asdict(state), indent=2, sort_keys=True) + "\n":
// floats in Python's repr (1e-05, 2.0), ints without a point, non-ASCII
// escaped (ensure_ascii), and NaN, Infinity and -Infinity for the floats
// JSON has no spelling for (a NaN loss in log_history, an infinite
// best_metric) — which Go's encoding/json neither writes nor reads.
//
// A value is nil, bool, int64, float64, string, []any or map[string]any.

// marshalPy writes v as json.dumps(v, indent=2, sort_keys=True).
func marshalPy(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := writePy(&b, v, 0); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writePy(b *bytes.Buffer, v any, depth int) error {
	if depth > 100 {
		return errors.New("json: nested deeper than 100")
	}
	indent := func(d int) {
		b.WriteByte('\n')
		for range d {
			b.WriteString("  ")
		}
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(map[bool]string{true: "true", false: "false"}[x])
	case int:
		b.WriteString(strconv.Itoa(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(pyFloatJSON(x))
	case string:
		writePyString(b, x)
	case []any:
		if len(x) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			indent(depth + 1)
			if err := writePy(b, e, depth+1); err != nil {
				return err
			}
		}
		indent(depth)
		b.WriteByte(']')
	case map[string]any:
		if len(x) == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys) // sort_keys: Python sorts str by code point; Go by bytes: the same order for UTF-8
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			indent(depth + 1)
			writePyString(b, k)
			b.WriteString(": ")
			if err := writePy(b, x[k], depth+1); err != nil {
				return err
			}
		}
		indent(depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("json: cannot write a Go %T", v)
	}
	return nil
}

// pyFloatJSON is json.dumps of a float: repr, with NaN and the infinities
// spelled as JavaScript does.
func pyFloatJSON(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	i := bytes.IndexByte([]byte(e), 'e')
	mant := e[:i]
	exp, _ := strconv.Atoi(e[i+1:])
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !bytes.ContainsAny([]byte(s), ".") {
		s += ".0"
	}
	return s
}

func writePyString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (r > 0x7f && r < 0x10000): // ensure_ascii: lower-case hex
				fmt.Fprintf(b, `\u%04x`, r)
			case r >= 0x10000:
				r1, r2 := utf16.EncodeRune(r)
				fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// unmarshalPy reads JSON as Python's json.loads does, NaN and the
// infinities included. Numbers with a fraction or exponent are float64,
// others int64 (float64 when they overflow it).
func unmarshalPy(data []byte) (any, error) {
	p := &pyParser{s: data}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.s) {
		return nil, p.errorf("trailing data")
	}
	return v, nil
}

type pyParser struct {
	s []byte
	i int
}

func (p *pyParser) errorf(format string, args ...any) error {
	return fmt.Errorf("json: offset %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *pyParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\n' || p.s[p.i] == '\t' || p.s[p.i] == '\r') {
		p.i++
	}
}

func (p *pyParser) lit(word string) bool {
	if bytes.HasPrefix(p.s[p.i:], []byte(word)) {
		p.i += len(word)
		return true
	}
	return false
}

func (p *pyParser) value(depth int) (any, error) {
	if depth > 100 {
		return nil, p.errorf("nested deeper than 100")
	}
	p.space()
	if p.i >= len(p.s) {
		return nil, p.errorf("unexpected end")
	}
	switch c := p.s[p.i]; {
	case c == '{':
		p.i++
		m := map[string]any{}
		p.space()
		if p.lit("}") {
			return m, nil
		}
		for {
			p.space()
			if p.i >= len(p.s) || p.s[p.i] != '"' {
				return nil, p.errorf("want a string key")
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			p.space()
			if !p.lit(":") {
				return nil, p.errorf("want ':'")
			}
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			m[k] = v
			p.space()
			if p.lit("}") {
				return m, nil
			}
			if !p.lit(",") {
				return nil, p.errorf("want ',' or '}'")
			}
		}
	case c == '[':
		p.i++
		l := []any{}
		p.space()
		if p.lit("]") {
			return l, nil
		}
		for {
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
			p.space()
			if p.lit("]") {
				return l, nil
			}
			if !p.lit(",") {
				return nil, p.errorf("want ',' or ']'")
			}
		}
	case c == '"':
		return p.str()
	case p.lit("true"):
		return true, nil
	case p.lit("false"):
		return false, nil
	case p.lit("null"):
		return nil, nil
	case p.lit("NaN"):
		return math.NaN(), nil
	case p.lit("Infinity"):
		return math.Inf(1), nil
	case p.lit("-Infinity"):
		return math.Inf(-1), nil
	}
	return p.number()
}

func (p *pyParser) number() (any, error) {
	start := p.i
	float := false
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '.' || c == 'e' || c == 'E' {
			float = true
		} else if !(c == '-' || c == '+' || (c >= '0' && c <= '9')) {
			break
		}
		p.i++
	}
	tok := string(p.s[start:p.i])
	if tok == "" {
		return nil, p.errorf("unexpected %q", p.s[p.i])
	}
	if !float {
		if n, err := strconv.ParseInt(tok, 10, 64); err == nil {
			return n, nil
		}
	}
	f, err := strconv.ParseFloat(tok, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, p.errorf("bad number %q", tok)
	}
	return f, nil
}

func (p *pyParser) str() (string, error) {
	p.i++ // the opening quote
	var b []byte
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return string(b), nil
		case c == '\\':
			if p.i+1 >= len(p.s) {
				return "", p.errorf("bad escape")
			}
			e := p.s[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'n':
				b = append(b, '\n')
			case 't':
				b = append(b, '\t')
			case 'r':
				b = append(b, '\r')
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'u':
				r, err := p.hex4()
				if err != nil {
					return "", err
				}
				if utf16.IsSurrogate(r) && bytes.HasPrefix(p.s[p.i:], []byte(`\u`)) {
					p.i += 2
					r2, err := p.hex4()
					if err != nil {
						return "", err
					}
					r = utf16.DecodeRune(r, r2)
				}
				b = utf8.AppendRune(b, r)
			default:
				return "", p.errorf("bad escape \\%c", e)
			}
		default:
			b = append(b, c)
			p.i++
		}
	}
	return "", p.errorf("unterminated string")
}

func (p *pyParser) hex4() (rune, error) {
	if p.i+4 > len(p.s) {
		return 0, p.errorf("bad \\u escape")
	}
	n, err := strconv.ParseUint(string(p.s[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, p.errorf("bad \\u escape")
	}
	p.i += 4
	return rune(n), nil
}
