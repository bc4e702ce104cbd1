package dcp

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dszero/dszero/ptfile"
)

// TestByteLayout checks the files of a two-rank save by hand: the names,
// blobs back to back from offset 0 (values before tensors), each a zip
// archive with torch.save's entries under archive/, and .metadata a
// protocol-2 pickle of torch's Metadata class.
func TestByteLayout(t *testing.T) {
	dir := t.TempDir()
	ranks := [][]WriteItem{
		{TensorChunk("w", []int64{3, 2}, []int64{0, 0}, ptfile.FromFloat32([]int64{2, 2}, []float32{1, 2, 3, 4})), ValueItem("lr", 0.5)},
		{TensorChunk("w", []int64{3, 2}, []int64{2, 0}, ptfile.FromFloat32([]int64{1, 2}, []float32{5, 6}))},
	}
	if _, err := Save(dir, ranks, Options{SaveID: "id", CheckpointID: "ck"}); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if s := strings.Join(got, " "); s != ".metadata __0_0.distcp __1_0.distcp" {
		t.Fatalf("files: %s", s)
	}
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lr, _ := c.Meta.Item("lr")
	w, _ := c.Meta.Item("w")
	data, _ := os.ReadFile(filepath.Join(dir, "__0_0.distcp"))
	// Rank 0's file: the value first (though listed second), then its chunk.
	if lr.Bytes.Offset != 0 || w.Tensor.Chunks[0].Loc.Offset != lr.Bytes.Length ||
		w.Tensor.Chunks[0].Loc.Offset+w.Tensor.Chunks[0].Loc.Length != int64(len(data)) {
		t.Fatalf("rank 0 blobs: value at %+v, chunk at %+v, file %d bytes", *lr.Bytes, w.Tensor.Chunks[0].Loc, len(data))
	}
	if c.Meta.Items[0].FQN != "w" || c.Meta.Items[1].FQN != "lr" {
		t.Fatalf("items in %s, %s: want the ranks' order", c.Meta.Items[0].FQN, c.Meta.Items[1].FQN)
	}
	for _, l := range []Location{*lr.Bytes, w.Tensor.Chunks[0].Loc} {
		blob := data[l.Offset : l.Offset+l.Length]
		if !bytes.HasPrefix(blob, []byte("PK\x03\x04")) {
			t.Fatalf("blob at %d: %x", l.Offset, blob[:4])
		}
		zr, err := zip.NewReader(bytes.NewReader(blob), int64(len(blob)))
		if err != nil {
			t.Fatal(err)
		}
		var entries []string
		for _, f := range zr.File {
			entries = append(entries, f.Name)
		}
		want := "archive/data.pkl archive/byteorder archive/version"
		if l == w.Tensor.Chunks[0].Loc {
			want = "archive/data.pkl archive/byteorder archive/data/0 archive/version"
			// The chunk's storage is exactly its 4 floats, little-endian.
			f, _ := zr.Open("archive/data/0")
			var b [16]byte
			n, _ := f.Read(b[:])
			if n != 16 || binary.LittleEndian.Uint32(b[12:]) != 0x40800000 { // 4.0
				t.Fatalf("chunk storage: %x", b[:n])
			}
		}
		if s := strings.Join(entries, " "); s != want {
			t.Fatalf("blob at %d: entries %s, want %s", l.Offset, s, want)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, ".metadata"))
	head := "\x80\x02ctorch.distributed.checkpoint.metadata\nMetadata\n"
	if !bytes.HasPrefix(md, []byte(head)) {
		t.Fatalf(".metadata starts %q", md[:min(len(md), len(head))])
	}
	for _, s := range []string{"TensorStorageMetadata", "ChunkStorageMetadata", "BytesStorageMetadata", "MetadataIndex",
		"torch.distributed.checkpoint.filesystem\n_StorageInfo", "torch.serialization\n_get_layout", "torch.strided",
		"_MEM_FORMAT_ENCODING", "__1_0.distcp", "1.0.0"} {
		if !bytes.Contains(md, []byte(s)) {
			t.Errorf(".metadata lacks %q", s)
		}
	}
	if c.Meta.SaveID != "id" || c.Meta.CheckpointID != "ck" || c.Meta.Version != Version {
		t.Fatalf("storage meta: %q %q %q", c.Meta.SaveID, c.Meta.CheckpointID, c.Meta.Version)
	}
	if w.Tensor.Chunks[1].Loc.Path != "__1_0.distcp" || w.Tensor.Chunks[1].Loc.Offset != 0 {
		t.Fatalf("rank 1's chunk at %+v", w.Tensor.Chunks[1].Loc)
	}
}

