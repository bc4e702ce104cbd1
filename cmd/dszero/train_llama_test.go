package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/data"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model/llama"
	"github.com/dszero/dszero/train"
)

// llamaConfig writes a ds_config for a stage, micro-batch and
// accumulation, fp32 AdamW, and returns its path.
func llamaConfig(t *testing.T, dir string, stage, micro, gas int) string {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("z%d_m%d_g%d.json", stage, micro, gas))
	cfg := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": %d, "steps_per_print": 1,
	  "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.0}},
	  "zero_optimization": {"stage": %d, "stage3_param_persistence_threshold": 0}}`, micro, gas, stage)
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runLog runs dszero train with a --json-log and returns the per-step
// losses, in step order.
func runLog(t *testing.T, args ...string) []float64 {
	t.Helper()
	log := filepath.Join(t.TempDir(), "log.jsonl")
	code, out, errs := runCLI(append(args, "--quiet", "--json-log", log)...)
	if code != 0 {
		t.Fatalf("%v: exit %d\n%s%s", args, code, out, errs)
	}
	l := logLosses(t, log)
	got := make([]float64, len(l))
	for s, v := range l {
		got[s-1] = v
	}
	return got
}

// TestTrainLlamaPresetStages: a Llama-family preset trains at every ZeRO
// stage, on one and two ranks, with the same losses as stage 0 on one
// rank (fp32: the stages differ only in summation order).
func TestTrainLlamaPresetStages(t *testing.T) {
	dir := t.TempDir()
	for _, preset := range []string{"tiny-llama", "tiny-qwen3"} {
		base := []string{"train", "--model", preset, "--data", "random", "--seq", "16", "--steps", "3", "--blas", "gonum"}
		one := runLog(t, append(base, "--deepspeed", llamaConfig(t, dir, 0, 4, 1))...)
		if len(one) != 3 || math.IsNaN(one[0]) || one[0] < 4 || one[0] > 7 {
			t.Fatalf("%s: stage 0 losses %v: want 3 near ln 256 = 5.5", preset, one)
		}
		for _, tc := range []struct{ stage, nproc int }{{1, 2}, {2, 2}, {3, 1}, {3, 2}} {
			got := runLog(t, append(base, "--deepspeed", llamaConfig(t, dir, tc.stage, 4/tc.nproc, 1), "--nproc", fmt.Sprint(tc.nproc))...)
			for i := range one {
				if math.Abs(got[i]-one[i]) > 1e-5*math.Abs(one[i]) {
					t.Errorf("%s stage %d × %d ranks: step %d loss %.9g, stage 0 %.9g", preset, tc.stage, tc.nproc, i+1, got[i], one[i])
				}
			}
		}
	}
}

// gunzipTo writes the gzip file src, decompressed, to dst.
func gunzipTo(t *testing.T, src, dst string) {
	t.Helper()
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyFile copies src to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// qwen3Dir writes a Hugging Face directory of a tiny randomly initialized
// Qwen3 with the real Qwen3 tokenizer (tokenizer/testdata/qwen3) and its
// chat template.
func qwen3Dir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	tk := filepath.Join("..", "..", "tokenizer", "testdata", "qwen3")
	gunzipTo(t, filepath.Join(tk, "tokenizer.json.gz"), filepath.Join(dir, "tokenizer.json"))
	copyFile(t, filepath.Join(tk, "tokenizer_config.json"), filepath.Join(dir, "tokenizer_config.json"))
	cfg := llama.Config{Family: llama.Qwen3, Vocab: 151936, Hidden: 16, Intermediate: 32, Layers: 2, Heads: 2, KVHeads: 1,
		HeadDim: 8, MaxPositions: 512, Eps: 1e-6, Tied: true, MaxWindowLayers: 2, EOSTokenIDs: []int{151645}}.WithDefaults()
	l := cfg.Layout()
	params := make([]float32, l.Numel)
	cfg.InitRange(&l, 7, params, 0)
	read := func(dst []float32, lo int) error { copy(dst, params[lo:]); return nil }
	if err := llama.SaveDir(dir, cfg, read, llama.SaveOptions{DType: "float32"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTrainLlamaRecordsLossNormalization: chat records train a Qwen3
// directory through its tokenizer and chat template, the loss only on the
// assistant turns, normalized as HF's Trainer does with num_items_in_batch:
// over every target of the step's global batch. So the same global batch
// split as 2 samples × 1 micro-step × 1 rank, 1 × 2 accumulation steps, or
// 1 × 1 × 2 ranks (at stages 0 and 3) trains to the same losses; a mean per
// micro-batch, averaged, would not (the records' assistant turns differ in
// length).
func TestTrainLlamaRecordsLossNormalization(t *testing.T) {
	mdir, dir := qwen3Dir(t), t.TempDir()
	recs := filepath.Join(dir, "chat.jsonl")
	var b strings.Builder
	for i := range 8 {
		answer := strings.Repeat(fmt.Sprintf("word%d ", i), 1+3*(i%3))
		fmt.Fprintf(&b, `{"messages": [{"role": "user", "content": "Question %d?"}, {"role": "assistant", "content": %q}]}`+"\n", i, answer)
	}
	if err := os.WriteFile(recs, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"train", "--model", mdir, "--data", recs, "--seq", "64", "--steps", "3", "--blas", "gonum"}
	ref := runLog(t, append(base, "--deepspeed", llamaConfig(t, dir, 0, 2, 1))...)
	if len(ref) != 3 || math.IsNaN(ref[0]) || ref[0] < 8 || ref[0] > 15 {
		t.Fatalf("losses %v: want 3 near ln 151936 = 11.9", ref)
	}
	for _, tc := range []struct {
		name                     string
		stage, micro, gas, nproc int
	}{
		{"accumulation", 0, 1, 2, 1},
		{"two ranks", 0, 1, 1, 2},
		{"stage 3, two ranks", 3, 1, 1, 2},
		{"stage 2, accumulation", 2, 1, 2, 1},
	} {
		got := runLog(t, append(base, "--deepspeed", llamaConfig(t, dir, tc.stage, tc.micro, tc.gas), "--nproc", fmt.Sprint(tc.nproc))...)
		for i := range ref {
			if math.Abs(got[i]-ref[i]) > 1e-5*ref[i] {
				t.Errorf("%s: step %d loss %.9g, 2 samples in one micro-batch %.9g", tc.name, i+1, got[i], ref[i])
			}
		}
	}
}

// TestTrainLlamaPacking: packed, the 8 chat records share one row of 512
// tokens, attention and positions restarting at each; unpacked, each has
// its own row of 64. With the whole set in every step's global batch
// (micro-batch 1 packed, 8 unpacked), both train on the same targets, so
// every step's loss agrees: packing changes no sample's loss.
func TestTrainLlamaPacking(t *testing.T) {
	mdir, dir := qwen3Dir(t), t.TempDir()
	recs := filepath.Join(dir, "chat.jsonl")
	var b strings.Builder
	for i := range 8 {
		fmt.Fprintf(&b, `{"messages": [{"role": "user", "content": "Question %d?"}, {"role": "assistant", "content": %q}]}`+"\n", i, strings.Repeat("yes ", 1+i))
	}
	if err := os.WriteFile(recs, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"train", "--model", mdir, "--data", recs, "--steps", "3", "--blas", "gonum"}
	unpacked := runLog(t, append(base, "--seq", "64", "--deepspeed", llamaConfig(t, dir, 0, 8, 1))...)
	packed := runLog(t, append(base, "--seq", "512", "--packing", "--deepspeed", llamaConfig(t, dir, 0, 1, 1))...)
	for i := range unpacked {
		if math.Abs(packed[i]-unpacked[i]) > 1e-5*unpacked[i] {
			t.Errorf("step %d: packed loss %.9g, unpacked %.9g", i+1, packed[i], unpacked[i])
		}
	}
}

// TestTrainLlamaErrors: what cannot train says why, naming the file, the
// record or the flag to give.
func TestTrainLlamaErrors(t *testing.T) {
	dir := t.TempDir()
	recs := filepath.Join(dir, "recs.jsonl")
	os.WriteFile(recs, []byte(`{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}`+"\n"), 0o644)
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"instruction": "say hi", "output": "hi"}`+"\n"+`{"instruction": "say bye"}`+"\n"), 0o644)
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, nil, 0o644)
	long := filepath.Join(dir, "long.jsonl")
	os.WriteFile(long, []byte(`{"text": "`+strings.Repeat("lorem ipsum ", 100)+`"}`+"\n"), 0o644)
	phi := filepath.Join(dir, "phi")
	os.MkdirAll(phi, 0o755)
	os.WriteFile(filepath.Join(phi, "config.json"), []byte(`{"model_type": "phi3"}`), 0o644)
	noWeights := filepath.Join(dir, "noweights")
	os.MkdirAll(noWeights, 0o755)
	os.WriteFile(filepath.Join(noWeights, "config.json"), []byte(`{"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}`), 0o644)
	wrapLlama := filepath.Join(dir, "fsdp.json")
	os.WriteFile(wrapLlama, []byte(`{"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}`), 0o644)
	mdir := qwen3Dir(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "tiny", "--data", recs}, "train a Llama-family model"},
		{[]string{"--model", "tiny-llama", "--data", recs}, "the preset tiny-llama has none: give --tokenizer DIR"},
		{[]string{"--model", phi}, `model_type "phi3"; dszero trains gpt2 and the Llama family`},
		{[]string{"--model", noWeights}, "model.safetensors"},
		{[]string{"--model", mdir, "--data", bad}, "bad.jsonl"},
		{[]string{"--model", mdir, "--data", bad}, "record 1"},
		{[]string{"--model", mdir, "--data", empty}, "empty.jsonl"},
		{[]string{"--model", mdir, "--data", long, "--seq", "32"}, "long.jsonl"},
		{[]string{"--model", "tiny-qwen3", "--fsdp", "full_shard auto_wrap", "--fsdp_config", wrapLlama}, "names LlamaDecoderLayer, which is not a class of this qwen3 model"},
		{[]string{"--model", "tiny-qwen3", "--tokenizer", mdir, "--data", recs}, "vocabulary is 256; give the model's own tokenizer"},
		{[]string{"--model", mdir, "--data", recs, "--save-model", filepath.Join(dir, "out"), "--max-shard-size", "12"}, "give a unit"},
	} {
		code, out, errs := runCLI(append([]string{"train", "--quiet", "--steps", "1", "--blas", "gonum"}, tc.args...)...)
		if code == 0 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, want an error with %q:\n%s%s", tc.args, code, tc.want, out, errs)
		}
	}
}

