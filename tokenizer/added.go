package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// AddedToken is an entry of tokenizer.json's "added_tokens": a string that is
// cut out of the text whole, before any normalization or BPE, and maps to one
// id. Special tokens (<|im_start|>, <s>) are added tokens with Special set.
type AddedToken struct {
	ID      int    `json:"id"`
	Content string `json:"content"`
	// SingleWord: match only where the token is not inside a word.
	SingleWord bool `json:"single_word"`
	// LStrip / RStrip: the match swallows the whitespace on its left / right.
	LStrip bool `json:"lstrip"`
	RStrip bool `json:"rstrip"`
	// Normalized: the token is matched in the normalized text (its content
	// normalized too) rather than in the raw text.
	Normalized bool `json:"normalized"`
	Special    bool `json:"special"`
}

// A section is a run of text between added tokens, or one added token
// (id >= 0). start is its byte offset in the string that was split.
type section struct {
	s     string
	id    int
	start int
}

// addedMatcher finds added tokens by leftmost-longest matching, like the
// Aho-Corasick automaton of the Rust tokenizers: the match that starts
// first wins, and among those the longest.
type addedMatcher struct {
	tokens []AddedToken
	// A byte trie: nodes[0] is the root; tok is an index into tokens or -1.
	nodes []trieNode
	first [256]bool // bytes that start some token
}

type trieNode struct {
	next map[byte]int32
	tok  int32
}

func newAddedMatcher(tokens []AddedToken, content func(AddedToken) string) *addedMatcher {
	m := &addedMatcher{tokens: tokens, nodes: []trieNode{{tok: -1}}}
	for i, t := range tokens {
		c := content(t)
		if c == "" {
			continue
		}
		m.first[c[0]] = true
		n := int32(0)
		for k := 0; k < len(c); k++ {
			nx, ok := m.nodes[n].next[c[k]]
			if !ok {
				if m.nodes[n].next == nil {
					m.nodes[n].next = map[byte]int32{}
				}
				nx = int32(len(m.nodes))
				m.nodes = append(m.nodes, trieNode{tok: -1})
				m.nodes[n].next[c[k]] = nx
			}
			n = nx
		}
		m.nodes[n].tok = int32(i)
	}
	return m
}

func (m *addedMatcher) empty() bool { return len(m.nodes) == 1 }

// find returns the leftmost-longest match at or after from.
func (m *addedMatcher) find(s string, from int) (start, end, tok int) {
	for i := from; i < len(s); i++ {
		if !m.first[s[i]] {
			continue
		}
		n, best, bestEnd := int32(0), int32(-1), 0
		for j := i; j < len(s); j++ {
			nx, ok := m.nodes[n].next[s[j]]
			if !ok {
				break
			}
			n = nx
			if m.nodes[n].tok >= 0 {
				best, bestEnd = m.nodes[n].tok, j+1
			}
		}
		if best >= 0 {
			return i, bestEnd, int(best)
		}
	}
	return -1, -1, -1
}

// split appends the sections of s to dst, applying the single_word, lstrip
// and rstrip rules as Rust's AddedVocabulary::find_matches does.
func (m *addedMatcher) split(dst []section, s string, base int) []section {
	if m.empty() {
		return append(dst, section{s, -1, base})
	}
	offset := 0 // end of the previous section
	for from := 0; from < len(s); {
		start, stop, k := m.find(s, from)
		if k < 0 {
			break
		}
		from = stop
		t := m.tokens[k]
		if t.SingleWord {
			startOK := start == 0 || !endsWithWordChar(s[:start])
			stopOK := stop == len(s) || !startsWithWordChar(s[stop:])
			if !startOK || !stopOK {
				continue
			}
		}
		if t.LStrip {
			start = max(trailingSpaceStart(s[:start]), offset)
		}
		if t.RStrip {
			stop += leadingSpaceLen(s[stop:])
		}
		start = max(start, offset)
		if offset < start {
			dst = append(dst, section{s[offset:start], -1, base + offset})
		}
		dst = append(dst, section{s[start:stop], t.ID, base + start})
		offset = stop
	}
	if offset < len(s) {
		dst = append(dst, section{s[offset:], -1, base + offset})
	}
	return dst
}

// isWordChar is the regex crate's \w: Alphabetic, marks, decimal digits,
// connector punctuation and joiners.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) ||
		unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Pc, r) ||
		unicode.Is(unicode.Other_Alphabetic, r) || unicode.Is(unicode.Join_Control, r)
}

func endsWithWordChar(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordChar(r)
}

// isSpace is the regex crate's \s (the White_Space property).
func isSpace(r rune) bool { return unicode.Is(unicode.White_Space, r) }

func trailingSpaceStart(s string) int {
	for len(s) > 0 {
		r, n := utf8.DecodeLastRuneInString(s)
		if !isSpace(r) {
			break
		}
		s = s[:len(s)-n]
	}
	return len(s)
}

func leadingSpaceLen(s string) int {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isSpace(r) {
			break
		}
		i += n
	}
	return i
}
