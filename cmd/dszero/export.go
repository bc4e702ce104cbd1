package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model/gpt"
)

// runExport is dszero export: zero_to_fp32, streaming. With --model the
// output is a Hugging Face GPT-2 directory, what transformers'
// GPT2LMHeadModel.from_pretrained loads (and --save-model writes): the
// weights under Hugging Face's names, Conv1D weights transposed, and a
// config.json whose torch_dtype is the dtype written.
func runExport(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dszero export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tag := fs.String("tag", "", "the checkpoint's tag (default: latest)")
	dtype := fs.String("dtype", "fp32", "dtype written: fp32, bf16 or fp16")
	modelArg := fs.String("model", "", "write a Hugging Face GPT-2 directory for this GPT (a preset or a directory with config.json): Hugging Face names and config.json, which transformers and dszero train --model OUT_DIR load")
	var hf exportFlags
	registerExportFlags(fs, &hf)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	dt := map[string]string{"fp32": "F32", "bf16": "BF16", "fp16": "F16"}[*dtype]
	if len(pos) != 2 || dt == "" {
		fmt.Fprintln(stderr, "usage: dszero export CKPT_DIR OUT_DIR [--tag TAG] [--dtype fp32|bf16|fp16] [--model PRESET|DIR] [--format hf|safetensors]")
		return 2
	}
	in, out := pos[0], pos[1]
	if handled, code := exportHF(hf, *modelArg, in, out, *tag, *dtype, stdout, stderr); handled {
		return code
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "dszero export: "+format+"\n", a...)
		return 1
	}
	opts := checkpoint.ExportOptions{Tag: *tag, DType: dt}
	var mc gpt.Config
	if *modelArg != "" {
		if mc, err = modelConfig(*modelArg); err != nil {
			return fail("%v", err)
		}
		opts.Rename = func(names []string, shapes [][]int) ([]string, []bool, error) {
			return gpt2HFNames(mc, *modelArg, names, shapes)
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fail("%v", err)
	}
	st, err := checkpoint.Export(in, filepath.Join(out, "model.safetensors"), opts)
	if err != nil {
		return fail("%v", err)
	}
	if *modelArg != "" {
		torchDtype := map[string]string{"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[*dtype]
		if err := gpt.WriteConfigDType(filepath.Join(out, "config.json"), mc, torchDtype); err != nil {
			return fail("%v", err)
		}
	}
	check := "checked against its manifests"
	if !st.ManifestCheck {
		check = "no manifest (a DeepSpeed checkpoint): checked by its files' CRC-32s"
	}
	fmt.Fprintf(stdout, "%s/%s: ZeRO stage %d, %d rank(s), %s (%s)\n", in, st.Tag, st.Stage, st.World, mem.FormatBytes(st.CheckpointB), check)
	fmt.Fprintf(stdout, "→ %s: %d parameters, %d elements in %s (%s)%s\n", filepath.Join(out, "model.safetensors"), st.Params, st.Elements,
		strings.ToLower(*dtype), mem.FormatBytes(st.WrittenB), map[bool]string{true: " + config.json, Hugging Face GPT-2 names", false: ""}[*modelArg != ""])
	return 0
}

// gpt2HFNames maps a checkpoint's parameters to the Hugging Face GPT-2 names
// of model cfg (--model arg), and says which to transpose: dszero's own
// names (blocks.0.attn.qkv.weight, stored (out, in)) become Hugging
// Face's (h.0.attn.c_attn.weight, whose Conv1D stores (in, out)); a
// checkpoint of a Hugging Face model already has them (with or without
// the "transformer." prefix) and is written as it is. Every parameter of
// the model must be there once, with its shape.
func gpt2HFNames(cfg gpt.Config, arg string, names []string, shapes [][]int) ([]string, []bool, error) {
	l := cfg.WithDefaults().Layout()
	type want struct {
		hf    string
		shape []int // as the checkpoint holds it
		tr    bool
	}
	byName := map[string]want{}
	for _, sp := range l.Specs {
		hf, tr := gpt.HFName(sp.Name)
		byName[sp.Name] = want{hf, sp.Shape, tr}
		hfShape := sp.Shape
		if tr {
			hfShape = []int{sp.Shape[1], sp.Shape[0]}
		}
		byName[hf] = want{hf, hfShape, false}
		byName["transformer."+hf] = want{"transformer." + hf, hfShape, false}
	}
	out, tr := make([]string, len(names)), make([]bool, len(names))
	seen := map[string]bool{}
	for i, n := range names {
		w, ok := byName[n]
		if !ok || !slices.Equal(shapes[i], w.shape) {
			what := "is not a parameter of"
			if ok {
				what = fmt.Sprintf("has shape %v; it is %v in", shapes[i], w.shape)
			}
			return nil, nil, fmt.Errorf("--model %s: the checkpoint's %s %s this model (%d parameters in %d tensors): give --model the model the checkpoint was trained with, or export without --model to keep the checkpoint's names",
				arg, n, what, l.Numel, len(l.Specs))
		}
		hf := strings.TrimPrefix(w.hf, "transformer.")
		if seen[hf] {
			return nil, nil, fmt.Errorf("--model %s: the checkpoint holds %s twice (as %s)", arg, hf, n)
		}
		seen[hf] = true
		out[i], tr[i] = w.hf, w.tr
	}
	if len(seen) != len(l.Specs) {
		var missing []string
		for _, sp := range l.Specs {
			if hf, _ := gpt.HFName(sp.Name); !seen[hf] {
				missing = append(missing, sp.Name)
			}
		}
		return nil, nil, fmt.Errorf("--model %s: the checkpoint lacks %d of this model's tensors (%s): give --model the model the checkpoint was trained with",
			arg, len(missing), strings.Join(missing[:min(len(missing), 4)], ", "))
	}
	return out, tr, nil
}
