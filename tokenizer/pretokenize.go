package tokenizer

import (
	"strings"
)

// A piece is one word on its way to the model. first reports that the piece
// begins at offset 0 of the input text (Metaspace's prepend_scheme "first"
// asks for that). byteLevel reports that the model is to see the byte-level
// image of s rather than s; the ByteLevel pre-tokenizer sets it instead of
// building the image, which Tokenizer.Encode writes into a reused buffer.
type piece struct {
	s         string
	first     bool
	byteLevel bool
}

// A preTokenizer splits a piece into smaller pieces, which it may rewrite,
// and passes them to emit in order. BPE merges never cross a piece boundary.
// Pieces stream through the stages one at a time: a section of text can hold
// hundreds of thousands of words.
type preTokenizer interface {
	preTokenize(p piece, emit func(piece))
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

// splitPiece emits the pieces of p cut by the matches of m. With invert, the
// pattern describes the pieces and the gaps are the delimiters. Empty pieces
// are dropped.
func splitPiece(p piece, m matcher, beh splitBehavior, invert bool, emit func(piece)) {
	s := p.s
	// Fast path: a tiling matcher with Isolated delimiters yields its matches.
	if tm, ok := m.(tilingMatcher); ok && beh == behIsolated {
		for i := 0; i < len(s); {
			j := tm.next(s, i)
			emit(piece{s: s[i:j], first: p.first && i == 0, byteLevel: p.byteLevel})
			i = j
		}
		return
	}
	// Cover the string with (span, isMatch), as Rust's Pattern::find_matches.
	matches := m.findAll(s, nil)
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
			emit(piece{s: s[c.start:c.end], first: p.first && c.start == 0, byteLevel: p.byteLevel})
		}
	}
}

// splitPre is the Split pre-tokenizer.
type splitPre struct {
	pattern  matcher
	behavior splitBehavior
	invert   bool
}

func (sp splitPre) preTokenize(p piece, emit func(piece)) {
	splitPiece(p, sp.pattern, sp.behavior, sp.invert, emit)
}

// byteLevelPre is the ByteLevel pre-tokenizer: optionally a leading space,
// optionally the GPT-2 regex split, then every byte replaced by its
// byte-level rune (marked on the piece, done by Encode).
type byteLevelPre struct {
	addPrefixSpace bool
	regex          matcher // nil when use_regex is false
}

func (b byteLevelPre) preTokenize(p piece, emit func(piece)) {
	if b.addPrefixSpace && !strings.HasPrefix(p.s, " ") {
		p.s = " " + p.s
	}
	p.byteLevel = true
	if b.regex == nil {
		emit(p)
		return
	}
	splitPiece(p, b.regex, behIsolated, false, emit)
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

func (m metaspacePre) preTokenize(p piece, emit func(piece)) {
	s := strings.ReplaceAll(p.s, " ", m.replacement)
	if !strings.HasPrefix(s, m.replacement) &&
		(m.prepend == prependAlways || m.prepend == prependFirst && p.first) {
		s = m.replacement + s
	}
	q := piece{s: s, first: p.first}
	if !m.split {
		emit(q)
		return
	}
	splitPiece(q, literalMatcher(m.replacement), behMergedWithNext, false, emit)
}

// sequencePre applies pre-tokenizers in order: each piece the first emits
// goes through the second, and so on.
type sequencePre struct {
	steps []preTokenizer
	bl    *byteLevel
}

func (q sequencePre) preTokenize(p piece, emit func(piece)) {
	if len(q.steps) == 0 {
		emit(p)
		return
	}
	// chain[i] feeds a piece to step i; the last step emits.
	chain := make([]func(piece), len(q.steps)+1)
	chain[len(q.steps)] = emit
	for i := len(q.steps) - 1; i >= 0; i-- {
		step, next := q.steps[i], chain[i+1]
		chain[i] = func(c piece) {
			if c.byteLevel {
				// A step after ByteLevel works on the image.
				c = piece{s: q.bl.encodeString(c.s), first: c.first}
			}
			step.preTokenize(c, next)
		}
	}
	chain[0](p)
}