// keys of a JSON object, for messages.
func jsonKeys(t *testing.T, path string) map[string]json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// TestLlamaStage3ReadsOnlySlices: with --model DIR each rank reads the
// checkpoint by range (j.initRange is the directory's Weights.ReadRange):
// at stage 3 on two ranks the ranks together read the model once, no read
// larger than a rank's half, so no rank ever holds the full model; at
// stage 0 each rank reads all of it.
func TestLlamaStage3ReadsOnlySlices(t *testing.T) {
	src := filepath.Join("..", "..", "model", "llama", "testdata", "llama3")
	cfg, err := llama.ReadConfig(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := llama.OpenWeights(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	numel := w.Config().Layout().Numel
	eng, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		t.Fatal(err)
	}
	for _, stage := range []int{0, 3} {
		plan, diags := dsconfig.Compile("z.json", []byte(fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"},
			"zero_optimization": {"stage": %d, "stage3_param_persistence_threshold": 0}}`, stage)), dsconfig.Options{WorldSize: 2})
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		ld, err := data.NewLoader(data.Random(cfg.Vocab, 4096, 1), data.Layout{B: 2, T: 16, GAS: 1, World: 2})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		read, largest := 0, 0
		devs := make([]train.Device, 2)
		for r := range devs {
			devs[r] = train.Device{Acct: mem.NewAccountant(r), Gemm: eng}
		}
		_, err = train.Run(train.Config{Plan: plan, Model: w.Config(), Batches: train.Tokens(ld, 16), SeqLen: 16, Steps: 1, Devices: devs,
			InitRange: func(dst []float32, lo int) error {
				mu.Lock()
				read, largest = read+len(dst), max(largest, len(dst))
				mu.Unlock()
				return w.ReadRange(dst, lo)
			}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case stage == 0 && read != 2*numel:
			t.Errorf("stage 0: the ranks read %d elements, want 2 × %d", read, numel)
		case stage == 3 && (read != numel || largest > (numel+1)/2):
			t.Errorf("stage 3: the ranks read %d elements (want the model's %d once), the largest read %d (want ≤ half)", read, numel, largest)
		}
	}
}

// TestLlamaEstimateAndExplain: dszero estimate and config explain take a
// Llama-family --model: Qwen2.5-0.5B has 494,032,768 parameters (its
// model card's count, tied embeddings counted once) and stage 3 gathers
// one unit per decoder layer.
func TestLlamaEstimateAndExplain(t *testing.T) {
	code, out, errs := runCLI("estimate", "--model", "qwen2.5-0.5b", "--num_gpus", "2")
	if code != 0 || !strings.Contains(out, "qwen2.5-0.5b: 494,032,768 parameters, largest layer model.embed_tokens") {
		t.Errorf("estimate: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCLI("config", "explain", "../../examples/ds_config_zero3.json", "--world-size", "2", "--model", "tiny-qwen3")
	if code != 0 || !strings.Contains(out, "1 model.layers.0 ") || !strings.Contains(out, "2 model.layers.1 ") {
		t.Errorf("config explain: exit %d\n%s%s", code, out, errs)
	}
}
