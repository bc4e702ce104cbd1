package lenient

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Error is a syntax error, or a construct DeepSpeed would silently misread,
// at a position in a config file. Every error Parse and ParseHjson return is
// an *Error.
type Error struct {
	File string // as given to Parse
	Pos  Pos    // where the problem is; Offset may equal the input length (end of input)
	Msg  string // what is wrong
	Hint string // how to fix it, or what DeepSpeed would do; may be empty
}

// Error formats e as "file:line:col: msg; hint", leaving out the file when
// it is empty and the hint when there is none.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	fmt.Fprintf(&b, "%d:%d: %s", e.Pos.Line, e.Pos.Col, e.Msg)
	if e.Hint != "" {
		b.WriteString("; ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

func (p *parser) errorf(off int, hint, format string, args ...any) *Error {
	return &Error{File: p.file, Pos: p.pos(off), Msg: fmt.Sprintf(format, args...), Hint: hint}
}

// pathString writes the path of the value being parsed, e.g.
// zero_optimization.offload_param.device or a[2].b; keys that are not
// plain names are written as ["key"].
func (p *parser) pathString() string {
	var b strings.Builder
	for _, s := range p.path {
		switch {
		case s.index >= 0:
			fmt.Fprintf(&b, "[%d]", s.index)
		case isName(s.key):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(clipText(s.key))
		default:
			fmt.Fprintf(&b, "[%s]", quoteShort(s.key))
		}
	}
	return b.String()
}

func isName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return false
		}
	}
	return true
}

// forPath returns " for <path>", or "" at the top level.
func (p *parser) forPath() string {
	if len(p.path) == 0 {
		return ""
	}
	return " for " + p.pathString()
}

// describe names the character at off for a message.
func (p *parser) describe(off int) string {
	if off >= len(p.src) {
		return "end of input"
	}
	r, _ := utf8.DecodeRune(p.src[off:])
	if r == ' ' || !unicode.IsPrint(r) {
		return fmt.Sprintf("%U", r)
	}
	return fmt.Sprintf("'%c'", r)
}

// excerpt shows input text in a message: as it is when printable, else
// quoted; cut to 40 characters.
func excerpt(b []byte) string {
	s := string(b)
	if h, cut := head(s, 40); cut {
		s = h + "…"
	}
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' {
			return strconv.Quote(s)
		}
	}
	return s
}

// quoteShort quotes s, cut to 60 characters.
func quoteShort(s string) string {
	if h, cut := head(s, 60); cut {
		return strconv.Quote(h) + "…"
	}
	return strconv.Quote(s)
}

// clipText cuts s to 60 characters, marked with "…" when cut.
func clipText(s string) string {
	if h, cut := head(s, 60); cut {
		return h + "…"
	}
	return s
}

// head returns the first n characters of s and whether that cut it,
// reading no further into s than it keeps: a message about a 5 MB key
// costs what a message about a short one does.
func head(s string, n int) (string, bool) {
	k := 0
	for i := range s {
		if k == n {
			return s[:i], true
		}
		k++
	}
	return s, false
}

func firstField(b []byte) []byte {
	for i, c := range b {
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			return b[:i]
		}
	}
	return b
}

// pyIsSpace is Python's str.isspace for one character, which str.strip
// uses: Go's unicode.IsSpace plus the separators U+001C..U+001F.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1C && r <= 0x1F }

func pyTrim(s string) string      { return strings.TrimFunc(s, pyIsSpace) }
func pyTrimRight(s string) string { return strings.TrimRightFunc(s, pyIsSpace) }

// pyWhiteSpaceLen returns the length in bytes of the Python white space at
// the start of b.
func pyWhiteSpaceLen(b []byte) int {
	n := 0
	for n < len(b) {
		r, size := utf8.DecodeRune(b[n:])
		if !pyIsSpace(r) {
			break
		}
		n += size
	}
	return n
}

func (p *parser) unclosed(open int) *Error {
	what, closer := "object", '}'
	if p.src[open] == '[' {
		what, closer = "array", ']'
	}
	o := p.pos(open)
	where := ""
	if len(p.path) > 0 {
		where = " (" + p.pathString() + ")"
	}
	return p.errorf(len(p.src), fmt.Sprintf("add the missing '%c'", closer),
		"unexpected end of input: the %s opened at line %d, column %d%s is not closed", what, o.Line, o.Col, where)
}

// innermost describes the innermost open bracket for a mismatch message.
func (p *parser) innermost() (byte, string) {
	if len(p.open) == 0 {
		return 0, "there is no open bracket"
	}
	off := p.open[len(p.open)-1]
	o := p.pos(off)
	return p.src[off], fmt.Sprintf("the innermost open bracket is '%c' at line %d, column %d", p.src[off], o.Line, o.Col)
}

