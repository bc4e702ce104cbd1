package dcp

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/ptfile"
)

func TestRowChunk(t *testing.T) {
	type row struct{ lo, n int64 }
	cases := []struct {
		size  []int64
		world int
		want  []row // per rank; n == 0: no chunk
	}{
		// torch.chunk(10, 4): chunks of ceil(10/4) = 3, the last of 1.
		{[]int64{10, 2}, 4, []row{{0, 3}, {3, 3}, {6, 3}, {9, 1}}},
		// torch.chunk(3, 4) gives 3 chunks: rank 3 holds nothing.
		{[]int64{3}, 4, []row{{0, 1}, {1, 1}, {2, 1}, {0, 0}}},
		// torch.chunk(5, 4): chunks of 2: 2, 2, 1 and nothing.
		{[]int64{5, 3}, 4, []row{{0, 2}, {2, 2}, {4, 1}, {0, 0}}},
		{[]int64{7, 4}, 1, []row{{0, 7}}},
		{[]int64{6}, 3, []row{{0, 2}, {2, 2}, {4, 2}}},
	}
	for _, c := range cases {
		for r, w := range c.want {
			b, ok := RowChunk(c.size, c.world, r)
			if ok != (w.n > 0) {
				t.Fatalf("%v over %d, rank %d: ok %v", c.size, c.world, r, ok)
			}
			if !ok {
				continue
			}
			wantSizes := append([]int64{w.n}, c.size[1:]...)
			wantOff := make([]int64, len(c.size))
			wantOff[0] = w.lo
			if diff := cmp.Diff(Box{wantOff, wantSizes}, b); diff != "" {
				t.Fatalf("%v over %d, rank %d: %s", c.size, c.world, r, diff)
			}
		}
	}
	if _, ok := RowChunk(nil, 2, 0); ok {
		t.Fatal("a 0-dimensional tensor is not sharded")
	}
}

func TestFlatBoxes(t *testing.T) {
	cases := []struct {
		size       []int64
		start, end int64
		want       []Box
	}{
		{[]int64{3, 4}, 0, 12, []Box{{[]int64{0, 0}, []int64{3, 4}}}},
		{[]int64{3, 4}, 4, 8, []Box{{[]int64{1, 0}, []int64{1, 4}}}},
		{[]int64{3, 4}, 1, 3, []Box{{[]int64{0, 1}, []int64{1, 2}}}},
		// Partial first row, whole middle row, partial last row.
		{[]int64{3, 4}, 2, 11, []Box{{[]int64{0, 2}, []int64{1, 2}}, {[]int64{1, 0}, []int64{1, 4}}, {[]int64{2, 0}, []int64{1, 3}}}},
		{[]int64{3, 4}, 2, 8, []Box{{[]int64{0, 2}, []int64{1, 2}}, {[]int64{1, 0}, []int64{1, 4}}}},
		{[]int64{5}, 1, 4, []Box{{[]int64{1}, []int64{3}}}},
		{[]int64{2, 2, 3}, 4, 9, []Box{
			{[]int64{0, 1, 1}, []int64{1, 1, 2}},
			{[]int64{1, 0, 0}, []int64{1, 1, 3}}}},
		{[]int64{}, 0, 1, []Box{{[]int64{}, []int64{}}}},
		{[]int64{3, 4}, 5, 5, nil},
	}
	for _, c := range cases {
		got := FlatBoxes(c.size, c.start, c.end)
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%v [%d, %d): %s", c.size, c.start, c.end, diff)
		}
	}
	// Every range of a 3-d tensor: the boxes hold exactly its elements, in order.
	size := []int64{3, 2, 4}
	n := Numel(size)
	st := strides(size)
	for s := int64(0); s <= n; s++ {
		for e := s; e <= n; e++ {
			var got []int64
			for _, b := range FlatBoxes(size, s, e) {
				for i := int64(0); i < Numel(b.Sizes); i++ {
					flat, rem := int64(0), i
					for d := len(size) - 1; d >= 0; d-- {
						flat += (b.Offsets[d] + rem%b.Sizes[d]) * st[d]
						rem /= b.Sizes[d]
					}
					got = append(got, flat)
				}
			}
			for i, g := range got {
				if g != s+int64(i) {
					t.Fatalf("[%d, %d): element %d is %d", s, e, i, g)
				}
			}
			if int64(len(got)) != e-s {
				t.Fatalf("[%d, %d): %d elements", s, e, len(got))
			}
		}
	}
}

