package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/estimate"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/zero"
)

// runEstimate is `dszero estimate`: DeepSpeed's memory estimators and
// dszero's own estimate for a config, before anything runs.
func runEstimate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("dszero estimate", stderr)
	modelArg := fs.String("model", "", "model preset ("+strings.Join(gpt.PresetNames(), ", ")+") or a Hugging Face GPT-2 directory (its config.json)")
	paramsArg := fs.String("params", "", "instead of --model: the total parameters of a hypothetical model, e.g. 7.5e9 or 7.5B")
	largestArg := fs.String("largest-layer", "", "with --params: the most parameters one module holds, for ZeRO-3's estimator, e.g. 65M")
	gpus := fs.Int("num_gpus", 1, "GPUs per node (DeepSpeed's num_gpus_per_node)")
	nodes := fs.Int("num_nodes", 1, "nodes")
	factor := fs.Float64("additional_buffer_factor", estimate.DefaultBufferFactor, "DeepSpeed's slack factor on host memory")
	cfgPath := fs.String("deepspeed", "", "ds_config.json to estimate (default: the embedded default config of dszero train)")
	offload := fs.String("offload", "", "none, cpu or nvme: sets both offload_optimizer and offload_param (overrides the config)")
	offOpt := fs.String("offload_optimizer", "", "none, cpu or nvme (overrides the config)")
	offPar := fs.String("offload_param", "", "none, cpu or nvme, stage 3 (overrides the config)")
	seq := fs.Int("seq", 0, "tokens per sample (default: min(model context, 128), as dszero train)")
	ckpt := fs.Bool("gradient_checkpointing", false, "the run recomputes each block in backward (also on with an activation_checkpointing block)")
	asJSON := fs.Bool("json", false, "write the estimate as JSON: the numbers of the text form, with stable field names")
	hf := hfFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "dszero estimate: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q (flags only; the config goes in --deepspeed)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	in := estimate.Input{Hardware: estimate.Hardware{GPUsPerNode: *gpus, Nodes: *nodes, BufferFactor: *factor}}
	switch {
	case set["model"] && set["params"]:
		return usageErr("--model and --params are both given: --model counts a real model's parameters, --params takes a number; give one")
	case !set["model"] && !set["params"]:
		return usageErr("give --model PRESET|DIR (presets: %s) or --params N", strings.Join(gpt.PresetNames(), ", "))
	case set["largest-layer"] && !set["params"]:
		return usageErr("--largest-layer goes with --params; a --model's largest layer is counted from the model")
	case set["seq"] && !set["model"]:
		return usageErr("--seq needs --model: activations are counted for a GPT model")
	case *gpus < 1:
		return usageErr("--num_gpus %d: want at least 1 GPU per node", *gpus)
	case *nodes < 1:
		return usageErr("--num_nodes %d: want at least 1 node", *nodes)
	case *gpus > maxRanks || *nodes > maxRanks || *gpus**nodes > maxRanks:
		return usageErr("--num_gpus %d × --num_nodes %d: want at most %d GPUs in all", *gpus, *nodes, maxRanks)
	case !(*factor > 0) || math.IsInf(*factor, 0):
		return usageErr("--additional_buffer_factor %g: want a positive factor (DeepSpeed's default is 1.5)", *factor)
	case *offload != "" && (*offOpt != "" || *offPar != ""):
		return usageErr("--offload sets both offload_optimizer and offload_param; give it or --offload_optimizer/--offload_param, not both")
	}
	if *offload != "" {
		*offOpt, *offPar = *offload, *offload
	}
	for _, o := range []struct{ flag, v string }{{"offload_optimizer", *offOpt}, {"offload_param", *offPar}} {
		if o.v != "" && o.v != "none" && o.v != "cpu" && o.v != "nvme" {
			name := o.flag
			if *offload != "" {
				name = "offload"
			}
			return usageErr("--%s %q: want none, cpu or nvme", name, o.v)
		}
	}

	var mcfg gpt.Config
	if l, ok, err := llamaLayout(*modelArg); ok && set["model"] {
		if err != nil {
			return usageErr("%v", err)
		}
		in.Model, in.Layout = *modelArg, l // model states only: the activation estimate is the GPT's
	} else if set["model"] {
		var err error
		if mcfg, err = resolveModel(*modelArg); err != nil {
			return usageErr("--model %v", err)
		}
		l := mcfg.Layout()
		in.Model, in.Layout, in.GPT = *modelArg, &l, &mcfg
		in.SeqLen = *seq
		if !set["seq"] {
			in.SeqLen = min(mcfg.Context, 128)
		}
		if in.SeqLen < 1 || in.SeqLen > mcfg.Context {
			return usageErr("--seq %d: want 1 to %d tokens (the model's context)", in.SeqLen, mcfg.Context)
		}
	} else {
		n, err := parseCount(*paramsArg)
		if err != nil {
			return usageErr("--params %v", err)
		}
		in.Model, in.Params = "--params "+*paramsArg, n
		if set["largest-layer"] {
			if in.LargestLayer, err = parseCount(*largestArg); err != nil {
				return usageErr("--largest-layer %v", err)
			}
			if in.LargestLayer > n {
				return usageErr("--largest-layer %s is more than --params %s: one module holds at most every parameter", *largestArg, *paramsArg)
			}
		}
	}

	// The config, as dszero train would read it for this many ranks.
	plan, diags, note, err := compileDSConfig(*cfgPath, in.Hardware.GPUs(), hf)
	if err != nil {
		fmt.Fprintf(stderr, "dszero estimate: --deepspeed: %v\n", err)
		return 1
	}
	name := plan.File
	if note != "" {
		fmt.Fprintf(stderr, "dszero estimate: note: %s\n", note)
	}
	for _, d := range diags {
		if d.Severity == dsconfig.Error || d.Severity == dsconfig.Warning {
			fmt.Fprintln(stderr, d.String())
		}
	}
	if diags.HasErrors() {
		fmt.Fprintf(stderr, "dszero estimate: %s: the config has errors (see above)\n", name)
		return 1
	}
	if *offOpt != "" {
		plan.Zero.OffloadOptimizer.Device = dsconfig.OffloadDevice(*offOpt)
	}
	if *offPar != "" {
		plan.Zero.OffloadParam.Device = dsconfig.OffloadDevice(*offPar)
	}
	in.Plan = &plan
	in.Checkpoint = *ckpt || plan.ActivationCheckpointing.Present
	in.CPUCheckpoint = in.Checkpoint && plan.ActivationCheckpointing.CPUCheckpointing

	r, err := estimate.Compute(in)
	if err != nil {
		fmt.Fprintf(stderr, "dszero estimate: %v\n", err)
		return 1
	}
	if _, err := zero.CheckPlan(plan); err != nil {
		r.Dszero.Notes = append(r.Dszero.Notes, "dszero train would refuse this config today: "+strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if *asJSON {
		return writeJSON(stdout, stderr, r)
	}
	estimate.WriteText(stdout, r)
	return 0
}

// maxRanks bounds --num_gpus × --num_nodes (far beyond any cluster; it
// keeps the arithmetic away from overflow).
const maxRanks = 1 << 24

// resolveModel reads --model: a directory with a Hugging Face GPT-2
// config.json, else a preset name.
func resolveModel(arg string) (gpt.Config, error) {
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		c, err := gpt.ReadConfig(filepath.Join(arg, "config.json"))
		if err != nil {
			return gpt.Config{}, fmt.Errorf("%s: %w (a Hugging Face GPT-2 directory has a config.json)", arg, err)
		}
		return c, nil
	}
	c, err := gpt.Preset(arg)
	if err != nil {
		return gpt.Config{}, fmt.Errorf("%q is neither a preset (%s) nor a directory", arg, strings.Join(gpt.PresetNames(), ", "))
	}
	return c, nil
}

// parseCount reads a parameter count: 7500000000, 7.5e9, 7.5B, 350M, 65K
// or 1T (decimal multiples). It must be a positive whole number.
func parseCount(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	if n := len(t); n > 0 {
		if m, ok := map[byte]float64{'K': 1e3, 'k': 1e3, 'M': 1e6, 'B': 1e9, 'G': 1e9, 'T': 1e12}[t[n-1]]; ok {
			t, mult = t[:n-1], m
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	v := f * mult
	switch {
	case err != nil || math.IsNaN(v) || math.IsInf(v, 0):
		return 0, fmt.Errorf("%q: want a parameter count such as 7.5e9, 7.5B or 350M", s)
	case v < 1:
		return 0, fmt.Errorf("%q: want at least 1 parameter", s)
	case v > 1<<53:
		return 0, fmt.Errorf("%q: more than 2^53 parameters", s)
	case math.Abs(v-math.Round(v)) > 1e-6: // 1.1M is 1100000.0000000002 in floating point
		return 0, fmt.Errorf("%q is not a whole number of parameters", s)
	}
	return int64(math.Round(v)), nil
}
