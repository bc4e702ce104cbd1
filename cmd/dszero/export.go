package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model/gpt"
)

// runExport is dszero export: zero_to_fp32, streaming.
func runExport(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dszero export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tag := fs.String("tag", "", "the checkpoint's tag (default: latest)")
	dtype := fs.String("dtype", "fp32", "dtype written: fp32, bf16 or fp16")
	modelArg := fs.String("model", "", "also write config.json for this GPT (a preset or a directory with config.json), so that dszero train --model OUT_DIR loads the result")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	dt := map[string]string{"fp32": "F32", "bf16": "BF16", "fp16": "F16"}[*dtype]
	if len(pos) != 2 || dt == "" {
		fmt.Fprintln(stderr, "usage: dszero export CKPT_DIR OUT_DIR [--tag TAG] [--dtype fp32|bf16|fp16] [--model PRESET|DIR]")
		return 2
	}
	in, out := pos[0], pos[1]
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "dszero export: "+format+"\n", a...)
		return 1
	}
	var mc gpt.Config
	if *modelArg != "" {
		if mc, err = modelConfig(*modelArg); err != nil {
			return fail("%v", err)
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fail("%v", err)
	}
	st, err := checkpoint.Export(in, filepath.Join(out, "model.safetensors"), checkpoint.ExportOptions{Tag: *tag, DType: dt})
	if err != nil {
		return fail("%v", err)
	}
	if *modelArg != "" {
		if err := gpt.WriteConfig(filepath.Join(out, "config.json"), mc); err != nil {
			return fail("%v", err)
		}
	}
	check := "checked against its manifests"
	if !st.ManifestCheck {
		check = "no manifest (a DeepSpeed checkpoint): read unchecked"
	}
	fmt.Fprintf(stdout, "%s/%s: ZeRO stage %d, %d rank(s), %s (%s)\n", in, st.Tag, st.Stage, st.World, mem.FormatBytes(st.CheckpointB), check)
	fmt.Fprintf(stdout, "→ %s: %d parameters, %d elements in %s (%s)%s\n", filepath.Join(out, "model.safetensors"), st.Params, st.Elements,
		strings.ToLower(*dtype), mem.FormatBytes(st.WrittenB), map[bool]string{true: " + config.json", false: ""}[*modelArg != ""])
	return 0
}
