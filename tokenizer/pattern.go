package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// A matcher finds the non-overlapping matches of a pattern in a string, left
// to right, as byte spans. It is what Split, Replace and ByteLevel use; the
// Rust tokenizers compile these patterns with Oniguruma.
type matcher interface {
	findAll(s string, dst []span) []span
}

type span struct{ start, end int }

// The three split regexes that ship with nearly every byte-level BPE
// tokenizer. They are matched by hand-written scanners (tilingMatcher), which
// are exact for Oniguruma's semantics and several times faster than a
// backtracking engine.
const (
	// patGPT2 is the ByteLevel pre-tokenizer's built-in regex (GPT-2, RoBERTa).
	patGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// patCL100K is tiktoken's cl100k_base regex, used by Llama-3.
	patCL100K = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patQwen2 is cl100k with single digits, used by Qwen2, Qwen2.5 and Qwen3.
	patQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// compileRegex returns a matcher for an Oniguruma pattern from tokenizer.json:
// a hand-written scanner for the known patterns, else regexp2 (a .NET-style
// backtracking engine whose \s, \p{L}, \p{N} and lookarounds agree with
// Oniguruma's for these patterns). forceGeneric skips the scanners; tests use
// it to check the two paths against each other.
func compileRegex(pattern string, forceGeneric bool) (matcher, error) {
	if !forceGeneric {
		switch pattern {
		case patGPT2:
			return tilingMatcher{next: nextGPT2}, nil
		case patCL100K:
			return tilingMatcher{next: func(s string, i int) int { return nextCL100K(s, i, 3) }}, nil
		case patQwen2:
			return tilingMatcher{next: func(s string, i int) int { return nextCL100K(s, i, 1) }}, nil
		}
	}
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", pattern, err)
	}
	return regexMatcher{re}, nil
}

// literalMatcher matches a plain string (a {"String": ...} pattern).
type literalMatcher string

func (m literalMatcher) findAll(s string, dst []span) []span {
	if m == "" {
		return dst
	}
	for off := 0; ; {
		k := strings.Index(s[off:], string(m))
		if k < 0 {
			return dst
		}
		dst = append(dst, span{off + k, off + k + len(m)})
		off += k + len(m)
	}
}

// regexMatcher is the general fallback.
type regexMatcher struct{ re *regexp2.Regexp }

func (m regexMatcher) findAll(s string, dst []span) []span {
	// regexp2 reports positions in runes; convert them to bytes.
	runes := []rune(s)
	byteAt := make([]int, len(runes)+1)
	b := 0
	for i, r := range runes {
		byteAt[i] = b
		b += utf8.RuneLen(r)
		if r == utf8.RuneError {
			// An invalid byte decodes to U+FFFD but occupies one byte.
			b = byteAt[i] + runeWidthAt(s, byteAt[i])
		}
	}
	byteAt[len(runes)] = len(s)
	match, err := m.re.FindRunesMatch(runes)
	for err == nil && match != nil {
		dst = append(dst, span{byteAt[match.Index], byteAt[match.Index+match.Length]})
		match, err = m.re.FindNextMatch(match)
	}
	return dst
}

func runeWidthAt(s string, i int) int {
	_, n := utf8.DecodeRuneInString(s[i:])
	return n
}

// tilingMatcher is a scanner for a pattern that matches at every position
// (each of the known patterns ends in alternatives that together cover every
// character), so its matches tile the string. next returns the end of the
// match that starts at i.
type tilingMatcher struct {
	next func(s string, i int) int
}

func (m tilingMatcher) findAll(s string, dst []span) []span {
	for i := 0; i < len(s); {
		j := m.next(s, i)
		dst = append(dst, span{i, j})
		i = j
	}
	return dst
}

// Character classes of the known patterns, as Oniguruma defines them:
// \p{L} is general category L, \p{N} is N (Nd, Nl, No), and \s is the
// White_Space property (so U+0085 is a space and U+FEFF is not).
type charClass uint8

const (
	clsOther charClass = iota
	clsLetter
	clsNumber
	clsSpace
)

var asciiClass = func() (t [128]charClass) {
	for c := 0; c < 128; c++ {
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			t[c] = clsLetter
		case c >= '0' && c <= '9':
			t[c] = clsNumber
		case c == ' ' || c >= '\t' && c <= '\r':
			t[c] = clsSpace
		}
	}
	return t
}()

