package tokenizer

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpe is the byte-pair-encoding model. A word starts as one symbol per
// character; then, over and over, the adjacent pair with the lowest merge
// rank (the earliest line of "merges") is replaced by its merged token, the
// leftmost pair winning ties, until no adjacent pair has a merge.
type bpe struct {
	vocab     map[string]int32
	idToToken []string
	// merges maps a pair of ids (left<<32 | right) to its rank and result.
	merges map[uint64]merge

	unkID        int32 // -1 when there is no unk_token
	fuseUnk      bool
	byteFallback bool
	byteIDs      [256]int32 // ids of "<0x00>".."<0xFF>", -1 where absent
	ignoreMerges bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix
	// splitBeforeMarker: see encode and markerSafe.
	splitBeforeMarker bool

	cache wordCache
}

type merge struct{ rank, id int32 }

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// buildMerges resolves the merges (each a pair of token strings) to ids. The
// merged token is left + right without right's continuing_subword_prefix.
// A later duplicate of a pair overrides the earlier one, as in Rust.
func (m *bpe) buildMerges(pairs [][2]string) error {
	m.merges = make(map[uint64]merge, len(pairs))
	for i, p := range pairs {
		a, okA := m.vocab[p[0]]
		b, okB := m.vocab[p[1]]
		right := p[1]
		if len(right) >= len(m.prefix) && right[:len(m.prefix)] == m.prefix {
			right = right[len(m.prefix):]
		}
		c, okC := m.vocab[p[0]+right]
		switch {
		case !okA:
			return fmt.Errorf("model.merges[%d]: token %q is not in the vocab", i, p[0])
		case !okB:
			return fmt.Errorf("model.merges[%d]: token %q is not in the vocab", i, p[1])
		case !okC:
			return fmt.Errorf("model.merges[%d]: merged token %q is not in the vocab", i, p[0]+right)
		}
		m.merges[pairKey(a, b)] = merge{int32(i), c}
	}
	return nil
}

// symbol is one node of the word's doubly linked list of symbols.
type symbol struct {
	id         int32
	prev, next int32 // -1 at the ends
	gone       bool  // merged into its left neighbour
}

// encode appends the ids of one pre-tokenized word. With splitBeforeMarker,
// the word is first cut before every "▁" that follows another character
// (see splitBeforeMarker), which leaves the result unchanged and lets the
// cache work for SentencePiece vocabularies, where a whole section of text is
// one word.
func (m *bpe) encode(dst []int, word []byte) []int {
	if !m.splitBeforeMarker {
		return m.encodeWord(dst, word)
	}
	start := 0
	for i := 1; i+len(spMarker) <= len(word); i++ {
		if word[i] == spMarker[0] && string(word[i:i+len(spMarker)]) == spMarker &&
			string(word[i-len(spMarker):i]) != spMarker && i > start {
			dst = m.encodeWord(dst, word[start:i])
			start = i
		}
	}
	return m.encodeWord(dst, word[start:])
}

// spMarker is SentencePiece's word-start marker.
const spMarker = "▁"

// markerSafe reports whether cutting words before "▁" is exact for this
// vocabulary: no token holds a "▁" right after a character other than "▁".
// A BPE symbol is always a vocabulary token (or one unknown or byte-fallback
// character), so no symbol can then span such a cut, and BPE on the parts
// gives the same symbols as BPE on the whole.
func markerSafe(vocab map[string]int32) bool {
	if _, ok := vocab[spMarker]; !ok {
		return false // an unknown "▁" could be fused with its neighbours
	}
	for tok := range vocab {
		for i := 1; i < len(tok); i++ {
			if strings.HasPrefix(tok[i:], spMarker) && !strings.HasSuffix(tok[:i], spMarker) {
				return false
			}
		}
	}
	return true
}

// encodeWord appends the ids of one word. The cache comes first: it is much
// smaller than the vocabulary, so its lookups stay in the CPU caches.
func (m *bpe) encodeWord(dst []int, word []byte) []int {
	if len(word) == 0 {
		return dst
	}
	if ids, ok := m.cache.get(word); ok {
		for _, id := range ids {
			dst = append(dst, int(id))
		}
		return dst
	}
	var ids []int32
	if id, ok := m.lookupWhole(word); ok {
		ids = []int32{id}
	} else {
		ids = m.mergeWord(word)
	}
	if len(word) < maxCachedWord {
		m.cache.put(string(word), ids)
	}
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	return dst
}

// lookupWhole is ignore_merges: a word that is a token is that token.
func (m *bpe) lookupWhole(word []byte) (int32, bool) {
	if !m.ignoreMerges {
		return 0, false
	}
	id, ok := m.vocab[string(word)]
	return id, ok
}

