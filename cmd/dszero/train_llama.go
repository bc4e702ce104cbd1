package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dszero/dszero/data"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/llama"
	"github.com/dszero/dszero/tokenizer"
	"github.com/dszero/dszero/train"
)

// llamaModelTypes are the config.json model_type values of the Llama
// family (package model/llama); "gpt2" is package gpt's.
var llamaModelTypes = []string{"llama", "qwen2", "qwen3", "mistral"}

// llamaFlags are dszero train's flags for Llama-family models and their
// fine-tuning data.
type llamaFlags struct {
	tokenizer     string // --tokenizer: a directory with tokenizer.json, or the file
	packing       bool
	truncate      bool
	trainOnPrompt bool
	maxShard      string // --max-shard-size, save_pretrained's max_shard_size
}

// registerLlamaFlags adds the Llama family's flags to dszero train's set.
func registerLlamaFlags(fs *flag.FlagSet, f *llamaFlags) {
	fs.StringVar(&f.tokenizer, "tokenizer", "", "the tokenizer of --data records: a directory with tokenizer.json (and tokenizer_config.json for the chat template), or the file (default: the --model directory's)")
	fs.BoolVar(&f.packing, "packing", false, "pack several --data records into each --seq row (trl's packing, best-fit decreasing), attention and positions restarting at each record")
	fs.BoolVar(&f.truncate, "truncation", false, "cut a --data record longer than --seq to its first --seq tokens instead of failing (trl's truncation_mode keep_start)")
	fs.BoolVar(&f.trainOnPrompt, "train-on-prompt", false, "put the loss on every token of --data records, prompts included (default: only the responses / assistant turns)")
	fs.StringVar(&f.maxShard, "max-shard-size", "5GB", "with --save-model for a Llama-family model: split the weights into shards above this size, as save_pretrained's max_shard_size")
}

// llamaJob is what dszero train holds for a Llama-family model: its
// configuration, the checkpoint directory it came from and that
// directory's open weights (each rank reads only its slices).
type llamaJob struct {
	cfg      llama.Config
	dir      string         // the Hugging Face directory; "" for a preset
	weights  *llama.Weights // dir's weights
	maxShard string         // --max-shard-size
	dtype    device.DType   // the ds_config's precision, which --save-model writes
}

var _ trainModel = (*llamaJob)(nil)

