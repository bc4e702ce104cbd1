package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model/llama"
)

// exportFlags are dszero export's flags for Hugging Face directories.
type exportFlags struct {
	format   string // "", "safetensors" or "hf"
	maxShard string
}

func registerExportFlags(fs *flag.FlagSet, f *exportFlags) {
	fs.StringVar(&f.format, "format", "", `"hf": write a Hugging Face directory that transformers' from_pretrained loads (needs --model): for the Llama family config.json, generation_config.json, the weights under their Hugging Face names sharded above --max-shard-size, and --model DIR's tokenizer files; "safetensors": one model.safetensors (the default; with --model a GPT-2 directory)`)
	fs.StringVar(&f.maxShard, "max-shard-size", "5GB", "with --format hf for the Llama family: split the weights into shards above this size, as save_pretrained's max_shard_size")
}

// exportHF is dszero export --format hf (or --model alone) of a
// Llama-family model; handled is false when the flags ask for something else (a GPT-2 directory or a
// bare safetensors file, which runExport writes).
func exportHF(f exportFlags, modelArg, in, out, tag, dtype string, stdout, stderr io.Writer) (handled bool, code int) {
	fail := func(format string, a ...any) (bool, int) {
		fmt.Fprintf(stderr, "dszero export: "+format+"\n", a...)
		return true, 1
	}
	_, _, isLlama, _ := llamaModel(modelArg)
	switch f.format {
	case "":
		if !isLlama {
			return false, 0
		}
	case "safetensors":
		if isLlama {
			return fail("--format safetensors with --model %s: --model writes the Hugging Face directory (--format hf); leave --model out for one model.safetensors under the checkpoint's names", modelArg)
		}
		return false, 0
	case "hf":
	default:
		fmt.Fprintf(stderr, "dszero export: --format %q: want hf or safetensors\n", f.format)
		return true, 2
	}
	if modelArg == "" {
		fmt.Fprintln(stderr, "dszero export: --format hf needs --model (the preset or Hugging Face directory the checkpoint was trained with), for config.json and the tensors' names")
		return true, 2
	}
	cfg, dir, ok, err := llamaModel(modelArg)
	switch {
	case err != nil:
		return fail("--model %s: %v", modelArg, err)
	case !ok:
		return false, 0 // a GPT: --model writes its Hugging Face GPT-2 directory
	}
	torch := map[string]string{"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[dtype]
	maxShard, err := parseShardSize(f.maxShard)
	if err != nil {
		return fail("%v", err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fail("%v", err)
	}
	// The consolidated fp32 weights go to a scratch file first (streamed,
	// a parameter at a time), then into save_pretrained's layout.
	tmp, err := os.MkdirTemp(out, ".dszero-export-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(tmp)
	l := cfg.WithDefaults().Layout()
	st, err := checkpoint.Export(in, filepath.Join(tmp, "model.safetensors"), checkpoint.ExportOptions{Tag: tag, DType: "F32",
		Rename: func(names []string, shapes [][]int) ([]string, []bool, error) {
			for i, n := range names {
				k, ok := l.Index(n)
				if !ok || !slices.Equal(l.Specs[k].Shape, shapes[i]) {
					return nil, nil, fmt.Errorf("--model %s: the checkpoint's %s %v is not a parameter of this model (%d parameters in %d tensors): give --model the model the checkpoint was trained with",
						modelArg, n, shapes[i], l.Numel, len(l.Specs))
				}
			}
			return names, make([]bool, len(names)), nil
		}})
	if err != nil {
		return fail("%v", err)
	}
	w, err := llama.OpenWeights(tmp, cfg)
	if err != nil {
		return fail("--model %s: %v", modelArg, err)
	}
	defer w.Close()
	if err := llama.SaveDir(out, cfg, w.ReadRange, llama.SaveOptions{DType: torch, MaxShardBytes: maxShard, Source: dir}); err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(stdout, "%s/%s: ZeRO stage %d, %d rank(s), %s\n", in, st.Tag, st.Stage, st.World, mem.FormatBytes(st.CheckpointB))
	fmt.Fprintf(stdout, "→ %s: a Hugging Face %s directory, %d parameters in %s\n", out, cfg.Family.Architecture(), st.Elements, torch)
	return true, 0
}
