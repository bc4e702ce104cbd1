package stformat

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// file writes a safetensors file by hand: header JSON padded with spaces
// to a multiple of 8, then data.
func file(t *testing.T, path, header string, data []byte) {
	t.Helper()
	for len(header)%8 != 0 {
		header += " "
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(append(b, header...), data...)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRead: F32, BF16 and F16 values decode exactly (values with
// known bit patterns: 1.5 = 0x3fc00000, bf16 -2 = 0xc000, f16 0.5 =
// 0x3800, f16 smallest subnormal 0x0001 = 2^-24).
func TestRead(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "model.safetensors")
	var data []byte
	data = binary.LittleEndian.AppendUint32(data, 0x3fc00000)
	data = binary.LittleEndian.AppendUint16(data, 0xc000)
	data = binary.LittleEndian.AppendUint16(data, 0x3800)
	data = binary.LittleEndian.AppendUint16(data, 0x0001)
	file(t, p, `{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]},"c":{"dtype":"F16","shape":[2],"data_offsets":[6,10]}}`, data)
	ts, md, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]float32{}
	for n, v := range ts {
		got[n] = v.Values
	}
	want := map[string][]float32{"a": {1.5}, "b": {-2}, "c": {0.5, 1.0 / (1 << 24)}}
	if d := cmp.Diff(want, got); d != "" || md["format"] != "pt" {
		t.Errorf("values (-want +got):\n%s metadata %v", d, md)
	}
}

// TestReadDir: a sharded directory is read through its index, and an
// index that disagrees with its files is an error naming what.
func TestReadDir(t *testing.T) {
	f32 := binary.LittleEndian.AppendUint32(nil, 0x3f800000)
	for _, tc := range []struct {
		name, index, want string
	}{
		{"good", `{"metadata":{"total_size":8},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}}`, ""},
		{"swapped", `{"weight_map":{"x":"b.safetensors","y":"a.safetensors"}}`, `holds "x", which the index puts in "b.safetensors"`},
		{"missing", `{"weight_map":{"x":"a.safetensors","y":"b.safetensors","z":"b.safetensors"}}`, `puts "z" in b.safetensors, which does not hold it`},
		{"size", `{"metadata":{"total_size":12},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}}`, "total_size 12"},
		{"no file", `{"weight_map":{"x":"a.safetensors","y":"c.safetensors"}}`, "c.safetensors"},
	} {
		dir := t.TempDir()
		file(t, filepath.Join(dir, "a.safetensors"), `{"x":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, f32)
		file(t, filepath.Join(dir, "b.safetensors"), `{"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, f32)
		os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(tc.index), 0o644)
		ts, err := ReadDir(dir)
		switch {
		case tc.want == "" && (err != nil || len(ts) != 2 || ts["y"].Values[0] != 1):
			t.Errorf("%s: %v %v", tc.name, ts, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}
