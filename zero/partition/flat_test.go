package partition

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		n, world int
		want     [][2]int
	}{
		{0, 1, [][2]int{{0, 0}}},
		{0, 3, [][2]int{{0, 0}, {0, 0}, {0, 0}}},
		{8, 4, [][2]int{{0, 2}, {2, 4}, {4, 6}, {6, 8}}},
		// get_data_parallel_partitions: base 11/4 = 2, the first 3 ranks one more.
		{11, 4, [][2]int{{0, 3}, {3, 6}, {6, 9}, {9, 11}}},
		{2, 4, [][2]int{{0, 1}, {1, 2}, {2, 2}, {2, 2}}},
	}
	for _, tt := range tests {
		var got [][2]int
		for r := range tt.world {
			lo, hi := Split(tt.n, tt.world, r)
			got = append(got, [2]int{lo, hi})
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Split(%d, %d, ·) mismatch (-want +got):\n%s", tt.n, tt.world, diff)
		}
	}
}

// The worked example of doc.go.
func TestFlatWorkedExample(t *testing.T) {
	l := Flat([]Param{{"a", 5}, {"b", 6}}, 4)
	if l.Total != 11 || l.Padded != 16 || l.PartitionSize != 4 {
		t.Fatalf("Total, Padded, PartitionSize = %d, %d, %d; want 11, 16, 4", l.Total, l.Padded, l.PartitionSize)
	}
	if diff := cmp.Diff([]int{0, 5}, l.Offsets); diff != "" {
		t.Errorf("Offsets (-want +got):\n%s", diff)
	}
	want := [][]Fragment{
		{{Rank: 0, Param: 0, Name: "a", ParamOffset: 0, PartitionOffset: 0, Len: 4}},
		{{Rank: 1, Param: 0, Name: "a", ParamOffset: 4, PartitionOffset: 0, Len: 1},
			{Rank: 1, Param: 1, Name: "b", ParamOffset: 0, PartitionOffset: 1, Len: 3}},
		{{Rank: 2, Param: 1, Name: "b", ParamOffset: 3, PartitionOffset: 0, Len: 3}},
		nil,
	}
	var got [][]Fragment
	var pads, saved, parts []int
	for r := range 4 {
		got = append(got, l.SliceMappings(r))
		pads = append(pads, l.Padding(r))
		saved = append(saved, l.SavedLen(r))
		lo, hi := l.Partition(r)
		parts = append(parts, lo, hi)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SliceMappings (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 0, 1, 4}, pads); diff != "" {
		t.Errorf("Padding (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{4, 4, 3, 0}, saved); diff != "" {
		t.Errorf("SavedLen (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 4, 4, 8, 8, 12, 12, 16}, parts); diff != "" {
		t.Errorf("Partition (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Fragment{want[1][1], want[2][0]}, l.Fragments(1)); diff != "" {
		t.Errorf("Fragments(1) (-want +got):\n%s", diff)
	}
}

func TestFlatEdgeCases(t *testing.T) {
	tests := []struct {
		name        string
		numels      []int
		world       int
		padded, ps  int
		mappingLens [][]int // Len of each fragment per rank
	}{
		{"empty group", nil, 3, 0, 0, [][]int{nil, nil, nil}},
		{"one rank pads to 2", []int{3}, 1, 4, 4, [][]int{{3}}},
		{"exact fit", []int{4, 4}, 2, 8, 4, [][]int{{4}, {4}}},
		{"zero-size parameter skipped", []int{2, 0, 2}, 2, 4, 2, [][]int{{2}, {2}}},
		{"one element over 8 ranks", []int{1}, 8, 16, 2, [][]int{{1}, nil, nil, nil, nil, nil, nil, nil}},
		{"parameter spans three ranks", []int{1, 10, 1}, 3, 12, 4, [][]int{{1, 3}, {4}, {3, 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := Flat(params(tt.numels...), tt.world)
			if l.Padded != tt.padded || l.PartitionSize != tt.ps {
				t.Fatalf("Padded, PartitionSize = %d, %d; want %d, %d", l.Padded, l.PartitionSize, tt.padded, tt.ps)
			}
			var got [][]int
			for r := range tt.world {
				var lens []int
				for _, f := range l.SliceMappings(r) {
					lens = append(lens, f.Len)
				}
				got = append(got, lens)
			}
			if diff := cmp.Diff(tt.mappingLens, got); diff != "" {
				t.Errorf("fragment lengths (-want +got):\n%s", diff)
			}
		})
	}
}

// Every element of every parameter is in exactly one fragment, and
// SliceMappings and Fragments agree.
func TestFlatFragmentsCover(t *testing.T) {
	rng := newRand(1)
	for world := 1; world <= 9; world++ {
		for trial := range 20 {
			l := Flat(randomParams(rng, trial), world)
			byRank := map[Fragment]bool{}
			owned := make([]int, l.Padded)
			for r := range world {
				lo, hi := l.Partition(r)
				if hi-lo != l.PartitionSize {
					t.Fatalf("world %d rank %d: partition [%d,%d) not of size %d", world, r, lo, hi, l.PartitionSize)
				}
				for _, f := range l.SliceMappings(r) {
					byRank[f] = true
					for k := range f.Len {
						owned[l.Offsets[f.Param]+f.ParamOffset+k]++
						if got := lo + f.PartitionOffset + k; got != l.Offsets[f.Param]+f.ParamOffset+k {
							t.Fatalf("world %d: fragment %+v misplaced", world, f)
						}
					}
				}
			}
			for i := range l.Params {
				n := 0
				for _, f := range l.Fragments(i) {
					if !byRank[f] {
						t.Fatalf("world %d: Fragments(%d) has %+v, not in SliceMappings", world, i, f)
					}
					n += f.Len
				}
				if n != l.Params[i].Numel {
					t.Fatalf("world %d: Fragments(%d) cover %d of %d elements", world, i, n, l.Params[i].Numel)
				}
			}
			for off, c := range owned {
				if want := b2i(off < l.Total); c != want {
					t.Fatalf("world %d: flat element %d owned %d times, want %d", world, off, c, want)
				}
			}
			if l.Padded%(2*world) != 0 || l.Padded-l.Total >= 2*world {
				t.Fatalf("world %d: Total %d padded to %d", world, l.Total, l.Padded)
			}
			pad := 0
			for r := range world {
				pad += l.Padding(r)
			}
			if pad != l.Padded-l.Total {
				t.Fatalf("world %d: Σ Padding = %d, want %d", world, pad, l.Padded-l.Total)
			}
		}
	}
}

func TestRoundRobinOrder(t *testing.T) {
	tests := []struct {
		n, world int
		want     []int
	}{
		{0, 2, []int{}},
		{5, 1, []int{0, 1, 2, 3, 4}},
		{5, 2, []int{0, 2, 4, 1, 3}},
		{7, 3, []int{0, 3, 6, 1, 4, 2, 5}},
		{2, 4, []int{0, 1}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, RoundRobinOrder(tt.n, tt.world)); diff != "" {
			t.Errorf("RoundRobinOrder(%d, %d) (-want +got):\n%s", tt.n, tt.world, diff)
		}
	}
	in := params(10, 20, 30)
	got := Permute(in, []int{2, 0, 1})
	if diff := cmp.Diff([]Param{in[2], in[0], in[1]}, got); diff != "" {
		t.Errorf("Permute (-want +got):\n%s", diff)
	}
}

func TestPanics(t *testing.T) {
	tests := map[string]func(){
		"world 0":           func() { Flat(nil, 0) },
		"negative numel":    func() { Flat(params(-1), 1) },
		"rank out of range": func() { Flat(params(4), 2).Partition(2) },
		"not a permutation": func() { Permute(params(1, 2), []int{0, 0}) },
		"short order":       func() { Permute(params(1, 2), []int{0}) },
		"negative sub":      func() { SubGroups([]int{1}, -1) },
		"per-param rank":    func() { PerParam(4, 2, -1) },
		"flatten lengths":   func() { Flatten(Flat(params(2), 1), [][]float32{{1}}) },
	}
	for name, f := range tests {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic")
				}
			}()
			f()
		})
	}
}

func params(numels ...int) []Param {
	ps := make([]Param, len(numels))
	for i, n := range numels {
		ps[i] = Param{Name: fmt.Sprintf("p%d", i), Numel: n}
	}
	return ps
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
