package llama

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/internal/modeltest"
)

// TestReadRangeInPieces reads the sharded llama3 checkpoint range by range,
// in cuts that cross tensor and shard boundaries, as stage-3 ranks do, and
// compares with the whole read and with each tensor read from its shard.
func TestReadRangeInPieces(t *testing.T) {
	dir := "testdata/llama3"
	cfg, full, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := OpenWeights(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, world := range []int{1, 3, 7} {
		parts := make([]float32, 0, len(full))
		per := (len(full) + world - 1) / world
		for lo := 0; lo < len(full); lo += per {
			p := make([]float32, min(per, len(full)-lo))
			if err := w.ReadRange(p, lo); err != nil {
				t.Fatal(err)
			}
			parts = append(parts, p...)
		}
		if !slices.Equal(parts, full) {
			t.Errorf("world %d: the partitions read differ from the whole", world)
		}
	}
	st, err := model.OpenSafetensorsDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if len(st.Files) != 7 {
		t.Fatalf("the llama3 checkpoint has %d files, want 7 shards", len(st.Files))
	}
	l := cfg.Layout()
	for i, s := range l.Specs {
		want := make([]float32, s.Numel)
		if err := st.ReadFloat32Range(s.Name, 0, want); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(l.View(full, i), want) {
			t.Errorf("%s differs from its shard", s.Name)
		}
	}
	if err := w.ReadRange(make([]float32, 2), len(full)-1); err == nil {
		t.Error("ReadRange past the end succeeded")
	}
}

func TestWeightsDType(t *testing.T) {
	for dir, want := range map[string]string{"llama3": "float32", "qwen3": "bfloat16", "mistral": "float16"} {
		cfg, err := ReadConfig(filepath.Join("testdata", dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		w, err := OpenWeights(filepath.Join("testdata", dir), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := w.DType(); got != want {
			t.Errorf("%s: DType %q, want %q", dir, got, want)
		}
		w.Close()
	}
}

// TestSaveLoadRoundTrip loads the llama3 directory (the layout
// save_pretrained writes: shards, index, config, generation config,
// tokenizer files), saves it and loads the result: the same config and
// the same weights bit for bit, the tokenizer files and
// generation_config.json copied byte for byte, and every weight file
// well-formed by the safetensors rules.
func TestSaveLoadRoundTrip(t *testing.T) {
	src := "testdata/llama3"
	cfg, params, err := ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	read := func(dst []float32, lo int) error { copy(dst, params[lo:]); return nil }
	for _, tc := range []struct {
		name   string
		shard  int64
		shards int
	}{{"sharded", 20000, 6}, {"one file", 0, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			if err := SaveDir(out, cfg, read, SaveOptions{MaxShardBytes: tc.shard, Source: src}); err != nil {
				t.Fatal(err)
			}
			cfg2, params2, err := ReadDir(out)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(cfg, cfg2); d != "" {
				t.Errorf("config after a round trip (-loaded +reloaded):\n%s", d)
			}
			if !slices.Equal(params, params2) {
				t.Error("weights changed in the round trip")
			}
			for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"} {
				a, _ := os.ReadFile(filepath.Join(src, name))
				b, err := os.ReadFile(filepath.Join(out, name))
				if err != nil || !bytes.Equal(a, b) {
					t.Errorf("%s was not copied through (%v)", name, err)
				}
			}
			st, err := model.OpenSafetensorsDir(out)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if len(st.Files) != tc.shards {
				t.Errorf("%d weight files, want %d", len(st.Files), tc.shards)
			}
			for _, f := range st.Files {
				if err := modeltest.CheckSafetensorsFormat(f.Path); err != nil {
					t.Error(err)
				}
				if f.Metadata["format"] != "pt" {
					t.Errorf("%s: metadata %v, transformers wants format pt", f.Path, f.Metadata)
				}
			}
			var j map[string]any
			b, _ := os.ReadFile(filepath.Join(out, "config.json"))
			if err := json.Unmarshal(b, &j); err != nil {
				t.Fatal(err)
			}
			if j["torch_dtype"] != "float32" || j["architectures"].([]any)[0] != "LlamaForCausalLM" {
				t.Errorf("config.json: torch_dtype %v, architectures %v", j["torch_dtype"], j["architectures"])
			}
		})
	}
}

// TestSave16Bit saves float32 weights as bf16 and fp16 and reads them back
// rounded to nearest even; a bf16 checkpoint (qwen3) saved with its own
// dtype comes back bit for bit, tied without lm_head.weight, with a
// generation_config.json derived from the config.
func TestSave16Bit(t *testing.T) {
	cfg, params, err := ReadDir("testdata/packed")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dtype, st string
		round     func([]float32)
	}{{"bfloat16", "BF16", half.RoundBF16}, {"float16", "F16", half.RoundF16}} {
		out := t.TempDir()
		if err := SaveDir(out, cfg, func(dst []float32, lo int) error { copy(dst, params[lo:]); return nil }, SaveOptions{DType: tc.dtype}); err != nil {
			t.Fatal(err)
		}
		cfg2, got, err := ReadDir(out)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(params)
		tc.round(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: weights read back are not the rounded originals", tc.dtype)
		}
		if cfg2.DType != tc.dtype {
			t.Errorf("%s: config.json declares %q", tc.dtype, cfg2.DType)
		}
		f, _ := model.OpenSafetensors(filepath.Join(out, model.SafetensorsName))
		if ti, _ := f.Lookup("lm_head.weight"); ti.DType != tc.st {
			t.Errorf("%s: lm_head.weight stored as %s", tc.dtype, ti.DType)
		}
		f.Close()
	}

	cfg, params, err = ReadDir("testdata/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	m, err := LoadDir("testdata/qwen3", Options{Gemm: modeltest.Gonum(t), Acct: mem.NewAccountant(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out := t.TempDir()
	if err := m.SaveDir(out, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	_, got, err := ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, params) {
		t.Error("a bf16 checkpoint saved in its own dtype changed")
	}
	f, _ := model.OpenSafetensors(filepath.Join(out, model.SafetensorsName))
	if _, ok := f.Lookup("lm_head.weight"); ok {
		t.Error("a tied model's save holds lm_head.weight")
	}
	f.Close()
	b, _ := os.ReadFile(filepath.Join(out, "generation_config.json"))
	var gen map[string]any
	if err := json.Unmarshal(b, &gen); err != nil || gen["bos_token_id"] != 1.0 || gen["eos_token_id"] != 2.0 {
		t.Errorf("generation_config.json %s (%v)", b, err)
	}
}

// TestSaveStreamsInPieces checks that SaveDir reads the flat buffer in
// order, each element once, in pieces no larger than a tensor, and that a
// read error stops the save with the error.
func TestSaveStreamsInPieces(t *testing.T) {
	cfg, _ := Preset("tiny-qwen3")
	l := cfg.Layout()
	next := 0
	read := func(dst []float32, lo int) error {
		if lo != next {
			t.Fatalf("read at %d, want %d", lo, next)
		}
		for i := range dst {
			dst[i] = float32(lo + i)
		}
		next += len(dst)
		return nil
	}
	if err := SaveDir(t.TempDir(), cfg, read, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if next != l.Numel {
		t.Errorf("read %d of %d elements", next, l.Numel)
	}
	errRead := func([]float32, int) error { return modeltest.ErrInjected }
	if err := SaveDir(t.TempDir(), cfg, errRead, SaveOptions{}); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Errorf("a failing read: %v", err)
	}
	if err := SaveDir(t.TempDir(), cfg, read, SaveOptions{DType: "float64"}); err == nil {
		t.Error("saving as float64 succeeded")
	}
}

// TestOpenWeightsErrors writes broken checkpoints and checks that every
// problem is reported, naming the file and tensor.
func TestOpenWeightsErrors(t *testing.T) {
	cfg, params, err := ReadDir("testdata/mistral")
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Layout()
	var ts []model.Tensor
	for i, s := range l.Specs {
		switch s.Name {
		case "model.layers.1.mlp.up_proj.weight":
			continue // missing
		case "model.layers.0.self_attn.k_proj.weight":
			ts = append(ts, model.Tensor{Name: s.Name, Shape: []int{s.Shape[1], s.Shape[0]}, Data: l.View(params, i)})
			continue
		}
		ts = append(ts, model.Tensor{Name: s.Name, Shape: s.Shape, Data: l.View(params, i)})
	}
	ts = append(ts, model.Tensor{Name: "model.layers.0.mlp.experts.0.weight", Shape: []int{2}, Data: []float32{1, 2}})
	dir := t.TempDir()
	if err := model.WriteSafetensors(filepath.Join(dir, model.SafetensorsName), ts, nil); err != nil {
		t.Fatal(err)
	}
	_, err = OpenWeights(dir, cfg)
	for _, w := range []string{
		`model.safetensors: unknown tensor "model.layers.0.mlp.experts.0.weight"`,
		`model.safetensors: tensor "model.layers.0.self_attn.k_proj.weight" has shape [32 8], want [8 32]`,
		`missing tensor "model.layers.1.mlp.up_proj.weight" [64 32]`,
		`model.safetensors: tensor "model.layers.0.self_attn.k_proj.weight"`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not mention %q", err, w)
		}
	}
	if _, _, err := ReadDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("ReadDir of an empty directory: %v", err)
	}
}

// TestTiedCheckpointWithHead: a tied config whose checkpoint also stores
// lm_head.weight (accelerate #3870) reads, the stored head ignored; the
// same checkpoint under an untied config reads lm_head.weight as the head.
func TestTiedCheckpointWithHead(t *testing.T) {
	dir := "testdata/qwen2"
	cfg, params, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Tied || len(params) != cfg.NumParams() {
		t.Fatalf("qwen2 case: tied %v, %d params", cfg.Tied, len(params))
	}
	untied := cfg
	untied.Tied = false
	w, err := OpenWeights(dir, untied)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ul := untied.Layout()
	all := make([]float32, ul.Numel)
	if err := w.ReadRange(all, 0); err != nil {
		t.Fatal(err)
	}
	i, _ := ul.Index("lm_head.weight")
	if !slices.Equal(ul.View(all, i), params[:cfg.Vocab*cfg.Hidden]) {
		t.Error("the stored lm_head.weight is not embed_tokens' copy")
	}
}