func TestFlatten(t *testing.T) {
	got, err := Flatten(specStateDict(t))
	if err != nil {
		t.Fatal(err)
	}
	want := specLeaves(t)
	if len(got) != len(want) {
		t.Fatalf("%d leaves, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Key != want[i].Key || fmt.Sprint(got[i].Path) != fmt.Sprint(want[i].Path) || describe(got[i].Value) != describe(want[i].Value) {
			t.Errorf("leaf %d: %s %v %s, want %s %v %s", i, got[i].Key, got[i].Path, describe(got[i].Value), want[i].Key, want[i].Path, describe(want[i].Value))
		}
	}
	// Lists of plain values and tuples are leaves; lists holding a tensor are
	// descended; empty dicts vanish; int keys become strings.
	sd := ptfile.DictOf(
		"a", ptfile.List{int64(1), ptfile.List{"x"}},
		"b", ptfile.List{ptfile.FromFloat32([]int64{1}, []float32{1}), int64(2)},
		"c", ptfile.NewDict(),
		"d", ptfile.DictOf(int64(0), ptfile.Tuple{int64(1), ptfile.FromFloat32(nil, []float32{2})}, true, nil),
	)
	leaves, err := Flatten(sd)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, l := range leaves {
		keys = append(keys, fmt.Sprintf("%s%v", l.Key, l.Path))
	}
	if s := strings.Join(keys, " "); s != "a[a] b.0[b 0] b.1[b 1] d.0[d 0] d.True[d True]" {
		t.Fatalf("keys: %s", s)
	}
	if _, err := Flatten(ptfile.DictOf("a.b", int64(1), "a", ptfile.DictOf("b", int64(2)))); err == nil {
		t.Fatal("a key reached twice: no error")
	}
}