// mergeWord runs BPE on one word and returns its ids.
func (m *bpe) mergeWord(word []byte) []int32 {
	syms := make([]symbol, 0, len(word))
	add := func(id int32) {
		n := int32(len(syms))
		syms = append(syms, symbol{id: id, prev: n - 1, next: n + 1})
	}
	// A pending unknown: one unk for a run of unknown characters with fuse_unk.
	pendingUnk := false
	flushUnk := func() {
		if pendingUnk {
			add(m.unkID)
			pendingUnk = false
		}
	}
	var affixed []byte
	for i := 0; i < len(word); {
		_, n := utf8.DecodeRune(word[i:])
		ch := word[i : i+n]
		if m.prefix != "" && i > 0 || m.suffix != "" && i+n == len(word) {
			affixed = affixed[:0]
			if m.prefix != "" && i > 0 {
				affixed = append(affixed, m.prefix...)
			}
			affixed = append(affixed, ch...)
			if m.suffix != "" && i+n == len(word) {
				affixed = append(affixed, m.suffix...)
			}
			ch = affixed
		}
		i += n
		if id, ok := m.vocab[string(ch)]; ok {
			flushUnk()
			add(id)
			continue
		}
		if m.byteFallback && m.hasBytes(ch) {
			// Rust adds the byte tokens without flushing a pending unk first;
			// keep that order.
			for _, c := range ch {
				add(m.byteIDs[c])
			}
			continue
		}
		if m.unkID < 0 {
			continue // no unk_token: the character is dropped
		}
		if pendingUnk && !m.fuseUnk {
			add(m.unkID)
		}
		pendingUnk = true
	}
	flushUnk()
	if len(syms) == 0 {
		return nil
	}
	syms[len(syms)-1].next = -1
	m.mergeAll(syms)
	out := make([]int32, 0, len(syms))
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, syms[i].id)
	}
	return out
}

func (m *bpe) hasBytes(s []byte) bool {
	for k := 0; k < len(s); k++ {
		if m.byteIDs[s[k]] < 0 {
			return false
		}
	}
	return true
}

// mergeAll applies merges to the symbol list in place, lowest rank first,
// leftmost first among equal ranks, using a binary min-heap of candidate
// pairs. A candidate is stale when its left symbol was merged away or its
// pair changed; stale candidates are skipped when popped.
func (m *bpe) mergeAll(syms []symbol) {
	type cand struct{ rank, pos, id int32 }
	less := func(a, b cand) bool { return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos }
	var heap []cand
	push := func(c cand) {
		heap = append(heap, c)
		for i := len(heap) - 1; i > 0; {
			p := (i - 1) / 2
			if !less(heap[i], heap[p]) {
				break
			}
			heap[i], heap[p] = heap[p], heap[i]
			i = p
		}
	}
	pop := func() cand {
		top := heap[0]
		last := len(heap) - 1
		heap[0] = heap[last]
		heap = heap[:last]
		for i := 0; ; {
			l, r, small := 2*i+1, 2*i+2, i
			if l < len(heap) && less(heap[l], heap[small]) {
				small = l
			}
			if r < len(heap) && less(heap[r], heap[small]) {
				small = r
			}
			if small == i {
				break
			}
			heap[i], heap[small] = heap[small], heap[i]
			i = small
		}
		return top
	}
	for i := 0; i+1 < len(syms); i++ {
		if mg, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			push(cand{mg.rank, int32(i), mg.id})
		}
	}
	for len(heap) > 0 {
		c := pop()
		left := &syms[c.pos]
		if left.gone || left.next < 0 {
			continue
		}
		right := &syms[left.next]
		if mg, ok := m.merges[pairKey(left.id, right.id)]; !ok || mg.id != c.id {
			continue
		}
		left.id = c.id
		right.gone = true
		left.next = right.next
		if left.next >= 0 {
			syms[left.next].prev = c.pos
		}
		if left.prev >= 0 {
			if mg, ok := m.merges[pairKey(syms[left.prev].id, left.id)]; ok {
				push(cand{mg.rank, left.prev, mg.id})
			}
		}
		if left.next >= 0 {
			if mg, ok := m.merges[pairKey(left.id, syms[left.next].id)]; ok {
				push(cand{mg.rank, c.pos, mg.id})
			}
		}
	}
}

// Words shorter than maxCachedWord bytes are cached, at most cacheCap of
// them; a full cache is emptied and refilled, so it follows the text.
const (
	maxCachedWord = 256
	cacheCap      = 1 << 16
)

// wordCache memoizes encodeWord; it is safe for concurrent use.
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func (c *wordCache) get(word []byte) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[string(word)]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(word string, ids []int32) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= cacheCap {
		c.m = make(map[string][]int32, 1024)
	}
	c.m[word] = ids
	c.mu.Unlock()
}
