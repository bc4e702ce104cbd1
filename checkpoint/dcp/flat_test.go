package dcp

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/dszero/dszero/ptfile"
)

// flatItems saves the fixture as a ZeRO engine does (checkpoint's
// SaveSharded): the tensors of one or more dimensions laid end to end in
// one flat buffer, cut into world equal partitions, each rank writing the
// boxes of each tensor its partition covers (FlatBoxes), chunks that
// start and end inside rows.
func flatItems(t *testing.T, world int) ([][]WriteItem, []Mapping) {
	leaves, err := Flatten(specStateDict(t))
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, lf := range leaves {
		if x, ok := lf.Value.(*ptfile.Tensor); ok && len(x.Shape) > 0 {
			total += Numel(x.Shape)
		}
	}
	part := (total + int64(world) - 1) / int64(world)
	ranks := make([][]WriteItem, world)
	maps := make([]Mapping, len(leaves))
	var off int64
	for i, lf := range leaves {
		maps[i] = Mapping{Key: lf.Key, Path: lf.Path}
		// A value, or a 0-dimensional tensor, goes to the rank whose
		// partition the flat buffer has reached, so that the ranks name the
		// items in the state dict's order.
		at := min(int(off/part), world-1)
		x, ok := lf.Value.(*ptfile.Tensor)
		switch {
		case !ok:
			ranks[at] = append(ranks[at], ValueItem(lf.Key, lf.Value))
			continue
		case len(x.Shape) == 0:
			ranks[at] = append(ranks[at], WholeTensor(lf.Key, x))
			continue
		}
		data, err := x.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		n, es := Numel(x.Shape), x.DType.Size()
		for r := range world {
			lo, hi := max(int64(r)*part, off)-off, min(int64(r+1)*part, off+n)-off
			if lo >= hi {
				continue
			}
			for _, b := range FlatBoxes(x.Shape, lo, hi) {
				k := Numel(b.Sizes)
				ranks[r] = append(ranks[r], TensorChunk(lf.Key, x.Shape, b.Offsets, ptfile.NewTensor(x.DType, b.Sizes, bytes.Clone(data[lo*es:(lo+k)*es]))))
				lo += k
			}
		}
		off += n
	}
	return ranks, maps
}

// TestDszeroFlatGolden: testdata/dszero/flat3, the fixture in ZeRO's flat
// chunks over 3 ranks, reads back as the fixture and is what the writer
// writes now. scripts/gpu/run.sh's dcp-interop step has torch's dcp.load
// read it, as it reads dszero/w3's row chunks.
func TestDszeroFlatGolden(t *testing.T) {
	golden := filepath.Join("testdata", "dszero", "flat3")
	dir := golden
	if !*update {
		dir = filepath.Join(t.TempDir(), "flat3")
	}
	ranks, maps := flatItems(t, 3)
	if !cutsRows(ranks) {
		t.Fatal("the flat partitions cut no row: the fixture does not test partial-row chunks")
	}
	o := Options{SaveID: "00000000-0000-4000-8000-000000000001", CheckpointID: "dszero/flat3", Mappings: maps}
	if _, err := Save(dir, ranks, o); err != nil {
		t.Fatal(err)
	}
	checkFixture(t, golden)
	for _, name := range []string{MetadataFile, FileName(0), FileName(1), FileName(2)} {
		want, err := os.ReadFile(filepath.Join(golden, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s differs from what the writer writes now: go test ./checkpoint/dcp -run TestDszeroFlatGolden -update", filepath.Join(golden, name))
		}
	}
}

// cutsRows reports whether some chunk of a tensor of two or more
// dimensions holds part of a row only.
func cutsRows(ranks [][]WriteItem) bool {
	for _, items := range ranks {
		for _, it := range items {
			if it.Chunk != nil && len(it.Size) > 1 && it.Chunk.Shape[len(it.Size)-1] < it.Size[len(it.Size)-1] {
				return true
			}
		}
	}
	return false
}