func classOf(r rune) charClass {
	if r < 128 {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.Is(unicode.White_Space, r):
		return clsSpace
	}
	return clsOther
}

// at decodes the character at byte i. An invalid byte is one character of
// class other (it decodes to U+FFFD, a symbol).
func at(s string, i int) (charClass, rune, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], rune(c), 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return classOf(r), r, n
}

// scan returns the end of the run of class c that starts at i.
func scan(s string, i int, c charClass) int {
	for i < len(s) {
		ci, _, n := at(s, i)
		if ci != c {
			break
		}
		i += n
	}
	return i
}

func classAt(s string, i int) charClass {
	if i >= len(s) {
		return charClass(255)
	}
	c, _, _ := at(s, i)
	return c
}

// contraction returns the length of the contraction suffix ('s 't 're 've 'm
// 'll 'd without the apostrophe) that starts at i, or 0. Case-insensitive
// matching follows Unicode case folding, under which 'ſ' (U+017F) is an 's'.
func contraction(s string, i int, foldCase bool) int {
	if i >= len(s) {
		return 0
	}
	lower := func(j int) (byte, int) {
		if j >= len(s) {
			return 0, 0
		}
		c := s[j]
		if foldCase {
			if c >= 'A' && c <= 'Z' {
				return c + 'a' - 'A', 1
			}
			if c == 0xC5 && j+1 < len(s) && s[j+1] == 0xBF { // U+017F
				return 's', 2
			}
		}
		return c, 1
	}
	c, n := lower(i)
	switch c {
	case 's', 't', 'm', 'd':
		return n
	case 'r', 'v':
		if c2, n2 := lower(i + n); c2 == 'e' {
			return n + n2
		}
	case 'l':
		if c2, n2 := lower(i + n); c2 == 'l' {
			return n + n2
		}
	}
	return 0
}

// spaceEnd handles the trailing alternatives \s+(?!\S)|\s+ for a whitespace
// run [i, e): the run minus its last character when a non-space follows and
// the run has more than one character, else the whole run.
func spaceEnd(s string, i, e int) int {
	if e == len(s) {
		return e
	}
	_, last := utf8.DecodeLastRuneInString(s[i:e])
	if e-last > i {
		return e - last
	}
	return e
}

// nextGPT2 matches patGPT2 at i.
func nextGPT2(s string, i int) int {
	c, r, _ := at(s, i)
	if r == '\'' {
		if k := contraction(s, i+1, false); k > 0 {
			return i + 1 + k
		}
	}
	// ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+' in that order: an optional
	// leading space, then a run of one class.
	j := i
	if r == ' ' {
		if c2 := classAt(s, i+1); c2 != clsSpace && i+1 < len(s) {
			j, c = i+1, c2
		}
	}
	if c != clsSpace {
		return scan(s, j, c)
	}
	return spaceEnd(s, i, scan(s, i, clsSpace))
}

// nextCL100K matches patCL100K (maxDigits 3) or patQwen2 (maxDigits 1) at i.
func nextCL100K(s string, i int, maxDigits int) int {
	c, r, n := at(s, i)
	if r == '\'' {
		if k := contraction(s, i+1, true); k > 0 {
			return i + 1 + k
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsLetter {
		return scan(s, i+n, clsLetter)
	}
	if r != '\r' && r != '\n' && c != clsNumber && classAt(s, i+n) == clsLetter {
		return scan(s, i+n, clsLetter)
	}
	// \p{N}{1,maxDigits}
	if c == clsNumber {
		j := i + n
		for k := 1; k < maxDigits && j < len(s); k++ {
			cj, _, nj := at(s, j)
			if cj != clsNumber {
				break
			}
			j += nj
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := -1
	if c == clsOther {
		j = i
	} else if r == ' ' && classAt(s, i+1) == clsOther {
		j = i + 1
	}
	if j >= 0 {
		j = scan(s, j, clsOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// c is whitespace. \s*[\r\n]+ : through the run's last line break.
	e := scan(s, i, clsSpace)
	for k := e - 1; k >= i; k-- {
		if s[k] == '\r' || s[k] == '\n' {
			return k + 1
		}
	}
	return spaceEnd(s, i, e)
}
