package lenient

import (
	"bytes"
	"sort"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// maxDepth bounds the nesting of objects and arrays. hjson-py is recursive
// Python and fails with RecursionError near 490 levels (measured with
// Python 3.11's default limit of 1000 frames), so everything within this
// bound is also read by DeepSpeed; no real config nests deeper than ten.
const maxDepth = 400

// Parse reads a DeepSpeed config the way DeepSpeed's Hjson reader does and
// returns its value tree with positions. Where that reader would silently
// turn a mistake into a string (an unquoted `auto`, `${zero_stage},`,
// `.5`), Parse returns an *Error instead. Every error Parse returns is an
// *Error; file names the input in error messages.
func Parse(file string, data []byte) (*Value, error) {
	v, _, err := parse(file, data, false)
	return v, err
}

// ParseWithDeviations is Parse that also lists, in file order, every place
// where the input uses Hjson syntax that JSON does not allow. DeepSpeed
// reads such a file; Python's json.load, which HF's Trainer and Accelerate
// use to read a ds_config, does not.
func ParseWithDeviations(file string, data []byte) (*Value, []Deviation, error) {
	return parse(file, data, false)
}

// ParseHjson reads data exactly as DeepSpeed's load_ds_config sees it:
// unquoted values that are not numbers, true, false or null become Strings
// with Quoteless set, and an input of only white space and comments is an
// empty object. It still requires an object at the top level and rejects
// duplicate keys, as DeepSpeed does. Use it to reproduce DeepSpeed's view of
// a file (for example to compare verdicts); configs for dszero go through
// Parse.
func ParseHjson(file string, data []byte) (*Value, error) {
	v, _, err := parse(file, data, true)
	return v, err
}

type segment struct {
	key   string
	index int // >= 0 for an array element, else -1
}

type parser struct {
	file          string
	src           []byte
	i             int  // next byte to read
	keepQuoteless bool // ParseHjson
	bom           int  // length of a leading byte order mark, 0 or 3
	depth         int
	path          []segment // where the value being parsed sits, for messages
	open          []int     // offsets of the enclosing '{' and '[', for messages
	at            Pos       // the last position computed, to make pos incremental
	devs          []deviationAt
}

// deviationAt is a Deviation before its offset is turned into a Pos.
type deviationAt struct {
	kind DeviationKind
	off  int
}

// deviate records Hjson syntax outside JSON at offset off.
func (p *parser) deviate(kind DeviationKind, off int) {
	p.devs = append(p.devs, deviationAt{kind, off})
}

// deviations returns the recorded deviations in file order with their
// positions, in one pass over the input.
func (p *parser) deviations() []Deviation {
	if len(p.devs) == 0 {
		return nil
	}
	sort.SliceStable(p.devs, func(i, j int) bool { return p.devs[i].off < p.devs[j].off })
	p.at = Pos{Offset: p.bom, Line: 1, Col: 1}
	out := make([]Deviation, len(p.devs))
	for i, d := range p.devs {
		out[i] = Deviation{Kind: d.kind, Pos: p.pos(d.off)}
	}
	return out
}

var bom = []byte{0xEF, 0xBB, 0xBF}

func parse(file string, data []byte, keep bool) (*Value, []Deviation, error) {
	p := &parser{file: file, src: data, keepQuoteless: keep}
	v, err := p.parseInput()
	if err != nil {
		return nil, nil, err
	}
	return v, p.deviations(), nil
}

func (p *parser) parseInput() (*Value, error) {
	data, keep := p.src, p.keepQuoteless
	if bytes.HasPrefix(data, bom) {
		p.bom, p.i = len(bom), len(bom)
		p.deviate(ByteOrderMark, 0)
	}
	p.at = Pos{Offset: p.bom, Line: 1, Col: 1}
	if off := invalidUTF8(data); off >= 0 {
		return nil, p.errorf(off, "DeepSpeed opens the file as UTF-8 text and fails to decode it: save it as UTF-8",
			"invalid UTF-8 byte 0x%02X", data[off])
	}
	if err := p.skip(); err != nil {
		return nil, err
	}
	if p.i >= len(data) {
		if keep && p.bom == 0 { // hjson-py's raw_decode returns {} here
			return &Value{Kind: Object, Pos: p.pos(0)}, nil
		}
		return nil, p.errorf(p.i, "DeepSpeed would read it as {} and then fail: a config needs at least train_batch_size or train_micro_batch_size_per_gpu",
			"empty config: expected a JSON object")
	}
	var v *Value
	var err error
	switch p.src[p.i] {
	case '{':
		v, err = p.parseValue()
	case '[':
		return nil, p.errorf(p.i, `DeepSpeed needs a JSON object such as {"train_batch_size": 8}`,
			"the config is an array; expected a JSON object")
	default:
		v, err = p.parseRoot()
	}
	if err != nil {
		return nil, err
	}
	if err := p.skip(); err != nil {
		return nil, err
	}
	if p.i < len(p.src) {
		return nil, p.errorf(p.i, "is there an extra '}' or a second object?",
			"unexpected %s after the end of the top-level object", p.describe(p.i))
	}
	return v, nil
}

// parseRoot reads a top level that does not start with '{' or '['. Hjson
// allows the braces of the root object to be omitted; failing that, hjson-py
// tries a single value, which DeepSpeed cannot use.
func (p *parser) parseRoot() (*Value, error) {
	start, devs := p.i, len(p.devs)
	v, err := p.parseObject(false)
	if err == nil {
		p.deviate(RootWithoutBraces, start)
		return v, nil
	}
	p.i, p.depth, p.path, p.open, p.devs = start, 0, p.path[:0], p.open[:0], p.devs[:devs]
	if sv, err2 := p.parseValue(); err2 == nil && p.skip() == nil && p.i >= len(p.src) {
		return nil, p.notObject(sv)
	}
	return nil, err
}

// skip skips what hjson-py's getNext skips: ' ', '\t', '\n', '\r' and
// comments (# and // to the end of the line, /* to */). Other white space,
// such as a form feed or U+00A0, is not skipped: Hjson reads it as part of
// an unquoted key or value.
func (p *parser) skip() error {
	for p.i < len(p.src) {
		c := p.src[p.i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			p.i++
		case c == '#' || c == '/' && p.next('/'):
			p.deviate(Comment, p.i)
			for p.i < len(p.src) && p.src[p.i] != '\n' && p.src[p.i] != '\r' {
				p.i++
			}
		case c == '/' && p.next('*'):
			p.deviate(Comment, p.i)
			n := bytes.Index(p.src[p.i+2:], []byte("*/"))
			if n < 0 {
				return p.errorf(p.i, "close it with */ (DeepSpeed's Hjson reader fails on it too)", "unterminated /* comment")
			}
			p.i += 2 + n + 2
		default:
			return nil
		}
	}
	return nil
}

// next reports whether the byte after the current one is c.
func (p *parser) next(c byte) bool { return p.i+1 < len(p.src) && p.src[p.i+1] == c }

func (p *parser) peekIs(c byte) bool { return p.i < len(p.src) && p.src[p.i] == c }

// parseValue reads the value at p.i, which is past white space and comments.
func (p *parser) parseValue() (*Value, error) {
	if p.i >= len(p.src) {
		return nil, p.errorf(p.i, "", "unexpected end of input: expected a value%s", p.forPath())
	}
	switch c := p.src[p.i]; c {
	case '{', '[':
		if p.depth >= maxDepth {
			return nil, p.errorf(p.i, "DeepSpeed's Hjson reader is recursive and fails near 490 levels",
				"objects and arrays nest deeper than %d levels", maxDepth)
		}
		p.depth++
		p.open = append(p.open, p.i)
		var v *Value
		var err error
		if c == '{' {
			v, err = p.parseObject(true)
		} else {
			v, err = p.parseArray()
		}
		p.open = p.open[:len(p.open)-1]
		p.depth--
		return v, err
	case '"', '\'':
		start := p.i
		if bytes.HasPrefix(p.src[p.i:], []byte("'''")) {
			p.deviate(MultilineString, start)
			s, err := p.parseMultiline()
			if err != nil {
				return nil, err
			}
			return &Value{Kind: String, Pos: p.pos(start), Str: s}, nil
		}
		s, err := p.parseQuoted()
		if err != nil {
			return nil, err
		}
		return &Value{Kind: String, Pos: p.pos(start), Str: s}, nil
	}
	return p.parseQuoteless()
}

// parseObject reads an object whose '{' is at p.i, or with braced false the
// root object without braces, which runs to the end of the input.
// Following hjson-py's JSONObject, a comma after a member is optional and
// may also come before the closing '}'.
func (p *parser) parseObject(braced bool) (*Value, error) {
	open := p.i
	v := &Value{Kind: Object, Pos: p.pos(open)}
	if braced {
		p.i++
	}
	if err := p.skip(); err != nil {
		return nil, err
	}
	if braced && p.peekIs('}') {
		p.i++
		return v, nil
	}
	var seen map[string]int // key -> index in v.Members
	for {
		if p.i >= len(p.src) {
			return nil, p.unclosed(open)
		}
		keyOff := p.i
		keyPos := p.pos(keyOff)
		key, quoteless, err := p.parseKey()
		if err != nil {
			return nil, err
		}
		if err := p.skip(); err != nil {
			return nil, err
		}
		if !p.peekIs(':') {
			return nil, p.errorf(p.i, "write key: value", "expected ':' after key %q, found %s", key, p.describe(p.i))
		}
		if j, dup := seen[key]; dup {
			return nil, p.duplicate(key, keyPos, v.Members[j].KeyPos)
		}
		p.i++
		if err := p.skip(); err != nil {
			return nil, err
		}
		p.path = append(p.path, segment{key: key, index: -1})
		val, err := p.parseValue()
		p.path = p.path[:len(p.path)-1]
		if err != nil {
			return nil, err
		}
		if seen == nil {
			seen = make(map[string]int)
		}
		seen[key] = len(v.Members)
		v.Members = append(v.Members, Member{Key: key, KeyPos: keyPos, KeyQuoteless: quoteless, Value: val})
		if quoteless {
			p.deviate(UnquotedKey, keyOff)
		}
		end := p.i
		if err := p.skip(); err != nil {
			return nil, err
		}
		comma := -1
		if p.peekIs(',') {
			comma = p.i
			p.i++
			if err := p.skip(); err != nil {
				return nil, err
			}
		}
		last := braced && p.peekIs('}') || !braced && p.i >= len(p.src)
		switch {
		case last && comma >= 0:
			p.deviate(TrailingComma, comma)
		case !last && comma < 0:
			p.deviate(MissingComma, end)
		}
		if braced && p.peekIs('}') {
			p.i++
			return v, nil
		}
		if !braced && p.i >= len(p.src) {
			return v, nil
		}
	}
}

// parseArray reads an array whose '[' is at p.i. Commas are optional as in
// objects, and one may come before the closing ']'.
func (p *parser) parseArray() (*Value, error) {
	open := p.i
	v := &Value{Kind: Array, Pos: p.pos(open)}
	p.i++
	if err := p.skip(); err != nil {
		return nil, err
	}
	if p.peekIs(']') {
		p.i++
		return v, nil
	}
	for {
		if p.i >= len(p.src) {
			return nil, p.unclosed(open)
		}
		p.path = append(p.path, segment{index: len(v.Elems)})
		e, err := p.parseValue()
		p.path = p.path[:len(p.path)-1]
		if err != nil {
			return nil, err
		}
		v.Elems = append(v.Elems, e)
		end := p.i
		if err := p.skip(); err != nil {
			return nil, err
		}
		comma := -1
		if p.peekIs(',') {
			comma = p.i
			p.i++
			if err := p.skip(); err != nil {
				return nil, err
			}
		}
		switch last := p.peekIs(']'); {
		case last && comma >= 0:
			p.deviate(TrailingComma, comma)
		case !last && comma < 0 && p.i < len(p.src):
			p.deviate(MissingComma, end)
		}
		if p.peekIs(']') {
			p.i++
			return v, nil
		}
	}
}

// parseKey reads a key at p.i and leaves p.i at the ':' (or, for a quoted
// key, just past the closing quote). An unquoted key is, as in hjson-py's
// scanKeyName, everything up to the next ':'; it may not contain {}[], and
// may contain white space only just before the ':'.
func (p *parser) parseKey() (key string, quoteless bool, err error) {
	begin := p.i
	if c := p.src[begin]; c == '"' || c == '\'' {
		s, err := p.parseQuoted()
		return s, false, err
	}
	space := -1 // hjson-py: the end of the first run of white space
	for j := begin; ; j++ {
		if j >= len(p.src) {
			return "", false, p.errorf(j, "write key: value", "unexpected end of input after %s: expected ':'", excerpt(p.src[begin:j]))
		}
		switch c := p.src[j]; {
		case c == ':':
			if j == begin {
				return "", false, p.errorf(j, `an empty key must be quoted: "": value`, "found ':' where a key was expected")
			}
			if space >= 0 && space != j-1 {
				return "", false, p.errorf(begin, "an unquoted key cannot contain white space: quote the key, or remove the stray text",
					"%s is followed by white space and more text before ':'", excerpt(firstField(p.src[begin:j])))
			}
			key := string(p.src[begin:j])
			if space >= 0 {
				key = pyTrimRight(key)
			}
			p.i = j
			if !p.keepQuoteless {
				if err := p.checkBareKey(key, begin); err != nil {
					return "", false, err
				}
			}
			return key, true, nil
		case c == '{' || c == '}' || c == '[' || c == ']' || c == ',':
			if j == begin {
				return "", false, p.unexpectedInObject(j)
			}
			return "", false, p.errorf(j, "write key: value", "unexpected %s after %s: expected ':'", p.describe(j), excerpt(p.src[begin:j]))
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if space < 0 || space == j-1 {
				space = j
			}
		case c < 0x20:
			return "", false, p.errorf(j, "remove it", "control character %U in an unquoted key", rune(c))
		}
	}
}

// parseQuoted reads a "double" or 'single' quoted string at p.i. Inside, the
// other quote character needs no escape. Escapes are JSON's plus \'.
func (p *parser) parseQuoted() (string, error) {
	src := p.src
	start := p.i
	q := src[start]
	if q == '\'' {
		p.deviate(SingleQuotes, start)
	}
	var b []byte // nil until the first escape
	seg := start + 1
	for i := seg; ; {
		if i >= len(src) {
			return "", p.errorf(start, "", "unterminated string: end of input before the closing %c", q)
		}
		switch c := src[i]; {
		case c == q:
			p.i = i + 1
			if b == nil {
				return string(src[seg:i]), nil
			}
			return string(append(b, src[seg:i]...)), nil
		case c == '\\':
			b = append(b, src[seg:i]...)
			var n int
			var err error
			if b, n, err = p.escape(b, i, start); err != nil {
				return "", err
			}
			i += n
			seg = i
		case c == '\n' || c == '\r':
			return "", p.errorf(start, `a string cannot span lines: close the quote, or write a line break as \n`,
				"unterminated string: the line ends before the closing %c", q)
		case c < 0x20:
			hint := `escape it, e.g. \u0007`
			if c == '\t' {
				hint = `write a tab as \t`
			}
			return "", p.errorf(i, hint, "control character %U in a string", rune(c))
		default:
			i++
		}
	}
}

// escape decodes the escape sequence at src[i] == '\\', appends it to b and
// returns its length in bytes.
func (p *parser) escape(b []byte, i, start int) ([]byte, int, error) {
	if i+1 >= len(p.src) {
		return nil, 0, p.errorf(start, "", "unterminated string: end of input before the closing %c", p.src[start])
	}
	switch e := p.src[i+1]; e {
	case '\'':
		if p.src[start] == '"' {
			p.deviate(QuoteEscape, i)
		}
		return append(b, e), 2, nil
	case '"', '\\', '/':
		return append(b, e), 2, nil
	case 'b':
		return append(b, '\b'), 2, nil
	case 'f':
		return append(b, '\f'), 2, nil
	case 'n':
		return append(b, '\n'), 2, nil
	case 'r':
		return append(b, '\r'), 2, nil
	case 't':
		return append(b, '\t'), 2, nil
	case 'u':
		r, ok := hex4(p.src, i+2)
		if !ok {
			return nil, 0, p.errorf(i, "", `invalid \u escape: expected four hex digits after \u`)
		}
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if i+7 < len(p.src) && p.src[i+6] == '\\' && p.src[i+7] == 'u' {
				if r2, ok := hex4(p.src, i+8); ok && r2 >= 0xDC00 && r2 < 0xE000 {
					return utf8.AppendRune(b, 0x10000+(r-0xD800)<<10|(r2-0xDC00)), 12, nil
				}
			}
			fallthrough
		case r >= 0xDC00 && r < 0xE000:
			return nil, 0, p.errorf(i, "write the character itself, or a complete surrogate pair",
				`unpaired surrogate \u%04X in a string`, r)
		}
		return utf8.AppendRune(b, r), 6, nil
	}
	r, _ := utf8.DecodeRune(p.src[i+1:])
	shown := string(r)
	if r < 0x20 {
		shown = strconv.QuoteRune(r)
	}
	return nil, 0, p.errorf(i, `JSON's escapes are \" \\ \/ \b \f \n \r \t \uXXXX; write a backslash (say, in a Windows path) as \\`,
		`invalid escape \%s in a string`, shown)
}

