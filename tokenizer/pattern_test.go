package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func pieces(m matcher, s string) []string {
	var out []string
	for _, sp := range m.findAll(s, nil) {
		out = append(out, s[sp.start:sp.end])
	}
	return out
}

func mustRegex(t *testing.T, pattern string, generic bool) matcher {
	t.Helper()
	m, err := compileRegex(pattern, generic)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestOnigurumaSemantics pins the scanners to Oniguruma's reading of the
// patterns where the JavaScript reference reads them differently, so the
// golden corpus cannot check them. Each expectation is worked out from the
// regex by hand.
func TestOnigurumaSemantics(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		in      string
		want    []string
	}{
		// U+0085 is White_Space (a space to Oniguruma; ECMAScript's \s
		// lacks it). "  \u0085" is one run of spaces reaching the end.
		{"gpt2 U+0085 is a space", patGPT2, "x  \u0085", []string{"x", "  \u0085"}},
		// U+FEFF is not White_Space (ECMAScript's \s has it). The two
		// spaces are a run followed by a non-space, so they split as
		// " " + " \uFEFF" (space then a symbol run).
		{"gpt2 U+FEFF is a symbol", patGPT2, "x  \uFEFFy", []string{"x", " ", " \uFEFF", "y"}},
		{"cl100k U+FEFF is a symbol", patCL100K, "x  \uFEFF1", []string{"x", " ", " \uFEFF", "1"}},
		// (?i:'s) matches "'ſ": U+017F case-folds to 's'.
		{"cl100k long s folds to s", patCL100K, "it'ſok", []string{"it", "'ſ", "ok"}},
		{"qwen long s folds to s", patQwen2, "IT'ſOK", []string{"IT", "'ſ", "OK"}},
		// GPT-2's contractions are case-sensitive.
		{"gpt2 contraction case", patGPT2, "I'M it's", []string{"I", "'", "M", " it", "'s"}},
		{"cl100k contraction case", patCL100K, "I'M WE'LL", []string{"I", "'M", " WE", "'LL"}},
		// \p{N}{1,3} against \p{N}.
		{"cl100k digit groups", patCL100K, "1234567", []string{"123", "456", "7"}},
		{"qwen single digits", patQwen2, "123", []string{"1", "2", "3"}},
		// \s*[\r\n]+ ends at the run's last line break; the rest is \s+.
		{"cl100k newline runs", patCL100K, "a \n \n  b", []string{"a", " \n \n", " ", " b"}},
		{"cl100k trailing spaces", patCL100K, "a   ", []string{"a", "   "}},
		{"cl100k punctuation and newline", patCL100K, "x!?\n\ny", []string{"x", "!?\n\n", "y"}},
		{"cl100k tab before letters", patCL100K, "a\tb", []string{"a", "\tb"}},
		{"cl100k no CR before letters", patCL100K, "a\rb", []string{"a", "\r", "b"}},
		// Invalid UTF-8 is one symbol character per byte.
		{"gpt2 invalid bytes", patGPT2, "a\xff\xfeb", []string{"a", "\xff\xfe", "b"}},
		{"cl100k invalid byte before letters", patCL100K, "\xffab", []string{"\xffab"}},
		{"cl100k space, invalid byte, letters", patCL100K, " \xffab", []string{" \xff", "ab"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := pieces(mustRegex(t, tc.pattern, false), tc.in); !cmp.Equal(got, tc.want) {
				t.Errorf("split %q (-want +got):\n%s", tc.in, cmp.Diff(tc.want, got))
			}
		})
	}
}

