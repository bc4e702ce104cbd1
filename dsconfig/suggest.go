package dsconfig

import (
	"strings"
	"unicode/utf8"
)

// suggest returns the candidate that s most plausibly misspells, or ""
// when none is close enough. It combines three signals: a case-insensitive
// exact match (sgd → SGD), the edit distance (persitence → persistence) and
// word overlap for snake_case names (warmup_steps → warmup_num_steps,
// DeepSpeed_AdamW → AdamW). Ties go to the candidate sharing the longest
// prefix with s.
//
// A candidate is close enough when its score is at most
// min(len(s)/4+1, 4). The cost per candidate is bounded by that limit, not
// by the length of s: the edit distance is at least the difference in
// length, and the word distance at least the difference in word count, so
// candidates too far off in either are not compared at all. A 5 MB key is
// as cheap to check as a short one.
func suggest(s string, candidates []string) string {
	limit := min(len(s)/4+1, 4)
	ls := strings.ToLower(s)
	runes := utf8.RuneCountInString(ls)
	words := strings.Count(ls, "_") + 1
	var ra, rb []rune  // ls and a candidate, for the edit distance
	var rows []int     // the edit distance's table rows, reused
	var split []string // ls's words, split when a candidate needs them
	best, bestScore, bestPrefix := "", limit+1, -1
	for _, c := range candidates {
		lc := strings.ToLower(c)
		score := limit + 1
		if ls == lc || strings.TrimLeft(ls, "_") == lc {
			score = 0
		} else {
			if d := utf8.RuneCountInString(lc) - runes; -limit <= d && d <= limit {
				if ra == nil {
					ra = []rune(ls)
				}
				rb = rb[:0]
				for _, r := range lc {
					rb = append(rb, r)
				}
				score = editDistance(ra, rb, limit, &rows)
			}
			if cw := strings.Count(lc, "_") + 1; -limit <= cw-words && cw-words <= limit {
				if split == nil {
					split = strings.Split(ls, "_")
				}
				score = min(score, tokenDistance(split, lc, cw))
			}
		}
		if score > limit {
			continue
		}
		p := commonPrefix(ls, lc)
		if score < bestScore || score == bestScore && p > bestPrefix {
			best, bestScore, bestPrefix = c, score, p
		}
	}
	return best
}

// tokenDistance counts the snake_case words in which a (split into words)
// and b (of nb words) differ, when one's words are all among the other's;
// otherwise it is large. At least one of them must have two words or more.
func tokenDistance(ta []string, b string, nb int) int {
	const far = 1 << 30
	if len(ta) < 2 && nb < 2 {
		return far
	}
	if len(ta) <= nb {
		for _, w := range ta {
			if !hasWord(b, w) {
				return far
			}
		}
		return nb - len(ta)
	}
	for rest, more := b, true; more; {
		var w string
		w, rest, more = strings.Cut(rest, "_")
		if !contains(ta, w) {
			return far
		}
	}
	return len(ta) - nb
}

// hasWord reports whether w is one of the snake_case words of b.
func hasWord(b, w string) bool {
	for rest, more := b, true; more; {
		var x string
		x, rest, more = strings.Cut(rest, "_")
		if x == w {
			return true
		}
	}
	return false
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// didYouMean formats a suggestion as a fix, or returns fallback.
func didYouMean(s string, candidates []string, fallback string) string {
	if c := suggest(s, candidates); c != "" {
		return "did you mean " + quote(c) + "?"
	}
	return fallback
}

// EditDistance is the Damerau–Levenshtein (optimal string alignment)
// distance between a and b, counting a swap of neighbours as one edit: the
// distance behind the did-you-mean suggestions of dsconfig and fsdpconfig.
// It takes time proportional to len(a) × len(b).
func EditDistance(a, b string) int {
	var rows []int
	return editDistance([]rune(a), []rune(b), 1<<30, &rows)
}

// editDistance is EditDistance(a, b) when that is at most k, and k+1
// otherwise. It fills the optimal-string-alignment table row by row in
// *rows (grown as needed, for reuse). Every entry of a row is at least the
// smallest entry of the row before, or of the one before that plus one (a
// swap reaches back two rows and costs one), so once two rows in a row
// exceed k the distance does too, and it stops.
func editDistance(ra, rb []rune, k int, rows *[]int) int {
	n := len(rb) + 1
	if cap(*rows) < 3*n {
		*rows = make([]int, 3*n)
	}
	r := (*rows)[:3*n]
	prev2, prev, cur := r[:n], r[n:2*n], r[2*n:]
	for j := range prev {
		prev[j] = j
	}
	prevMin := 0
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		rowMin := i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
			rowMin = min(rowMin, cur[j])
		}
		if rowMin > k && prevMin > k {
			return k + 1
		}
		prevMin = rowMin
		prev2, prev, cur = prev, cur, prev2
	}
	return min(prev[len(rb)], k+1)
}