func hex4(src []byte, i int) (rune, bool) {
	if i+4 > len(src) {
		return 0, false
	}
	var r rune
	for _, c := range src[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// parseMultiline reads a multiline string (three single quotes at each
// end) at p.i, following hjson-py's mlscanstring: no escapes; white space
// after the opening quotes is dropped, and so is the line break after it; on
// every following line up to as many spaces or tabs are dropped as there
// were characters before the opening quotes on their line; one final line
// break before the closing quotes is dropped. Line breaks are read as "\n"
// whatever the file uses.
func (p *parser) parseMultiline() (string, error) {
	src := p.src
	start := p.i
	indent, ok := p.mlIndent(start)
	if !ok {
		return "", p.errorf(start, `use a "quoted" string`,
			"''' string in an input without any line break: DeepSpeed's Hjson reader fails on it (IndexError)")
	}
	i := start + 3
	for i < len(src) && (src[i] == ' ' || src[i] == '\t') {
		i++
	}
	if n := p.lineBreak(i); n > 0 {
		i = p.skipIndent(i+n, indent)
	}
	var b []byte
	quotes := 0
	for {
		if i >= len(src) {
			return "", p.errorf(start, "close it with '''", "unterminated ''' string")
		}
		c := src[i]
		if c == '\'' {
			quotes++
			i++
			if quotes == 3 {
				if n := len(b); n > 0 && b[n-1] == '\n' {
					b = b[:n-1]
				}
				p.i = i
				return string(b), nil
			}
			continue
		}
		for ; quotes > 0; quotes-- {
			b = append(b, '\'')
		}
		if n := p.lineBreak(i); n > 0 {
			b = append(b, '\n')
			i = p.skipIndent(i+n, indent)
			continue
		}
		b = append(b, c)
		i++
	}
}

// mlIndent counts the characters before the opening quotes at q on their
// line. On the
// first line hjson-py's backwards search runs off the start of the string
// and, by Python's negative indexing, continues from the end of the input:
// it then also counts the characters after the last line break, and fails
// when there is no line break at all. That is reproduced here.
func (p *parser) mlIndent(q int) (int, bool) {
	j := q
	for j > 0 && p.src[j-1] != '\n' && p.src[j-1] != '\r' {
		j--
	}
	n := utf8.RuneCount(p.src[j:q])
	if j > 0 {
		return n, true
	}
	last := bytes.LastIndexAny(p.src, "\r\n")
	if last < 0 {
		return 0, false
	}
	return n + utf8.RuneCount(p.src[last+1:]), true
}

// lineBreak returns the length of the line break at i: 2 for "\r\n", 1 for
// "\n" or "\r", 0 for anything else.
func (p *parser) lineBreak(i int) int {
	switch {
	case i >= len(p.src):
		return 0
	case p.src[i] == '\n':
		return 1
	case p.src[i] == '\r':
		if i+1 < len(p.src) && p.src[i+1] == '\n' {
			return 2
		}
		return 1
	}
	return 0
}

func (p *parser) skipIndent(i, n int) int {
	for ; n > 0 && i < len(p.src) && (p.src[i] == ' ' || p.src[i] == '\t'); n-- {
		i++
	}
	return i
}

// parseQuoteless reads a value that starts with neither a quote nor a
// bracket, following hjson-py's scantfnns. The text runs to the end of the
// line; at each ',', '}', ']', '#', '//', '/*' and at the line end, if the
// text so far is exactly null, true, false or a JSON number (white space
// around it allowed), that is the value. Otherwise the whole rest of the
// line, trimmed, is a string: Parse rejects it, ParseHjson keeps it.
func (p *parser) parseQuoteless() (*Value, error) {
	src := p.src
	begin := p.i
	if c := src[begin]; c == '}' || c == ']' || c == ',' || c == ':' {
		return nil, p.missingValue(begin)
	}
	// The text from begin is a literal if the scan stops at an offset in
	// [lo, hi]: after the word and any white space (Python's str.strip), or
	// exactly after the number and any spaces and tabs (hjson-py's NUMBER_RE).
	lo, hi, numEnd := -1, -1, -1
	lit := &Value{Pos: p.pos(begin)}
	for _, w := range [...]struct {
		word string
		kind Kind
		val  bool
	}{{"null", Null, false}, {"true", Bool, true}, {"false", Bool, false}} {
		if bytes.HasPrefix(src[begin:], []byte(w.word)) {
			lo = begin + len(w.word)
			hi = lo + pyWhiteSpaceLen(src[lo:])
			lit.Kind, lit.Bool = w.kind, w.val
		}
	}
	pyNum := -1 // where a number with non-ASCII digits would end for hjson-py
	if c := src[begin]; c == '-' || c >= '0' && c <= '9' {
		if end, ok := matchNumber(src, begin); ok {
			numEnd, lo = end, spacesTabs(src, end)
			hi = lo
			lit.Kind = Number
		}
		if end, ok := scanNumber(src, begin, true); ok && end > numEnd {
			pyNum = spacesTabs(src, end)
		}
	}
	for end := begin; ; end++ {
		eol := end >= len(src) || src[end] == '\n' || src[end] == '\r'
		if !eol {
			c := src[end]
			stop := c == ',' || c == '}' || c == ']' || c == '#' ||
				c == '/' && end+1 < len(src) && (src[end+1] == '/' || src[end+1] == '*')
			if !stop {
				continue
			}
		}
		if end == pyNum {
			return nil, p.errorf(begin, "write the number with the digits 0-9",
				"number %s%s has non-ASCII digits (DeepSpeed's Hjson reader would accept them)", excerpt(src[begin:end]), p.forPath())
		}
		if lo >= 0 && end >= lo && end <= hi {
			p.i = end
			if len(bytes.Trim(src[lo:end], " \t")) > 0 {
				p.deviate(OddWhiteSpace, lo)
			}
			if lit.Kind == Number {
				lit.Num = string(src[begin:numEnd])
				if _, err := strconv.ParseFloat(lit.Num, 64); err != nil {
					return nil, p.outOfRange(begin, lit.Num)
				}
			}
			return lit, nil
		}
		if eol {
			p.i = end
			raw := pyTrim(string(src[begin:end]))
			if p.keepQuoteless {
				p.deviate(UnquotedString, begin)
				return &Value{Kind: String, Pos: lit.Pos, Str: raw, Quoteless: true}, nil
			}
			return nil, p.bareValue(begin, raw)
		}
	}
}

// matchNumber matches JSON's number grammar, which is also hjson-py's
// NUMBER_RE without its surrounding spaces:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)? with ASCII digits only.
// It returns the end of the match.
func matchNumber(b []byte, i int) (int, bool) { return scanNumber(b, i, false) }

// scanNumber is matchNumber; with unicodeDigits it is NUMBER_RE as Python
// runs it, where \d after the first digit also matches any Unicode decimal
// digit (and int() and float() then read them).
func scanNumber(b []byte, i int, unicodeDigits bool) (int, bool) {
	digits := func(j int) int {
		for j < len(b) {
			if c := b[j]; c >= '0' && c <= '9' {
				j++
				continue
			}
			if !unicodeDigits || b[j] < utf8.RuneSelf {
				break
			}
			r, n := utf8.DecodeRune(b[j:])
			if !unicode.IsDigit(r) {
				break
			}
			j += n
		}
		return j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(i + 1)
	default:
		return 0, false
	}
	if i+1 < len(b) && b[i] == '.' {
		if j := digits(i + 1); j > i+1 {
			i = j
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		j := i + 1
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if k := digits(j); k > j {
			i = k
		}
	}
	return i, true
}

func spacesTabs(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return i
}

// pos returns the position of byte offset off. Offsets asked for mostly
// increase, so it continues from the last answer.
func (p *parser) pos(off int) Pos {
	if off > len(p.src) {
		off = len(p.src)
	}
	if off < p.bom {
		return Pos{Offset: off, Line: 1, Col: 1}
	}
	at := p.at
	if off < at.Offset {
		at = Pos{Offset: p.bom, Line: 1, Col: 1}
	}
	for at.Offset < off {
		c := p.src[at.Offset]
		switch {
		case c == '\n':
			at.Line, at.Col = at.Line+1, 1
			at.Offset++
		case c == '\r':
			at.Offset++
			if at.Offset >= len(p.src) || p.src[at.Offset] != '\n' {
				at.Line, at.Col = at.Line+1, 1
			}
		case c < utf8.RuneSelf:
			at.Col++
			at.Offset++
		default:
			_, n := utf8.DecodeRune(p.src[at.Offset:])
			at.Col++
			at.Offset += n
		}
	}
	p.at = at
	at.Offset = off
	return at
}

// invalidUTF8 returns the offset of the first byte that is not valid UTF-8,
// or -1.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}