// TestScannersMatchRegexp2 checks the hand-written scanners against the
// general regex engine on random strings over an alphabet that stresses
// the patterns' alternatives.
func TestScannersMatchRegexp2(t *testing.T) {
	alphabet := []string{
		"a", "Z", "é", "中", "ß", "0", "9", "٣", "½", " ", " ", " ", "\t", "\n", "\r", "\u00a0",
		"\u3000", "\u2028", "\u0085", "'", "s", "t", "re", "ll", "!", "?", ".", "(", "-", "\u0301",
		"😀", "\uFEFF", "_", "$",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, pattern := range []string{patGPT2, patCL100K, patQwen2} {
		fast, slow := mustRegex(t, pattern, false), mustRegex(t, pattern, true)
		if _, ok := slow.(regexMatcher); !ok {
			t.Fatal("forced generic regex is not regexp2")
		}
		for n := 0; n < 3000; n++ {
			var b strings.Builder
			for k := rng.IntN(24); k >= 0; k-- {
				b.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			s := b.String()
			if got, want := pieces(fast, s), pieces(slow, s); !cmp.Equal(got, want) {
				t.Fatalf("pattern %q on %q: scanner (-regexp2 +scanner):\n%s", pattern, s, cmp.Diff(want, got))
			}
		}
	}
}

// TestSplitBehaviors uses the example of the Rust library's own test.
func TestSplitBehaviors(t *testing.T) {
	tests := []struct {
		beh    splitBehavior
		invert bool
		want   []string
	}{
		{behRemoved, false, []string{"The", "final", "countdown"}},
		{behIsolated, false, []string{"The", "-", "final", "-", "-", "countdown"}},
		{behMergedWithPrevious, false, []string{"The-", "final-", "-", "countdown"}},
		{behMergedWithNext, false, []string{"The", "-final", "-", "-countdown"}},
		{behContiguous, false, []string{"The", "-", "final", "--", "countdown"}},
		// Inverted: the words are the matches and the dashes are removed.
		{behRemoved, true, []string{"-", "-", "-"}},
	}
	for _, tc := range tests {
		var got []string
		splitPiece(piece{s: "The-final--countdown"}, literalMatcher("-"), tc.beh, tc.invert,
			func(p piece) { got = append(got, p.s) })
		if !cmp.Equal(got, tc.want) {
			t.Errorf("behavior %d invert %v (-want +got):\n%s", tc.beh, tc.invert, cmp.Diff(tc.want, got))
		}
	}
}

func TestMetaspace(t *testing.T) {
	tests := []struct {
		name string
		pre  metaspacePre
		in   piece
		want []string
	}{
		{"always, split", metaspacePre{"▁", prependAlways, true}, piece{s: "Hey  friend"}, []string{"▁Hey", "▁", "▁friend"}},
		{"always, no split", metaspacePre{"▁", prependAlways, false}, piece{s: "Hey friend"}, []string{"▁Hey▁friend"}},
		{"first, at start", metaspacePre{"▁", prependFirst, true}, piece{s: "Hey", first: true}, []string{"▁Hey"}},
		{"first, after a token", metaspacePre{"▁", prependFirst, true}, piece{s: "Hey"}, []string{"Hey"}},
		{"never", metaspacePre{"▁", prependNever, true}, piece{s: "a b"}, []string{"a", "▁b"}},
		{"already marked", metaspacePre{"▁", prependAlways, true}, piece{s: " a"}, []string{"▁a"}},
	}
	for _, tc := range tests {
		var got []string
		tc.pre.preTokenize(tc.in, func(p piece) { got = append(got, p.s) })
		if !cmp.Equal(got, tc.want) {
			t.Errorf("%s (-want +got):\n%s", tc.name, cmp.Diff(tc.want, got))
		}
	}
}

func TestLossyUTF8(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc", "abc"},
		{"a\xe2\x82b", "a\uFFFDb"},             // truncated 3-byte sequence: one U+FFFD
		{"\xff\xfe", "\uFFFD\uFFFD"},           // two invalid bytes: two
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // a surrogate: ED is valid only with 80..9F next
		{"\xf0\x9f\x98", "\uFFFD"},             // truncated emoji
		{"\xf0\x9f\x98\x80", "😀"},
	}
	for _, tc := range tests {
		if got := lossyUTF8([]byte(tc.in)); got != tc.want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
