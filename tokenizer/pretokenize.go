package tokenizer

import (
	"strings"
)

// A piece is one word on its way to the model. first reports that the piece
// begins at offset 0 of the input text (Metaspace's prepend_scheme "first"
// asks for that).
type piece struct {
	s     string
	first bool
}

// A preTokenizer splits pieces into smaller pieces and may rewrite them. BPE
// merges never cross a piece boundary.
type preTokenizer interface {
	preTokenize(in []piece, scratch *[]span) []piece
}

// splitBehavior says what happens to the pattern's matches (the delimiters)
// when a piece is split: the five SplitDelimiterBehavior values.
type splitBehavior uint8

const (
	behRemoved            splitBehavior = iota // drop delimiters
	behIsolated                                // delimiters are pieces of their own
	behMergedWithPrevious                      // a delimiter joins the piece before it
	behMergedWithNext                          // a delimiter joins the piece after it
	behContiguous                              // consecutive delimiters form one piece
)

var splitBehaviors = map[string]splitBehavior{
	"Removed": behRemoved, "Isolated": behIsolated, "MergedWithPrevious": behMergedWithPrevious,
	"MergedWithNext": behMergedWithNext, "Contiguous": behContiguous,
}

type flagged struct {
	span
	match bool
}

// splitPiece appends to out the pieces of p cut by the matches of m. With
// invert, the pattern describes the pieces and the gaps are the delimiters.
// Empty pieces are dropped.
func splitPiece(out []piece, p piece, m matcher, beh splitBehavior, invert bool, scratch *[]span) []piece {
	s := p.s
	// Fast path: a tiling matcher with Isolated delimiters yields its matches.
	if tm, ok := m.(tilingMatcher); ok && beh == behIsolated {
		for i := 0; i < len(s); {
			j := tm.next(s, i)
			out = append(out, piece{s[i:j], p.first && i == 0})
			i = j
		}
		return out
	}
	// Cover the string with (span, isMatch), as Rust's Pattern::find_matches.
	matches := m.findAll(s, (*scratch)[:0])
	*scratch = matches
	parts := make([]flagged, 0, 2*len(matches)+1)
	prev := 0
	for _, sp := range matches {
		if prev != sp.start {
			parts = append(parts, flagged{span{prev, sp.start}, false})
		}
		parts = append(parts, flagged{sp, true})
		prev = sp.end
	}
	if prev != len(s) || len(parts) == 0 {
		parts = append(parts, flagged{span{prev, len(s)}, false})
	}
	if invert {
		for i := range parts {
			parts[i].match = !parts[i].match
		}
	}
	// Fold the delimiters into pieces per the behaviour; keep marks "remove".
	type cut struct {
		span
		remove bool
	}
	cuts := make([]cut, 0, len(parts))
	switch beh {
	case behIsolated:
		for _, f := range parts {
			cuts = append(cuts, cut{f.span, false})
		}
	case behRemoved:
		for _, f := range parts {
			cuts = append(cuts, cut{f.span, f.match})
		}
	case behContiguous:
		prevMatch := false
		for _, f := range parts {
			if f.match == prevMatch && len(cuts) > 0 {
				cuts[len(cuts)-1].end = f.end
			} else {
				cuts = append(cuts, cut{f.span, false})
			}
			prevMatch = f.match
		}
	case behMergedWithPrevious:
		prevMatch := false
		for _, f := range parts {
			if f.match && !prevMatch && len(cuts) > 0 {
				cuts[len(cuts)-1].end = f.end
			} else {
				cuts = append(cuts, cut{f.span, false})
			}
			prevMatch = f.match
		}
	case behMergedWithNext:
		prevMatch := false
		for i := len(parts) - 1; i >= 0; i-- {
			f := parts[i]
			if f.match && !prevMatch && len(cuts) > 0 {
				cuts[len(cuts)-1].start = f.start
			} else {
				cuts = append(cuts, cut{f.span, false})
			}
			prevMatch = f.match
		}
		for i, j := 0, len(cuts)-1; i < j; i, j = i+1, j-1 {
			cuts[i], cuts[j] = cuts[j], cuts[i]
		}
	}
	for _, c := range cuts {
		if !c.remove && c.end > c.start {
			out = append(out, piece{s[c.start:c.end], p.first && c.start == 0})
		}
	}
	return out
}

// splitPre is the Split pre-tokenizer.
type splitPre struct {
	pattern  matcher
	behavior splitBehavior
	invert   bool
}

func (sp splitPre) preTokenize(in []piece, scratch *[]span) []piece {
	out := make([]piece, 0, len(in)*4)
	for _, p := range in {
		out = splitPiece(out, p, sp.pattern, sp.behavior, sp.invert, scratch)
	}
	return out
}

// byteLevelPre is the ByteLevel pre-tokenizer: optionally a leading space,
// optionally the GPT-2 regex split, then every byte replaced by its
// byte-level rune.
type byteLevelPre struct {
	addPrefixSpace bool
	regex          matcher // nil when use_regex is false
	table          *byteLevel
}

func (b byteLevelPre) preTokenize(in []piece, scratch *[]span) []piece {
	split, out := in, make([]piece, len(in))
	if b.addPrefixSpace || b.regex != nil {
		split = make([]piece, 0, len(in)*4)
		for _, p := range in {
			if b.addPrefixSpace && !strings.HasPrefix(p.s, " ") {
				p.s = " " + p.s
			}
			if b.regex == nil {
				split = append(split, p)
				continue
			}
			split = splitPiece(split, p, b.regex, behIsolated, false, scratch)
		}
		out = split // a fresh slice: rewrite it in place
	}
	var buf []byte
	for i, p := range split {
		buf = b.table.encode(buf[:0], p.s)
		out[i] = piece{string(buf), p.first}
	}
	return out
}

// metaspacePre is SentencePiece's word marker: spaces become the replacement
// ("▁"), one is prepended per the prepend scheme, and with split each "▁"
// starts a new piece.
type metaspacePre struct {
	replacement string
	prepend     prependScheme
	split       bool
}

type prependScheme uint8

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

func (m metaspacePre) preTokenize(in []piece, scratch *[]span) []piece {
	out := make([]piece, 0, len(in)*4)
	for _, p := range in {
		s := strings.ReplaceAll(p.s, " ", m.replacement)
		if !strings.HasPrefix(s, m.replacement) &&
			(m.prepend == prependAlways || m.prepend == prependFirst && p.first) {
			s = m.replacement + s
		}
		q := piece{s, p.first}
		if !m.split {
			out = append(out, q)
			continue
		}
		out = splitPiece(out, q, literalMatcher(m.replacement), behMergedWithNext, false, scratch)
	}
	return out
}

// sequencePre applies pre-tokenizers in order.
type sequencePre []preTokenizer

func (q sequencePre) preTokenize(in []piece, scratch *[]span) []piece {
	for _, p := range q {
		in = p.preTokenize(in, scratch)
	}
	return in
}
