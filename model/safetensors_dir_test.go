package model_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/internal/modeltest"
)

// tensorOf is an F32 tensor of n bytes/4 elements with values from base.
func tensorOf(name string, n int, base float32) model.Tensor {
	d := make([]float32, n)
	for i := range d {
		d[i] = base + float32(i)
	}
	return model.Tensor{Name: name, Shape: []int{n}, Data: d}
}

// TestWriteSafetensorsDirSplitsLikeHF checks the shard split against
// huggingface_hub's split_torch_state_dict_into_shards on sizes that
// exercise both of its rules: a shard closes when the next tensor would
// take it over the limit, and a tensor over the limit gets a shard of
// its own, appended as it is met (so it comes before the open shard).
func TestWriteSafetensorsDirSplitsLikeHF(t *testing.T) {
	dir := t.TempDir()
	// 10, 30, 25, 5, 50, 10 floats of 4 bytes; limit 160 bytes (40 floats).
	sizes := []int{10, 30, 25, 5, 50, 10}
	var ts []model.Tensor
	for i, n := range sizes {
		ts = append(ts, tensorOf(string(rune('a'+i)), n, float32(100*i)))
	}
	files, err := model.WriteSafetensorsDir(dir, ts, 160, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}
	if d := cmp.Diff(wantFiles, files); d != "" {
		t.Fatalf("files (-want +got):\n%s", d)
	}
	b, err := os.ReadFile(filepath.Join(dir, model.SafetensorsIndexName))
	if err != nil {
		t.Fatal(err)
	}
	var idx model.SafetensorsIndex
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": wantFiles[0], "b": wantFiles[0], "e": wantFiles[1], "c": wantFiles[2], "d": wantFiles[2], "f": wantFiles[2]}
	if d := cmp.Diff(want, idx.WeightMap); d != "" {
		t.Errorf("weight_map (-want +got):\n%s", d)
	}
	if idx.Metadata["total_size"] != float64(4*130) {
		t.Errorf("total_size %v, want %d", idx.Metadata["total_size"], 4*130)
	}
	if !strings.Contains(string(b), "\n  \"metadata\": {\n    \"total_size\": 520\n  },") {
		t.Errorf("index is not written as save_pretrained writes it (sorted keys, two-space indent):\n%s", b)
	}
	for _, f := range files {
		if err := modeltest.CheckSafetensorsFormat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}

	// Read back by name, across shards.
	d, err := model.OpenSafetensorsDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range ts {
		got := make([]float32, 3)
		if err := d.ReadFloat32Range(tn.Name, 2, got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tn.Data[2:5]) {
			t.Errorf("%s[2:5] = %v, want %v", tn.Name, got, tn.Data[2:5])
		}
	}
	d.Close()

	// A later save into one file removes the shards and the index.
	files, err = model.WriteSafetensorsDir(dir, ts, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(files, []string{model.SafetensorsName}) || !slices.Equal(names, []string{model.SafetensorsName}) {
		t.Errorf("after a single-file save: wrote %v, directory holds %v", files, names)
	}
}

func TestOpenSafetensorsDirErrors(t *testing.T) {
	write := func(t *testing.T, dir, name string, ts ...model.Tensor) {
		t.Helper()
		if err := model.WriteSafetensors(filepath.Join(dir, name), ts, nil); err != nil {
			t.Fatal(err)
		}
	}
	index := func(t *testing.T, dir string, wm map[string]string) {
		t.Helper()
		b, _ := json.Marshal(model.SafetensorsIndex{WeightMap: wm})
		if err := os.WriteFile(filepath.Join(dir, model.SafetensorsIndexName), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string
	}{
		{"empty", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "pytorch_model.bin"), []byte("x"), 0o644)
		}, []string{"no model.safetensors or model.safetensors.index.json", "pytorch_model.bin"}},
		{"bad index", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, model.SafetensorsIndexName), []byte("{"), 0o644)
		}, []string{model.SafetensorsIndexName}},
		{"empty weight_map", func(t *testing.T, dir string) { index(t, dir, nil) }, []string{"weight_map is missing or empty"}},
		{"path in weight_map", func(t *testing.T, dir string) {
			index(t, dir, map[string]string{"a": "../x.safetensors"})
		}, []string{`weight_map["a"] = "../x.safetensors" is not a file name`}},
		{"missing shard", func(t *testing.T, dir string) {
			index(t, dir, map[string]string{"a": "s1.safetensors"})
		}, []string{"names s1.safetensors"}},
		{"index and shards disagree", func(t *testing.T, dir string) {
			write(t, dir, "s1.safetensors", tensorOf("a", 2, 0), tensorOf("b", 2, 0))
			write(t, dir, "s2.safetensors", tensorOf("b", 2, 0), tensorOf("c", 2, 0))
			index(t, dir, map[string]string{"a": "s2.safetensors", "c": "s2.safetensors", "z": "s1.safetensors"})
		}, []string{`tensor "b" is in both s1.safetensors and s2.safetensors`, `weight_map puts "a" in s2.safetensors, but it is in s1.safetensors`,
			`tensor "b" of s1.safetensors is not in the weight_map`, `weight_map puts "z" in s1.safetensors, which has no such tensor`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			_, err := model.OpenSafetensorsDir(dir)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v does not mention %q", err, w)
				}
			}
		})
	}
}

// TestCheckSafetensorsFormat checks that the format checker the writers'
// tests rely on rejects what the reference library rejects.
func TestCheckSafetensorsFormat(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	if err := model.WriteSafetensors(good, []model.Tensor{tensorOf("a", 3, 0), tensorOf("b", 2, 0)}, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if err := modeltest.CheckSafetensorsFormat(good); err != nil {
		t.Fatalf("our own file: %v", err)
	}
	b, _ := os.ReadFile(good)
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
		want string
	}{
		{"trailing byte", func(b []byte) []byte { return append(b, 0) }, "cover"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-4] }, "cover"},
		{"gap", func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `"data_offsets":[12,20]`, `"data_offsets":[16,24]`, 1))
		}, "starts at byte 16"},
		{"bad dtype", func(b []byte) []byte { return []byte(strings.Replace(string(b), `"F32"`, `"F33"`, 1)) }, "dtype"},
	} {
		p := filepath.Join(dir, tc.name)
		os.WriteFile(p, tc.edit(slices.Clone(b)), 0o644)
		if err := modeltest.CheckSafetensorsFormat(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
}
