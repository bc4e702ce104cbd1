package data

import "sort"

// packBFD packs items of the given lengths (each 1…capacity) into bins of
// the capacity by best-fit decreasing, as trl's pack_dataset does with
// packing_strategy="bfd": items are taken longest first (ties in input
// order); each goes into the open bin with the least room that still fits
// it (ties to the bin that got that room first), or a new bin. Bins come
// out in the order they were opened, items within a bin in the order they
// went in, so the result is a pure function of the lengths.
func packBFD(lengths []int, capacity int) [][]int {
	order := make([]int, len(lengths))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return lengths[order[a]] > lengths[order[b]] })

	tree := newSpaceTree(capacity)
	byRoom := make(map[int][]int) // room left → bins with that room, FIFO
	var bins [][]int
	for _, item := range order {
		n := lengths[item]
		room := tree.bestFit(n)
		var bin int
		if room < capacity && room > 0 {
			q := byRoom[room]
			bin, byRoom[room] = q[0], q[1:]
			if len(byRoom[room]) == 0 {
				tree.set(room, false)
			}
		} else {
			bin = len(bins)
			bins = append(bins, nil)
			room = capacity
		}
		bins[bin] = append(bins[bin], item)
		if room -= n; room > 0 {
			byRoom[room] = append(byRoom[room], bin)
			tree.set(room, true)
		}
	}
	return bins
}

// spaceTree is a max segment tree over the room sizes 1…capacity that some
// open bin has, so the smallest room that fits n is found in O(log
// capacity). The capacity itself is always available (a new bin).
type spaceTree struct {
	size int   // leaves, a power of two ≥ capacity
	max  []int // max[i]: the largest available room under node i (0: none)
}

func newSpaceTree(capacity int) *spaceTree {
	size := 1
	for size < capacity {
		size *= 2
	}
	t := &spaceTree{size: size, max: make([]int, 2*size)}
	t.set(capacity, true)
	return t
}

// set marks room r available or not.
func (t *spaceTree) set(r int, on bool) {
	i := t.size + r - 1
	t.max[i] = 0
	if on {
		t.max[i] = r
	}
	for i /= 2; i >= 1; i /= 2 {
		t.max[i] = max(t.max[2*i], t.max[2*i+1])
	}
}

// bestFit returns the smallest available room ≥ n (n ≤ capacity).
func (t *spaceTree) bestFit(n int) int {
	i := 1
	for i < t.size {
		if t.max[2*i] >= n {
			i = 2 * i
		} else {
			i = 2*i + 1
		}
	}
	return t.max[i]
}