// writeMeta writes a hand-made Metadata over a directory's blobs.
func writeMeta(t *testing.T, dir string, m *Metadata) {
	t.Helper()
	b, err := m.marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetadataFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRefuses corrupts a good checkpoint in each way Open and the
// reads must catch, and checks the error says what is wrong.
func TestOpenRefuses(t *testing.T) {
	base := t.TempDir()
	good := func() (string, *Metadata) {
		dir, err := os.MkdirTemp(base, "c")
		if err != nil {
			t.Fatal(err)
		}
		m, err := Save(dir, [][]WriteItem{
			{TensorChunk("w", []int64{4, 2}, []int64{0, 0}, ptfile.FromFloat32([]int64{2, 2}, []float32{1, 2, 3, 4})), ValueItem("lr", 0.5)},
			{TensorChunk("w", []int64{4, 2}, []int64{2, 0}, ptfile.FromFloat32([]int64{2, 2}, []float32{5, 6, 7, 8}))},
		}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return dir, m
	}
	cases := []struct {
		name   string
		break_ func(dir string, m *Metadata)
		want   string
		read   bool // the error comes from reading w, not from Open
	}{
		{"no metadata", func(dir string, m *Metadata) { os.Remove(filepath.Join(dir, MetadataFile)) }, "has no .metadata", false},
		{"overlap", func(dir string, m *Metadata) {
			m.Items[0].Tensor.Chunks[1].Offsets = []int64{1, 0}
			writeMeta(t, dir, m)
		}, "overlap", false},
		{"gap", func(dir string, m *Metadata) {
			m.Items[0].Tensor.Chunks = m.Items[0].Tensor.Chunks[:1]
			writeMeta(t, dir, m)
		}, "missing part of the tensor", false},
		{"outside", func(dir string, m *Metadata) {
			m.Items[0].Tensor.Chunks[1].Offsets = []int64{3, 0}
			writeMeta(t, dir, m)
		}, "reaches outside", false},
		{"path leaves the directory", func(dir string, m *Metadata) {
			m.Items[0].Tensor.Chunks[1].Loc.Path = "../__1_0.distcp"
			writeMeta(t, dir, m)
		}, "not a blob of a file in the checkpoint directory", false},
		{"missing file", func(dir string, m *Metadata) { os.Remove(filepath.Join(dir, "__1_0.distcp")) }, "__1_0.distcp", false},
		{"truncated file", func(dir string, m *Metadata) {
			os.Truncate(filepath.Join(dir, "__1_0.distcp"), 10)
		}, "truncated", false},
		{"not an archive", func(dir string, m *Metadata) {
			p := filepath.Join(dir, "__1_0.distcp")
			b, _ := os.ReadFile(p)
			copy(b, "XXXX")
			os.WriteFile(p, b, 0o644)
		}, "not a torch.save archive", true},
		{"flipped byte", func(dir string, m *Metadata) {
			p := filepath.Join(dir, "__1_0.distcp")
			b, _ := os.ReadFile(p)
			i := bytes.Index(b, []byte{0, 0, 0xa0, 0x40}) // 5.0
			b[i+3] ^= 1
			os.WriteFile(p, b, 0o644)
		}, "CRC-32", true},
		{"wrong dtype", func(dir string, m *Metadata) {
			m.Items[0].Tensor.DType = ptfile.BFloat16
			writeMeta(t, dir, m)
		}, "holds a float32[2 2] tensor; .metadata says the chunk at [0 0] is bfloat16[2 2]", true},
		{"blob of another item", func(dir string, m *Metadata) {
			m.Items[0].Tensor.Chunks[1].Loc = *m.Items[1].Bytes
			writeMeta(t, dir, m)
		}, "holds a float where the chunk at [2 0] of w goes", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, m := good()
			c.break_(dir, m)
			ck, err := Open(dir)
			if err == nil && c.read {
				_, err = ck.ReadTensor("w")
				ck.Close()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

// TestMetadataAllowList checks that .metadata is read through the
// allow-list: a pickle calling os.system is refused by name, nothing runs.
func TestMetadataAllowList(t *testing.T) {
	dir := t.TempDir()
	evil := []byte("\x80\x02cos\nsystem\nX\x0a\x00\x00\x00touch pwnd\x85R.")
	os.WriteFile(filepath.Join(dir, MetadataFile), evil, 0o644)
	_, err := Open(dir)
	if err == nil || !strings.Contains(err.Error(), "class os.system is not allowed") {
		t.Fatalf("error %v", err)
	}
	if _, err := os.Stat("pwnd"); err == nil {
		t.Fatal("the pickle ran")
	}
	// A Metadata of an unexpected shape is an error naming what is wrong.
	pkl, _ := ptfile.Pickle(obj(mdModule, clsMetadata, ptfile.DictOf("state_dict_metadata", ptfile.List{})))
	os.WriteFile(filepath.Join(dir, MetadataFile), pkl, 0o644)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "storage_data") {
		t.Fatalf("shape: %v", err)
	}
}

// TestWriteMetadataRefuses checks the coordinator's checks: chunks that do
// not tile, a value saved twice, disagreeing sizes.
func TestWriteMetadataRefuses(t *testing.T) {
	chunk := func(off int64) WriteItem {
		return TensorChunk("w", []int64{4}, []int64{off}, ptfile.FromFloat32([]int64{2}, []float32{1, 2}))
	}
	cases := []struct {
		ranks [][]WriteItem
		want  string
	}{
		{[][]WriteItem{{chunk(0)}, {chunk(1)}}, "overlap"},
		{[][]WriteItem{{chunk(0)}, {}}, "missing part"},
		{[][]WriteItem{{ValueItem("v", 1)}, {ValueItem("v", 1)}}, "saved by rank 0 and again by rank 1"},
		{[][]WriteItem{{chunk(0)}, {TensorChunk("w", []int64{5}, []int64{2}, ptfile.FromFloat32([]int64{2}, []float32{1, 2}))}}, "float32[5]"},
		{[][]WriteItem{{TensorChunk("w", []int64{4}, []int64{3}, ptfile.FromFloat32([]int64{2}, []float32{1, 2}))}}, "reaches outside"},
		{[][]WriteItem{{ValueItem("t", ptfile.FromFloat32([]int64{1}, []float32{1}))}}, "use TensorChunk"},
	}
	for i, c := range cases {
		_, err := Save(filepath.Join(t.TempDir(), "d"), c.ranks, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("case %d: error %v, want %q", i, err, c.want)
		}
	}
}
