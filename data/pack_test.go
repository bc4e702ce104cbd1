package data

import (
	"sort"
	"testing"

	"github.com/dszero/dszero/internal/splitmix"
	"github.com/google/go-cmp/cmp"
)

// trl's pack_dataset docstring: sequences of lengths 5, 2, 3, 1 packed
// into 4 with "bfd" (the first truncated to 4) give the rows
// [[1,2,3,4], [8,9,10,11], [6,7]]: items [0], [2, 3], [1].
func TestPackBFDTrlExample(t *testing.T) {
	got := packBFD([]int{4, 2, 3, 1}, 4)
	if diff := cmp.Diff([][]int{{0}, {2, 3}, {1}}, got); diff != "" {
		t.Error(diff)
	}
}

// bfdReference is best-fit decreasing written the slow, obvious way: for
// each item, longest first, scan every bin for the least room that fits,
// ties going to the bin that has had that room the longest.
func bfdReference(lengths []int, capacity int) [][]int {
	order := make([]int, len(lengths))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return lengths[order[a]] > lengths[order[b]] })
	var bins [][]int
	var room, since []int // room left; when the bin got it
	for step, item := range order {
		best := -1
		for b := range bins {
			if room[b] >= lengths[item] && (best < 0 || room[b] < room[best] || room[b] == room[best] && since[b] < since[best]) {
				best = b
			}
		}
		if best < 0 {
			bins, room, since = append(bins, nil), append(room, capacity), append(since, 0)
			best = len(bins) - 1
		}
		bins[best] = append(bins[best], item)
		room[best] -= lengths[item]
		since[best] = step
	}
	return bins
}

func TestPackBFDMatchesReference(t *testing.T) {
	x := uint64(7)
	for trial := 0; trial < 200; trial++ {
		capacity := 1 + int(splitmix.Mix(x+uint64(trial))%64)
		n := int(splitmix.Mix(x+1000+uint64(trial)) % 80)
		lengths := make([]int, n)
		for i := range lengths {
			x += splitmix.Golden
			lengths[i] = 1 + int(splitmix.Mix(x)%uint64(capacity))
		}
		got := packBFD(lengths, capacity)
		if diff := cmp.Diff(bfdReference(lengths, capacity), got); diff != "" {
			t.Fatalf("capacity %d, lengths %v (-reference +packBFD):\n%s", capacity, lengths, diff)
		}
		seen := make([]int, n)
		for _, bin := range got {
			sum := 0
			for _, it := range bin {
				seen[it]++
				sum += lengths[it]
			}
			if sum > capacity || len(bin) == 0 {
				t.Fatalf("bin %v holds %d > %d", bin, sum, capacity)
			}
		}
		for i, c := range seen {
			if c != 1 {
				t.Fatalf("item %d packed %d times", i, c)
			}
		}
	}
}
