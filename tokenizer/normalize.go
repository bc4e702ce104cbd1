package tokenizer

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// A normalizer rewrites the text of one section (the text between added
// tokens) before it is split into words.
type normalizer interface {
	normalize(s string) string
}

// unicodeNorm is NFC, NFD, NFKC or NFKD.
type unicodeNorm struct{ form norm.Form }

func (u unicodeNorm) normalize(s string) string {
	if u.form.IsNormalString(s) {
		return s
	}
	return u.form.String(s)
}

// prependNorm puts a string (for SentencePiece vocabularies, "▁") in front of
// every non-empty section.
type prependNorm struct{ prefix string }

func (p prependNorm) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.prefix + s
}

// replaceNorm replaces every match of a pattern (for SentencePiece
// vocabularies, " " → "▁").
type replaceNorm struct {
	pattern matcher
	content string
}

func (r replaceNorm) normalize(s string) string {
	return replaceAll(s, r.pattern, r.content)
}

func replaceAll(s string, m matcher, content string) string {
	if lit, ok := m.(literalMatcher); ok {
		if lit == "" {
			return s
		}
		return strings.ReplaceAll(s, string(lit), content)
	}
	spans := m.findAll(s, nil)
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	prev := 0
	for _, sp := range spans {
		b.WriteString(s[prev:sp.start])
		b.WriteString(content)
		prev = sp.end
	}
	b.WriteString(s[prev:])
	return b.String()
}

// sequenceNorm applies normalizers in order.
type sequenceNorm []normalizer

func (q sequenceNorm) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}