// peekModelType is config.json's model_type ("" when the file has none).
func peekModelType(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var c struct {
		ModelType string `json:"model_type"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return "", fmt.Errorf("%s: not a JSON object: %w", path, err)
	}
	return c.ModelType, nil
}

// llamaModel reads --model arg when it is the Llama family's: a preset of
// model/llama, or a directory whose config.json has a Llama-family
// model_type (dir is then arg). ok is false when arg is neither (a GPT's
// preset or GPT-2 directory, or a mistyped name).
func llamaModel(arg string) (cfg llama.Config, dir string, ok bool, err error) {
	st, err := os.Stat(arg)
	if err != nil || !st.IsDir() {
		if !slices.Contains(llama.PresetNames(), arg) {
			return cfg, "", false, nil
		}
		cfg, err = llama.Preset(arg)
		return cfg, "", true, err
	}
	cfgPath := filepath.Join(arg, "config.json")
	mt, err := peekModelType(cfgPath)
	if err != nil {
		return cfg, "", true, fmt.Errorf("%w (a Hugging Face model directory has config.json)", err)
	}
	switch {
	case mt == "gpt2" || mt == "":
		return cfg, "", false, nil // package gpt reads a config.json without model_type as GPT-2's
	case !slices.Contains(llamaModelTypes, mt):
		return cfg, "", true, fmt.Errorf("%s has model_type %q; dszero trains gpt2 and the Llama family (%s)", cfgPath, mt, strings.Join(llamaModelTypes, ", "))
	}
	cfg, err = llama.ReadConfig(cfgPath)
	return cfg, arg, true, err
}

// llamaLayout is the flat-buffer layout of --model arg when it is a
// Llama-family model (for config explain's units and estimate's model
// states); ok is false when it is not one.
func llamaLayout(arg string) (l *model.Layout, ok bool, err error) {
	cfg, _, ok, err := llamaModel(arg)
	if !ok || err != nil {
		if err != nil {
			err = fmt.Errorf("--model %s: %w", arg, err)
		}
		return nil, ok, err
	}
	lay := cfg.WithDefaults().Layout()
	return &lay, true, nil
}

// loadLlama is --model for the Llama family (llamaModel), the
// directory's weights opened for each rank to read its slices. It
// reports whether the argument was one (false: it is a GPT's).
func (j *trainJob) loadLlama() (bool, error) {
	arg := j.f.modelArg
	cfg, dir, ok, err := llamaModel(arg)
	if !ok || err != nil {
		if err != nil {
			err = fmt.Errorf("--model %s: %w", arg, err)
		}
		return ok, err
	}
	if err := checkWrapClasses(j.fp.WrapClasses, cfg.Family); err != nil {
		return true, err
	}
	lm := &llamaJob{cfg: cfg, maxShard: j.f.llama.maxShard, dtype: j.plan.Precision.DType}
	j.m = lm
	if dir == "" {
		return true, nil
	}
	w, err := llama.OpenWeights(dir, cfg)
	if err != nil {
		return true, fmt.Errorf("--model %s: %w", arg, err)
	}
	j.closers = append(j.closers, func() { w.Close() })
	lm.cfg, lm.dir, lm.weights = w.Config(), dir, w
	return true, nil
}

// checkWrapClasses refuses an FSDP transformer_layer_cls_to_wrap naming a
// class the model does not have, as accelerate does ("Could not find the
// transformer layer class ... in the model"). The model's classes are its
// family's (LlamaDecoderLayer, LlamaRMSNorm, ...) and torch's Embedding
// and Linear; [GPT2Block] alone is fsdpconfig's default when the setup
// names none, and means one unit per decoder layer as well.
func checkWrapClasses(classes []string, fam llama.Family) error {
	if slices.Equal(classes, []string{"GPT2Block"}) {
		return nil
	}
	prefix := strings.TrimSuffix(fam.DecoderLayerClass(), "DecoderLayer")
	for _, c := range classes {
		if !strings.HasPrefix(c, prefix) && c != "Embedding" && c != "Linear" {
			return fmt.Errorf("the FSDP setup's transformer_layer_cls_to_wrap names %s, which is not a class of this %s model (accelerate: Could not find the transformer layer class %s in the model): name %s",
				c, fam, c, fam.DecoderLayerClass())
		}
	}
	return nil
}

func (l *llamaJob) Builder() model.Builder      { return l.cfg }
func (l *llamaJob) Shape() (vocab, context int) { return l.cfg.Vocab, l.cfg.MaxSeq() }
func (l *llamaJob) NumParams() int              { return l.cfg.NumParams() }

func (l *llamaJob) InitRange() func([]float32, int) error {
	if l.weights == nil {
		return nil
	}
	return l.weights.ReadRange
}

func (l *llamaJob) RecordsTokenizer() (string, error) { return l.dir, nil }

// loadRecords is --data for fine-tuning records (JSON, JSON Lines,
// Parquet) of a Llama-family model: tokenized with --tokenizer (or the
// model directory's tokenizer.json and chat template), masked to the
// responses and cut into rows of --seq tokens.
func (j *trainJob) loadRecords() error {
	f := j.f
	dir, err := j.m.RecordsTokenizer()
	if err != nil {
		return fmt.Errorf("--data %s: %w", f.dataPath, err)
	}
	src := f.llama.tokenizer
	if src == "" {
		if dir == "" {
			return fmt.Errorf("--data %s: records are tokenized with the model's tokenizer, and the preset %s has none: give --tokenizer DIR (a directory with tokenizer.json), or --model a Hugging Face directory", f.dataPath, f.modelArg)
		}
		src = dir
	}
	tok, err := tokenizer.Load(src)
	if err != nil {
		return fmt.Errorf("--data %s: %w", f.dataPath, err)
	}
	opt := data.SFTOptions{Seq: j.T, Packing: f.llama.packing, Truncate: f.llama.truncate, TrainOnPrompt: f.llama.trainOnPrompt}
	d, err := data.LoadSFT(f.dataPath, tok, opt)
	if err != nil {
		return err
	}
	if vocab, _ := j.m.Shape(); int(d.MaxID) >= vocab {
		return fmt.Errorf("--data %s: the tokenizer %s gives token ids up to %d but the model's vocabulary is %d; give the model's own tokenizer", f.dataPath, tok.Source(), d.MaxID, vocab)
	}
	j.sft = d
	fmt.Fprintf(j.diagw, "dszero train: %s\n", d.Stats.Describe(j.T))
	return nil
}

// batches are the micro-batches train.Run reads: the fine-tuning rows,
// or the corpus's windows.
func (j *trainJob) batches() (train.Batches, error) {
	if j.sft == nil {
		return train.Tokens(j.loader, j.T), nil
	}
	// Under Ulysses the loop reads data-parallel shard r/sp for rank r.
	sp := max(1, int(j.plan.SequenceParallelSize))
	l := data.Layout{B: j.B, T: j.T, GAS: j.gas, World: int(j.plan.DataParallelSize())}
	sb := &sftBatches{loaders: map[int]*data.SFTLoader{}}
	for _, r := range j.ranks {
		if sb.loaders[r/sp] != nil {
			continue
		}
		ld, err := data.NewSFTLoader(j.sft, l, true, j.f.seed)
		if err != nil {
			return nil, err
		}
		sb.loaders[r/sp] = ld
	}
	return sb, nil
}

// sftBatches hands each rank its fine-tuning micro-batches, each rank
// through its own loader (a loader is not safe for concurrent use). Each
// micro-batch carries the step's LossDenom (HF's num_items_in_batch), so
// train.Run weighs every target of the global batch the same.
type sftBatches struct {
	loaders map[int]*data.SFTLoader // by rank; written before the ranks start
}

func (s *sftBatches) Batch(step, micro, rank int, b *model.Batch) error {
	ld, ok := s.loaders[rank]
	if !ok {
		return fmt.Errorf("no data loader for rank %d", rank)
	}
	if b.Tokens == nil {
		nb := ld.NewBatch()
		b.Tokens, b.Targets, b.Positions = nb.Tokens, nb.Targets, nb.Positions
	}
	ld.Micro(step, micro, rank, b)
	return nil
}

// dataName is what the run's header calls the data, and its tokens.
func (j *trainJob) dataName() (string, int64) {
	if j.sft != nil {
		return j.f.dataPath, j.sft.Stats.Tokens
	}
	return j.corpus.Name, int64(j.corpus.Len())
}

// SaveModel writes transformers' layout for the Llama family:
// config.json, generation_config.json, the weights sharded above
// --max-shard-size in the ds_config's precision, the source directory's
// tokenizer files.
func (l *llamaJob) SaveModel(dir string, final []float32) (string, error) {
	maxShard, err := parseShardSize(l.maxShard)
	if err != nil {
		return "", err
	}
	opt := llama.SaveOptions{DType: torchDTypeOf(l.dtype), MaxShardBytes: maxShard, Source: l.dir}
	read := func(dst []float32, lo int) error { copy(dst, final[lo:]); return nil }
	if err := llama.SaveDir(dir, l.cfg, read, opt); err != nil {
		return "", err
	}
	return "a Hugging Face " + l.cfg.Family.Architecture() + " directory, " + opt.DType, nil
}

// torchDTypeOf is the torch dtype a model trained in a ds_config's
// precision is saved in, as save_pretrained writes the model's own dtype.
func torchDTypeOf(ds device.DType) string {
	switch ds {
	case device.BF16:
		return "bfloat16"
	case device.F16:
		return "float16"
	}
	return "float32"
}

// parseShardSize reads a max_shard_size: "5GB", "500MB", "2GiB" (a unit
// is required; HF's units are decimal).
func parseShardSize(s string) (int64, error) {
	n, err := parseBudget("--max-shard-size", s)
	if err != nil {
		return 0, err
	}
	if n < 1 {
		return 0, fmt.Errorf("--max-shard-size %s: want a positive size, e.g. 5GB", s)
	}
	return n, nil
}