// unexpectedInObject explains a punctuator where a key should start.
func (p *parser) unexpectedInObject(j int) *Error {
	switch c := p.src[j]; c {
	case ',':
		return p.errorf(j, "remove the extra comma", "found ',' where a key was expected")
	case '{', '[':
		return p.errorf(j, "in an object every value needs a key: is a key missing?", "found '%c' where a key was expected", c)
	default: // '}' or ']'
		open, where := p.innermost()
		if open == 0 {
			return p.errorf(j, "add the missing opening bracket, or remove this one", "found '%c' but %s", c, where)
		}
		return p.errorf(j, "close the object with '}'", "found '%c' but %s", c, where)
	}
}

// missingValue explains a punctuator where a value should start.
func (p *parser) missingValue(j int) *Error {
	switch c := p.src[j]; c {
	case ',':
		return p.errorf(j, "remove the extra comma, or write the missing value", "found ',' where a value was expected%s", p.forPath())
	case ':':
		return p.errorf(j, "is a key missing, or is there an extra ':'?", "found ':' where a value was expected%s", p.forPath())
	default: // '}' or ']'
		open, where := p.innermost()
		if (open == '{' && c == '}') || (open == '[' && c == ']') {
			return p.errorf(j, "write the value, or remove the key", "found '%c' where a value was expected%s", c, p.forPath())
		}
		closer := "]"
		if open == '{' {
			closer = "}"
		}
		if open == 0 {
			return p.errorf(j, "add the missing opening bracket, or remove this one", "found '%c' but %s", c, where)
		}
		return p.errorf(j, "close it with '"+closer+"'", "found '%c' but %s", c, where)
	}
}

func (p *parser) duplicate(key string, at, first Pos) *Error {
	where := "in the top-level object"
	if len(p.path) > 0 {
		where = "in " + strconv.Quote(p.pathString())
	}
	firstAt := fmt.Sprintf("first at line %d", first.Line)
	if first.Line == at.Line {
		firstAt = fmt.Sprintf("first at %d:%d", first.Line, first.Col)
	}
	return &Error{File: p.file, Pos: at,
		Msg:  fmt.Sprintf("duplicate key %s %s (%s)", quoteShort(key), where, firstAt),
		Hint: "DeepSpeed rejects duplicate keys: keep one"}
}

func (p *parser) notObject(v *Value) *Error {
	var what string
	switch v.Kind {
	case Number:
		what = "the number " + clipText(v.Num)
	case String:
		what = "the string " + quoteShort(v.Str)
	case Bool:
		what = strconv.FormatBool(v.Bool)
	default:
		what = v.Kind.String()
	}
	return &Error{File: p.file, Pos: v.Pos, Msg: "the config is " + what + "; expected a JSON object",
		Hint: `DeepSpeed needs a JSON object such as {"train_batch_size": 8}`}
}

func (p *parser) outOfRange(off int, num string) *Error {
	hint := "it does not fit in a 64-bit float"
	if strings.ContainsAny(num, ".eE") {
		hint = "it overflows a 64-bit float, and DeepSpeed's Hjson reader fails on it too (OverflowError)"
	}
	return p.errorf(off, hint, "number %s is out of range%s", clipText(num), p.forPath())
}

// checkBareKey rejects unquoted keys that are almost surely typos: Hjson
// reads `a"` (a lost opening quote), `a#b` or a key glued to odd white
// space as plain key text, so the setting silently goes nowhere.
func (p *parser) checkBareKey(key string, off int) *Error {
	for i, r := range key {
		switch {
		case r == '"' || r == '\'':
			return p.errorf(off, "is an opening quote missing? quote the whole key", "unquoted key %s contains a quote", excerpt([]byte(key)))
		case r == '#' || r == '/' && (strings.HasPrefix(key[i:], "//") || strings.HasPrefix(key[i:], "/*")):
			return p.errorf(off, "Hjson reads it as part of the key, not as a comment: quote the key or move the comment",
				"unquoted key %s contains a comment marker", excerpt([]byte(key)))
		case pyIsSpace(r) || !unicode.IsPrint(r):
			return p.errorf(off, "Hjson reads it as part of the key: remove it or quote the key",
				"unquoted key %s contains the character %U", excerpt([]byte(key)), r)
		}
	}
	return nil
}

