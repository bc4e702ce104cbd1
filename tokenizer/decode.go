package tokenizer

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// A postProcessor adds the special tokens of a template around the ids of one
// sequence (TemplateProcessing), or does nothing to ids (ByteLevel, whose job
// in Rust is only to trim offsets).
type postProcessor interface {
	process(ids []int, addSpecial bool) []int
}

// templatePost is TemplateProcessing's "single" template: a list of items,
// each the sequence itself or a special token's ids.
type templatePost struct {
	items []templateItem
}

type templateItem struct {
	sequence bool  // the input's ids go here
	ids      []int // else, a special token's ids
}

func (t templatePost) process(ids []int, addSpecial bool) []int {
	if !addSpecial {
		return ids
	}
	n := len(ids)
	for _, it := range t.items {
		n += len(it.ids)
	}
	out := make([]int, 0, n)
	for _, it := range t.items {
		if it.sequence {
			out = append(out, ids...)
		} else {
			out = append(out, it.ids...)
		}
	}
	return out
}

type nopPost struct{}

func (nopPost) process(ids []int, _ bool) []int { return ids }

type sequencePost []postProcessor

func (q sequencePost) process(ids []int, addSpecial bool) []int {
	for _, p := range q {
		ids = p.process(ids, addSpecial)
	}
	return ids
}

// A decoder turns the token strings of a sequence of ids back into text. As
// in Rust, decoders form a chain: each maps a list of strings to a list of
// strings, and the final list is concatenated.
type decoder interface {
	decodeChain(tokens []string) []string
}

// byteLevelDec maps byte-level runes back to bytes and decodes the bytes as
// UTF-8, with U+FFFD for invalid sequences.
type byteLevelDec struct{ table *byteLevel }

func (d byteLevelDec) decodeChain(tokens []string) []string {
	var buf []byte
	for _, t := range tokens {
		buf = d.table.decodeToken(buf, t)
	}
	return []string{lossyUTF8(buf)}
}

// replaceDec replaces a pattern in every token ("▁" → " ").
type replaceDec struct {
	pattern matcher
	content string
}

func (d replaceDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		out[i] = replaceAll(t, d.pattern, d.content)
	}
	return out
}

// byteFallbackDec turns runs of "<0xXX>" tokens back into text; a run that is
// not valid UTF-8 becomes one U+FFFD per byte, as in Rust.
type byteFallbackDec struct{}

func (byteFallbackDec) decodeChain(tokens []string) []string {
	out := make([]string, 0, len(tokens))
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, t := range tokens {
		if len(t) == 6 && strings.HasPrefix(t, "<0x") && t[5] == '>' {
			if b, err := strconv.ParseUint(t[3:5], 16, 8); err == nil {
				run = append(run, byte(b))
				continue
			}
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// fuseDec joins all tokens into one string.
type fuseDec struct{}

func (fuseDec) decodeChain(tokens []string) []string {
	return []string{strings.Join(tokens, "")}
}

// stripDec removes up to start leading and stop trailing copies of content
// (a single character) from every token.
type stripDec struct {
	content     rune
	start, stop int
}

func (d stripDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		r := []rune(t)
		lo, hi := 0, len(r)
		for k := 0; k < d.start && lo < hi && r[lo] == d.content; k++ {
			lo++
		}
		for k := 0; k < d.stop && hi > lo && r[hi-1] == d.content; k++ {
			hi--
		}
		out[i] = string(r[lo:hi])
	}
	return out
}

// metaspaceDec turns "▁" back into spaces; in the first token, where the
// pre-tokenizer prepended one, they are dropped.
type metaspaceDec struct {
	replacement rune
	prepend     prependScheme
}

func (d metaspaceDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		var b strings.Builder
		for _, r := range t {
			switch {
			case r != d.replacement:
				b.WriteRune(r)
			case i == 0 && d.prepend != prependNever:
			default:
				b.WriteByte(' ')
			}
		}
		out[i] = b.String()
	}
	return out
}

type sequenceDec []decoder

func (q sequenceDec) decodeChain(tokens []string) []string {
	for _, d := range q {
		tokens = d.decodeChain(tokens)
	}
	return tokens
}
