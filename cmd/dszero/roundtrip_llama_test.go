package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dszero/dszero/internal/stformat"
	"github.com/dszero/dszero/model/llama"
	"github.com/google/go-cmp/cmp"
)

// TestLlamaRoundTrip: a transformers-layout directory (model/llama's
// llama3 case, as save_pretrained lays it out: seven shards and their
// index, an old rotary_emb.inv_freq buffer, tokenizer files,
// generation_config.json) trains 10 steps at stage 3 on two ranks, each
// rank reading its slices of the shards, and --save-model writes it back:
//
//   - every written file parses by the safetensors format's rules and the
//     index agrees with the shards (package stformat, not dszero's reader);
//   - the tensors are the source's (without the buffer), under the same
//     Hugging Face names and shapes, float32 as trained, the weights
//     changed by training; sharded above --max-shard-size;
//   - config.json reads back to the source's configuration, the tokenizer
//     files and generation_config.json are copied byte for byte;
//   - dszero export --format hf of the run's DeepSpeed checkpoint writes
//     the same tensors bit for bit;
//   - loading the written directory again and saving it after a step at
//     learning rate 0 gives the same weights bit for bit.
func TestLlamaRoundTrip(t *testing.T) {
	src := filepath.Join("..", "..", "model", "llama", "testdata", "llama3")
	tmp := t.TempDir()
	out, ck, exp, again := filepath.Join(tmp, "out"), filepath.Join(tmp, "ck"), filepath.Join(tmp, "export"), filepath.Join(tmp, "again")
	z3 := llamaConfig(t, tmp, 3, 2, 1)
	if code, o, e := runCLI("train", "--model", src, "--data", "random", "--seq", "16", "--steps", "10", "--nproc", "2", "--quiet", "--blas", "gonum",
		"--deepspeed", z3, "--save", ck, "--save-model", out, "--max-shard-size", "20KB"); code != 0 {
		t.Fatalf("train: exit %d\n%s%s", code, o, e)
	}
	before, err := stformat.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	delete(before, "model.layers.0.self_attn.rotary_emb.inv_freq")
	after, err := stformat.ReadDir(out)
	if err != nil {
		t.Fatalf("the written directory: %v", err)
	}
	if d := cmp.Diff(names(before), names(after)); d != "" {
		t.Fatalf("tensor names (-source +written):\n%s", d)
	}
	files := map[string]bool{}
	changed := 0
	for n, b := range before {
		a := after[n]
		files[a.File] = true
		if !slices.Equal(a.Shape, b.Shape) || a.DType != "F32" {
			t.Errorf("%s: written %s %v, source %s %v", n, a.DType, a.Shape, b.DType, b.Shape)
		}
		if !slices.Equal(a.Values, b.Values) {
			changed++
		}
	}
	if changed < len(before)-1 {
		t.Errorf("only %d of %d tensors changed in 10 steps of training", changed, len(before))
	}
	if len(files) < 3 {
		t.Errorf("the weights went into %d files; above --max-shard-size 20KB they are sharded", len(files))
	}
	cs, err := llama.ReadConfig(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cw, err := llama.ReadConfig(filepath.Join(out, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(cs, cw); d != "" {
		t.Errorf("config.json (-source +written):\n%s", d)
	}
	cj := jsonKeys(t, filepath.Join(out, "config.json"))
	for k, want := range map[string]string{"model_type": `"llama"`, "torch_dtype": `"float32"`, "tie_word_embeddings": "false"} {
		if got := string(cj[k]); got != want {
			t.Errorf("config.json %s = %s, want %s", k, got, want)
		}
	}
	if !strings.Contains(string(cj["architectures"]), `"LlamaForCausalLM"`) {
		t.Errorf("config.json architectures = %s", cj["architectures"])
	}
	for _, f := range []string{"generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} {
		a, err1 := os.ReadFile(filepath.Join(src, f))
		b, err2 := os.ReadFile(filepath.Join(out, f))
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("%s not copied through (%v, %v)", f, err1, err2)
		}
	}

	if code, o, e := runCLI("export", ck, exp, "--format", "hf", "--model", src, "--max-shard-size", "20KB"); code != 0 {
		t.Fatalf("export: exit %d\n%s%s", code, o, e)
	}
	exported, err := stformat.ReadDir(exp)
	if err != nil {
		t.Fatalf("the exported directory: %v", err)
	}
	for n, a := range after {
		if !slices.Equal(exported[n].Values, a.Values) {
			t.Errorf("%s: the export of the checkpoint differs from --save-model's", n)
		}
	}
	if entries, _ := os.ReadDir(exp); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), ".") }) {
		t.Errorf("export left scratch files in %s: %v", exp, entries)
	}

	lr0 := filepath.Join(tmp, "lr0.json")
	os.WriteFile(lr0, []byte(`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0, "weight_decay": 0}}}`), 0o644)
	if code, o, e := runCLI("train", "--model", out, "--data", "random", "--seq", "16", "--steps", "1", "--quiet", "--blas", "gonum",
		"--deepspeed", lr0, "--save-model", again); code != 0 {
		t.Fatalf("train --model of the written directory: exit %d\n%s%s", code, o, e)
	}
	reloaded, err := stformat.ReadDir(again)
	if err != nil {
		t.Fatal(err)
	}
	for n, a := range after {
		if !slices.Equal(reloaded[n].Values, a.Values) {
			t.Errorf("%s: loaded and saved again (lr 0), the weights changed", n)
		}
	}
	_, flat, err := llama.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	l := cw.Layout()
	for _, s := range l.Specs {
		if !slices.Equal(flat[s.Offset:s.Offset+s.Numel], after[s.Name].Values) {
			t.Errorf("%s: llama.ReadDir and stformat read different values", s.Name)
		}
	}
}

