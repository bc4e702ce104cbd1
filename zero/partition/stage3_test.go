package partition

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPerParam(t *testing.T) {
	tests := []struct {
		numel, world int
		want         [][3]int // lo, hi, pad per rank
	}{
		{0, 2, [][3]int{{0, 0, 0}, {0, 0, 0}}},
		{8, 1, [][3]int{{0, 8, 0}}},
		{8, 4, [][3]int{{0, 2, 0}, {2, 4, 0}, {4, 6, 0}, {6, 8, 0}}},
		// anchors.md §2.5: 10 over 4 ranks, ps 3, the last rank [9,10) + 2.
		{10, 4, [][3]int{{0, 3, 0}, {3, 6, 0}, {6, 9, 0}, {9, 10, 2}}},
		// Padding fills whole partitions of the last ranks.
		{5, 4, [][3]int{{0, 2, 0}, {2, 4, 0}, {4, 5, 1}, {5, 5, 2}}},
		{1, 3, [][3]int{{0, 1, 0}, {1, 1, 1}, {1, 1, 1}}},
	}
	for _, tt := range tests {
		var got [][3]int
		for r := range tt.world {
			lo, hi, pad := PerParam(tt.numel, tt.world, r)
			got = append(got, [3]int{lo, hi, pad})
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("PerParam(%d, %d, ·) (-want +got):\n%s", tt.numel, tt.world, diff)
		}
		ps := ParamPartitionSize(tt.numel, tt.world)
		if ps*tt.world != tt.numel+ParamPadding(tt.numel, tt.world) {
			t.Errorf("numel %d world %d: ps %d × world ≠ numel + padding %d", tt.numel, tt.world, ps, ParamPadding(tt.numel, tt.world))
		}
	}
}

func TestSubGroups(t *testing.T) {
	tests := []struct {
		name  string
		sizes []int
		size  int
		want  [][]int
	}{
		{"default size: one group", []int{3, 4, 5}, 1_000_000_000, [][]int{{0, 1, 2}}},
		{"size equal to the total: one group", []int{3, 4, 5}, 12, [][]int{{0, 1, 2}}},
		{"close when reaching the size", []int{3, 4, 5}, 7, [][]int{{0, 1}, {2}}},
		{"a group may exceed the size", []int{3, 4, 5}, 5, [][]int{{0, 1}, {2}}},
		{"last parameter closes", []int{3, 4, 5, 1}, 8, [][]int{{0, 1, 2}, {3}}},
		{"size 0: one group per parameter", []int{3, 4}, 0, [][]int{{0}, {1}}},
		{"size 1", []int{3, 0, 4}, 1, [][]int{{0}, {1, 2}}},
		{"empty group", nil, 10, [][]int{{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, SubGroups(tt.sizes, tt.size)); diff != "" {
				t.Errorf("SubGroups(%v, %d) (-want +got):\n%s", tt.sizes, tt.size, diff)
			}
		})
	}
}

// The stage 3 worked example of doc.go.
func TestStage3WorkedExample(t *testing.T) {
	l := Stage3([]Param{{"a", 5}, {"b", 6}}, 4, 2)
	want := Stage3Layout{
		Params:         []Param{{"a", 5}, {"b", 6}},
		World:          4,
		PartitionSizes: []int{2, 2},
		Offsets:        []int{0, 2},
		RankNumel:      4,
		SubGroups:      [][]int{{0}, {1}},
	}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Fatalf("Stage3 (-want +got):\n%s", diff)
	}
	var pads []int
	for r := range 4 {
		pads = append(pads, l.Padding(r))
	}
	if diff := cmp.Diff([]int{0, 0, 1, 4}, pads); diff != "" {
		t.Errorf("Padding (-want +got):\n%s", diff)
	}
	if l.SubGroupNumel(1) != 2 || l.SubGroupOffset(1) != 2 {
		t.Errorf("sub-group 1: numel %d offset %d, want 2 and 2", l.SubGroupNumel(1), l.SubGroupOffset(1))
	}
	a := []float32{1, 2, 3, 4, 5}
	b := []float32{6, 7, 8, 9, 10, 11}
	var flats [][]float32
	for r := range 4 {
		flats = append(flats, ShardStage3(l, [][]float32{a, b}, r))
	}
	wantFlats := [][]float32{{1, 2, 6, 7}, {3, 4, 8, 9}, {5, 0, 10, 11}, {0, 0, 0, 0}}
	if diff := cmp.Diff(wantFlats, flats); diff != "" {
		t.Errorf("ShardStage3 (-want +got):\n%s", diff)
	}
}

// TestHostSubGroups: which of k sub-groups partial optimizer offload puts
// on the host, by DeepSpeed's two rules, with Python's float64 products
// truncated by int() (the expected values are what CPython prints for
// int(r*k) and k - int((1-r)*k)).
func TestHostSubGroups(t *testing.T) {
	type rng struct{ Lo, Hi int }
	for _, tc := range []struct {
		k           int
		r           float64
		first, last rng
	}{
		{3, 0, rng{0, 0}, rng{3, 3}},
		{3, 1, rng{0, 3}, rng{0, 3}},
		{3, 0.5, rng{0, 1}, rng{1, 3}},        // 1.5 → 1; 3 − int(1.5)
		{1, 0.5, rng{0, 0}, rng{0, 1}},        // one sub-group: 0.14.5 keeps it on the device, 0.19.5 offloads it
		{10, 0.3, rng{0, 3}, rng{7, 10}},      // 3.0; 7.0
		{10, 0.7, rng{0, 7}, rng{3, 10}},      // 7.0; 3.0000000000000004
		{10, 0.9, rng{0, 9}, rng{0, 10}},      // 9.0; 0.9999999999999998
		{100, 0.57, rng{0, 56}, rng{43, 100}}, // 56.99999999999999; 43.00000000000001
		{100, 0.29, rng{0, 28}, rng{71, 100}}, // 28.999999999999996; 71.0
		{3, 0.1, rng{0, 0}, rng{2, 3}},        // 0.30000000000000004; 2.7
		{0, 0.5, rng{0, 0}, rng{0, 0}},
	} {
		var got [2]rng
		got[0].Lo, got[0].Hi = OffloadFirst.HostSubGroups(tc.k, tc.r)
		got[1].Lo, got[1].Hi = OffloadLast.HostSubGroups(tc.k, tc.r)
		if d := cmp.Diff([2]rng{tc.first, tc.last}, got); d != "" {
			t.Errorf("k %d ratio %g: (-want +got) [first, last]\n%s", tc.k, tc.r, d)
		}
	}
	for _, bad := range []float64{-0.1, 1.1, math.NaN()} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("ratio %v: no panic", bad)
				}
			}()
			OffloadLast.HostSubGroups(4, bad)
		}()
	}
}