// bareValue explains an unquoted value that Hjson would read as a string.
func (p *parser) bareValue(off int, raw string) *Error {
	at := ""
	if len(p.path) > 0 {
		at = " at " + p.pathString()
	}
	shown := excerpt([]byte(raw))
	asString := fmt.Sprintf("DeepSpeed's Hjson reader would take it as the string %s", quoteShort(raw))
	// word is the first token; when only closing punctuation follows it on
	// the line (`auto,` or `auto}`), the token is what the author meant.
	word := raw
	if i := strings.IndexAny(raw, ", \t}]"); i >= 0 {
		word = raw[:i]
	}
	single := strings.Trim(raw[len(word):], ", \t}]") == ""
	lower := strings.ToLower(word)
	bare := strings.TrimLeft(lower, "+-")
	switch {
	case raw == "null" || raw == "true" || raw == "false" || isJSONNumber(raw):
		return p.errorf(off, "replace it with plain spaces",
			"unquoted value %s%s is next to unusual white space, so %s", shown, at, asString)
	case isTemplate(raw):
		return p.errorf(off, "fill in the value or quote it",
			"unquoted value %s%s looks like an unfilled template; %s and fail later", shown, at, asString)
	case !single || word == "":
		// fall through to the generic message
	case lower == "true" || lower == "false" || lower == "null" || lower == "none":
		fix := lower
		if fix == "none" {
			fix = "null"
		}
		return p.errorf(off, "write "+fix,
			"unquoted value %s%s is not a JSON literal (they are lowercase: true, false, null); %s", shown, at, asString)
	case bare == "nan" || bare == "inf" || bare == "infinity":
		return p.errorf(off, "JSON has no NaN or Infinity: write a finite number",
			"unquoted value %s%s is not a JSON number; %s", shown, at, asString)
	case strings.ContainsRune("+-.0123456789", rune(word[0])):
		hint := "write a plain decimal number such as 0.5 or 5e8, or quote it if a string is meant"
		if fix, ok := fixNumber(word); ok {
			hint = "write " + fix
		}
		return p.errorf(off, hint, "unquoted value %s%s is not a valid JSON number; %s", shown, at, asString)
	case strings.IndexFunc(word, func(r rune) bool { return pyIsSpace(r) || !unicode.IsPrint(r) || strings.ContainsRune(`"'{[:`, r) }) < 0:
		return p.errorf(off, fmt.Sprintf("quote it (%s) if a string is meant", quoteShort(word)),
			"unquoted value %s%s is a bare word; %s", shown, at, asString)
	}
	return p.errorf(off, "quote strings; if JSON was meant, look for a missing quote or comma",
		"unquoted value %s%s: Hjson reads an unquoted value to the end of the line, so %s", shown, at, asString)
}

func isJSONNumber(s string) bool {
	end, ok := matchNumber([]byte(s), 0)
	return ok && end == len(s)
}

// isTemplate spots placeholders left by a templating step: ${x}, $x,
// {{x}}, %(x)s and <x>.
func isTemplate(s string) bool {
	if strings.Contains(s, "${") || strings.Contains(s, "{{") || strings.Contains(s, "%(") {
		return true
	}
	if i := strings.IndexByte(s, '$'); i >= 0 && i+1 < len(s) {
		if c := s[i+1]; c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			return true
		}
	}
	if strings.HasPrefix(s, "<") {
		if i := strings.IndexByte(s, '>'); i > 1 && isName(s[1:i]) {
			return true
		}
	}
	return false
}

// fixNumber rewrites a number-like word that JSON rejects (+1, .5, 1., 007,
// 1_000, 0x10) as the JSON number it most likely means.
func fixNumber(s string) (string, bool) {
	neg := strings.HasPrefix(s, "-")
	t := strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	if !neg && strings.HasPrefix(t, "-") {
		return "", false
	}
	t = strings.ReplaceAll(t, "_", "")
	if strings.HasPrefix(t, "0x") || strings.HasPrefix(t, "0X") {
		u, err := strconv.ParseUint(t[2:], 16, 64)
		if err != nil {
			return "", false
		}
		t = strconv.FormatUint(u, 10)
	}
	if strings.HasPrefix(t, ".") {
		t = "0" + t
	}
	if i := strings.IndexAny(t, "eE"); i > 0 && t[i-1] == '.' {
		t = t[:i] + "0" + t[i:]
	} else if strings.HasSuffix(t, ".") {
		t += "0"
	}
	for len(t) > 1 && t[0] == '0' && t[1] >= '0' && t[1] <= '9' {
		t = t[1:]
	}
	if neg {
		t = "-" + t
	}
	if t == s || !isJSONNumber(t) {
		return "", false
	}
	return t, true
}