func names(ts map[string]stformat.Tensor) []string {
	var n []string
	for k := range ts {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

// TestExportLlamaErrors: export --format hf says what it needs, and a
// checkpoint exported as another model than it was trained as names the
// first tensor that does not fit.
func TestExportLlamaErrors(t *testing.T) {
	tmp := t.TempDir()
	ck := filepath.Join(tmp, "ck")
	if code, o, e := runCLI("train", "--model", "tiny-llama", "--data", "random", "--seq", "16", "--steps", "1", "--quiet", "--blas", "gonum",
		"--deepspeed", llamaConfig(t, tmp, 3, 2, 1), "--nproc", "2", "--save", ck); code != 0 {
		t.Fatalf("train: exit %d\n%s%s", code, o, e)
	}
	out := filepath.Join(tmp, "out")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--format", "hf"}, 2, "--format hf needs --model"},
		{[]string{"--format", "onnx", "--model", "tiny-llama"}, 2, `--format "onnx": want hf or safetensors`},
		{[]string{"--format", "safetensors", "--model", "tiny-llama"}, 1, "leave --model out for one model.safetensors"},
		{[]string{"--format", "hf", "--model", "tiny-qwen3"}, 1, "is not a parameter of this model"},
		{[]string{"--format", "hf", "--model", "tiny-llama", "--max-shard-size", "5"}, 1, "give a unit"},
	} {
		code, o, e := runCLI(append([]string{"export", ck, out}, tc.args...)...)
		if code != tc.code || !strings.Contains(e, tc.want) {
			t.Errorf("%v: exit %d, want %d and %q:\n%s%s", tc.args, code, tc.code, tc.want, o, e)
		}
	}
	// --model alone is the Hugging Face directory too.
	if code, o, e := runCLI("export", ck, out, "--model", "tiny-llama"); code != 0 || !strings.Contains(o, "a Hugging Face LlamaForCausalLM directory") {
		t.Errorf("export --model tiny-llama: exit %d\n%s%s", code, o, e)
	}
	if _, err := stformat.ReadDir(out); err != nil {
		t.Error(err)
	}
}
