package dsconfig

import "strings"

// suggest returns the candidate that s most plausibly misspells, or ""
// when none is close enough. It combines three signals: a case-insensitive
// exact match (sgd → SGD), the edit distance (persitence → persistence) and
// word overlap for snake_case names (warmup_steps → warmup_num_steps); a
// candidate contained in s (DeepSpeed_AdamW → AdamW) also counts. Ties go to
// the candidate sharing the longest prefix with s.
func suggest(s string, candidates []string) string {
	ls := strings.ToLower(s)
	best, bestScore, bestPrefix := "", 1<<30, -1
	for _, c := range candidates {
		lc := strings.ToLower(c)
		score := EditDistance(ls, lc)
		if ls == lc || strings.TrimLeft(ls, "_") == lc {
			score = 0
		}
		if t := tokenDistance(ls, lc); t < score {
			score = t
		}
		if len(lc) >= 3 && strings.Contains(ls, lc) && len(ls)-len(lc) < score {
			score = 1
		}
		p := commonPrefix(ls, lc)
		if score < bestScore || score == bestScore && p > bestPrefix {
			best, bestScore, bestPrefix = c, score, p
		}
	}
	limit := min(len(s)/4+1, 4)
	if bestScore <= limit {
		return best
	}
	return ""
}

// tokenDistance counts the snake_case words in which a and b differ, when
// one's words are all among the other's; otherwise it is large.
func tokenDistance(a, b string) int {
	ta, tb := strings.Split(a, "_"), strings.Split(b, "_")
	if len(ta) < 2 && len(tb) < 2 {
		return 1 << 30
	}
	if len(ta) > len(tb) {
		ta, tb = tb, ta
	}
	for _, w := range ta {
		if !contains(tb, w) {
			return 1 << 30
		}
	}
	return len(tb) - len(ta)
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

func quote(s string) string { return `"` + s + `"` }

// EditDistance is the Damerau–Levenshtein (optimal string alignment)
// distance between a and b, counting a swap of neighbours as one edit: the
// distance behind the did-you-mean suggestions of dsconfig and fsdpconfig.
func EditDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
