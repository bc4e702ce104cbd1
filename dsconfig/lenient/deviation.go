package lenient

import "fmt"

// DeviationKind names a piece of Hjson syntax that JSON does not allow.
type DeviationKind int

const (
	ByteOrderMark     DeviationKind = iota // a UTF-8 byte order mark before the text
	Comment                                // #, // or /* */
	TrailingComma                          // a comma before a closing '}' or ']'
	MissingComma                           // no comma between two members or two elements
	UnquotedKey                            // stage: 3
	SingleQuotes                           // 'a string'
	MultilineString                        // a string between triple single quotes
	QuoteEscape                            // \' inside a "double-quoted" string
	RootWithoutBraces                      // the top-level object's braces omitted
	UnquotedString                         // an unquoted string value (ParseHjson only)
	OddWhiteSpace                          // white space JSON does not allow (U+00A0, \v, ...) after true, false or null
)

var deviationNames = [...]string{
	ByteOrderMark:     "a byte order mark",
	Comment:           "a comment",
	TrailingComma:     "a trailing comma",
	MissingComma:      "a missing comma",
	UnquotedKey:       "an unquoted key",
	SingleQuotes:      "a single-quoted string",
	MultilineString:   "a ''' string",
	QuoteEscape:       `the escape \'`,
	RootWithoutBraces: "a top-level object without braces",
	UnquotedString:    "an unquoted string",
	OddWhiteSpace:     "white space that JSON does not allow",
}

func (k DeviationKind) String() string {
	if k < 0 || int(k) >= len(deviationNames) {
		return fmt.Sprintf("DeviationKind(%d)", int(k))
	}
	return deviationNames[k]
}

// A Deviation is one place where a config uses Hjson syntax outside JSON:
// DeepSpeed's reader accepts it, Python's json.load rejects the file. Pos is
// where the construct starts; for a MissingComma it is just after the value
// the comma should follow.
type Deviation struct {
	Kind DeviationKind
	Pos  Pos
}