func TestUnflatten(t *testing.T) {
	sd, err := Unflatten(specLeaves(t))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := describe(sd), describe(specStateDict(t)); got != want {
		t.Fatalf("unflatten:\n%s\nwant\n%s", got, want)
	}
	// set_element pads a list with None up to an index.
	sd, err = Unflatten([]Leaf{{Key: "l.2", Path: []any{"l", int64(2)}, Value: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := describe(sd); got != "{l: [<nil>(<nil>), <nil>(<nil>), string(x), ], }" {
		t.Fatalf("padding: %s", got)
	}
	if _, err := Unflatten([]Leaf{{Key: "a", Path: []any{"a"}, Value: int64(1)}, {Key: "a.b", Path: []any{"a", "b"}, Value: int64(2)}}); err == nil {
		t.Fatal("a value and a container at one path: no error")
	}
}

// boxBytes is box b of whole, element by element from row-major flat
// indices: independent of the reader's run copies.
func boxBytes(t *testing.T, whole *ptfile.Tensor, b Box) []byte {
	t.Helper()
	src, err := whole.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	es := whole.DType.Size()
	st := strides(whole.Shape)
	var out []byte
	for i := int64(0); i < Numel(b.Sizes); i++ {
		flat, rem := int64(0), i
		for d := len(b.Sizes) - 1; d >= 0; d-- {
			flat += (b.Offsets[d] + rem%b.Sizes[d]) * st[d]
			rem /= b.Sizes[d]
		}
		out = append(out, src[flat*es:(flat+1)*es]...)
	}
	return out
}

// wantBox describes box b of whole as describe does a tensor.
func wantBox(t *testing.T, whole *ptfile.Tensor, b Box) string {
	return fmt.Sprintf("%s%v %x", whole.DType, b.Sizes, boxBytes(t, whole, b))
}

// TestRoundTripWorldSizes saves the fixture on 1, 2, 3 and 4 ranks and
// reads every tensor back at other world sizes, whole, by FSDP rows and
// by ZeRO-style flat ranges.
func TestRoundTripWorldSizes(t *testing.T) {
	leaves := specLeaves(t)
	for _, saveWorld := range []int{1, 2, 3, 4} {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("w%d", saveWorld))
		if _, err := SaveStateDict(dir, specStateDict(t), saveWorld, Options{SaveID: "test"}); err != nil {
			t.Fatal(err)
		}
		c, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, lf := range leaves {
			whole, isTensor := lf.Value.(*ptfile.Tensor)
			if !isTensor {
				v, err := c.ReadValue(lf.Key, ptfile.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if describe(v) != describe(lf.Value) {
					t.Fatalf("saved on %d: %s is %s, want %s", saveWorld, lf.Key, describe(v), describe(lf.Value))
				}
				continue
			}
			got, err := c.ReadTensor(lf.Key)
			if err != nil {
				t.Fatal(err)
			}
			if describe(got) != describe(whole) {
				t.Fatalf("saved on %d: %s is %s, want %s", saveWorld, lf.Key, describe(got), describe(whole))
			}
			for _, world := range []int{1, 2, 3, 5} {
				for r := range world {
					rows, ok, err := c.ReadRows(lf.Key, world, r)
					if err != nil {
						t.Fatal(err)
					}
					b, wantOK := RowChunk(whole.Shape, world, r)
					if ok != wantOK {
						t.Fatalf("%s rank %d of %d: ok %v", lf.Key, r, world, ok)
					}
					if ok && describe(rows) != wantBox(t, whole, b) {
						t.Fatalf("saved on %d, read on %d: %s rank %d: %s, want %s", saveWorld, world, lf.Key, r, describe(rows), wantBox(t, whole, b))
					}
				}
			}
			n := Numel(whole.Shape)
			all, _ := whole.Bytes()
			es := whole.DType.Size()
			for s := int64(0); s <= n; s += 2 {
				for e := s; e <= n; e += 3 {
					got, err := c.ReadFlat(lf.Key, s, e)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, all[s*es:e*es]) {
						t.Fatalf("%s [%d, %d): %x, want %x", lf.Key, s, e, got, all[s*es:e*es])
					}
				}
			}
		}
		sd, err := c.StateDict(ptfile.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if describe(sd) != describe(specStateDict(t)) {
			t.Fatalf("saved on %d: state dict\n%s\nwant\n%s", saveWorld, describe(sd), describe(specStateDict(t)))
		}
		c.Close()
	}
}

// TestZeROPartitions saves tensors as ZeRO-style flat partitions (each
// rank a contiguous range of every tensor, cut inside rows) and reads
// them by FSDP rows.
func TestZeROPartitions(t *testing.T) {
	whole := specTensor("float32", []int64{5, 3}, 9)
	cuts := []int64{0, 4, 11, 15} // three ranks
	ranks := make([][]WriteItem, 3)
	for r := range 3 {
		for _, b := range FlatBoxes(whole.Shape, cuts[r], cuts[r+1]) {
			part := boxBytes(t, whole, b)
			ranks[r] = append(ranks[r], TensorChunk("w", whole.Shape, b.Offsets, ptfile.NewTensor(ptfile.Float32, b.Sizes, part)))
		}
	}
	dir := t.TempDir()
	m, err := Save(dir, ranks, Options{})
	if err != nil {
		t.Fatal(err)
	}
	it, _ := m.Item("w")
	// [0, 4): row 0 and 1 element of row 1; [4, 11): 2 of row 1, row 2, 2
	// of row 3; [11, 15): 1 of row 3 and row 4.
	if len(it.Tensor.Chunks) != 7 {
		t.Fatalf("%d chunks, want 7 (2 + 3 + 2 boxes)", len(it.Tensor.Chunks))
	}
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for r := range 2 {
		rows, _, err := c.ReadRows("w", 2, r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := RowChunk(whole.Shape, 2, r)
		if describe(rows) != wantBox(t, whole, b) {
			t.Fatalf("rank %d: %s, want %s", r, describe(rows), wantBox(t, whole, b))
		}
	}
}
