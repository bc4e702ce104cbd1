package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/stage3"
)

// parseInterleaved parses flags that may come after positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("dszero config check", stderr)
	world := fs.Int("world-size", 8, "data-parallel world size for the batch arithmetic")
	quiet := fs.Bool("q", false, "print errors only")
	hf := hfFlags(fs)
	files, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	if len(files) == 0 || *world < 1 {
		fmt.Fprintln(stderr, "usage: dszero config check FILE... [--world-size N] [HF flags]")
		return 2
	}
	rejected := 0
	for _, file := range files {
		if isFSDPFile(file) {
			if checkFSDP(fsdpSource{file: file}, worldIfSet(fs, *world), hf.forFSDP(), *quiet, stdout) {
				rejected++
			}
			continue
		}
		plan, diags, note, err := compileDSConfig(file, *world, hf)
		if err != nil {
			fmt.Fprintf(stdout, "%s: error: %v\n", file, err)
			rejected++
			continue
		}
		if note != "" && !*quiet {
			fmt.Fprintf(stdout, "%s: note: %s\n", file, note)
		}
		for _, d := range diags {
			if *quiet && d.Severity != dsconfig.Error {
				continue
			}
			fmt.Fprintln(stdout, d.String())
		}
		if diags.HasErrors() {
			rejected++
			fmt.Fprintf(stdout, "%s: REJECT: %d error(s); DeepSpeed would not start with this config\n", file, diags.Count(dsconfig.Error))
			continue
		}
		fmt.Fprintf(stdout, "%s: ACCEPT: %s", file, summary(plan))
		if n := diags.Count(dsconfig.Warning); n > 0 {
			fmt.Fprintf(stdout, "; %d warning(s)", n)
		}
		if n := diags.Count(dsconfig.Unsupported); n > 0 {
			fmt.Fprintf(stdout, "; %d feature(s) dszero does not run yet", n)
		}
		fmt.Fprintln(stdout)
	}
	if rejected > 0 {
		return 1
	}
	return 0
}

// summary is a one-line description of a plan.
func summary(p dsconfig.Plan) string {
	off := ""
	if d := p.Zero.OffloadOptimizer.Device; d != dsconfig.OffloadNone && p.Zero.Stage > 0 {
		off += ", optimizer offload " + string(d)
	}
	if d := p.Zero.OffloadParam.Device; d != dsconfig.OffloadNone && p.Zero.Stage == 3 {
		off += ", param offload " + string(d)
	}
	line := fmt.Sprintf("ZeRO stage %d, %s%s, batch %d = micro %d × accumulation %d × %d ranks",
		p.Zero.Stage, p.Precision.DType, off, p.Batch.TrainBatchSize, p.Batch.TrainMicroBatchSizePerGPU, p.Batch.GradientAccumulationSteps,
		p.DataParallelSize())
	return line + seqParallelNote(p)
}

func runExplain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("dszero config explain", stderr)
	world := fs.Int("world-size", 1, "data-parallel world size")
	asJSON := fs.Bool("json", false, "write the plan as JSON")
	modelArg := fs.String("model", "", "at stage 3, also show the units this model (a preset or a directory with config.json) is gathered in")
	fsdpOpts := fs.String("fsdp", "", `HF Trainer's --fsdp options, e.g. "full_shard auto_wrap" (FILE is then its fsdp_config JSON, or none)`)
	minParams := fs.Int("wrap-min-params", 0, "size-based wrapping (FSDP min_num_params) instead of one unit per block")
	hf := hfFlags(fs)
	files, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	if *fsdpOpts != "" && len(files) <= 1 || len(files) == 1 && isFSDPFile(files[0]) {
		src := fsdpSource{options: *fsdpOpts}
		if len(files) == 1 {
			src.file = files[0]
		}
		return explainFSDP(src, worldIfSet(fs, *world), hf.forFSDP(), *asJSON, stdout, stderr)
	}
	if len(files) != 1 || *world < 1 || *minParams < 0 {
		fmt.Fprintln(stderr, "usage: dszero config explain FILE [--world-size N] [--model PRESET|DIR [--wrap-min-params N]] [HF flags] [--json]\n       dszero config explain accelerate.yaml | --fsdp OPTIONS [fsdp_config.json] [--world-size N] [--json]")
		return 2
	}
	var layout *model.Layout
	if l, ok, err := llamaLayout(*modelArg); ok {
		if err != nil {
			fmt.Fprintf(stderr, "dszero config explain: %v\n", err)
			return 2
		}
		layout = l
	} else if *modelArg != "" {
		mc, err := modelConfig(*modelArg)
		if err == nil {
			err = mc.WithDefaults().Validate()
		}
		if err != nil {
			fmt.Fprintf(stderr, "dszero config explain: %v\n", err)
			return 2
		}
		l := mc.WithDefaults().Layout()
		layout = &l
	}
	plan, diags, note, err := compileDSConfig(files[0], *world, hf)
	if err != nil {
		fmt.Fprintf(stderr, "%s: error: %v\n", files[0], err)
		return 1
	}
	if diags.HasErrors() {
		for _, d := range diags {
			fmt.Fprintln(stderr, d.String())
		}
		fmt.Fprintf(stderr, "%s: rejected; fix the errors above to see the plan\n", files[0])
		return 1
	}
	var units *unitsReport
	if layout != nil {
		u := describeUnits(plan, *modelArg, layout, stage3.WrapPolicy{MinNumParams: *minParams})
		units = &u
	}
	if *asJSON {
		e := explainJSON(plan)
		e.Stage3Units = units
		return writeJSON(stdout, stderr, e)
	}
	explainText(stdout, plan)
	if note != "" {
		fmt.Fprintf(stdout, "\nCommand line\n  %s\n", note)
	}
	if units != nil {
		if plan.Zero.Stage != 3 {
			fmt.Fprintf(stdout, "\n(at stage %d the parameters are not gathered per unit; this is what stage 3 would do)\n", plan.Zero.Stage)
		}
		units.text(stdout)
	}
	return 0
}

func writeJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "dszero: %v\n", err)
		return 1
	}
	return 0
}

// explained is the --json form of explain; its field names are stable.
type explained struct {
	File        string               `json:"file"`
	Mode        dsconfig.Mode        `json:"mode"`
	WorldSize   int                  `json:"world_size"`
	Stage       int                  `json:"zero_stage"`
	Stage3Units *unitsReport         `json:"stage3_units,omitempty"` // with --model
	Precision   string               `json:"precision"`
	Batch       dsconfig.Batch       `json:"batch"`
	Partitioned []string             `json:"partitioned"`
	Plan        dsconfig.Plan        `json:"plan"`
	Settings    []dsconfig.Setting   `json:"settings"`
	Diagnostics dsconfig.Diagnostics `json:"diagnostics"`
}

func explainJSON(p dsconfig.Plan) explained {
	return explained{File: p.File, Mode: p.Mode, WorldSize: p.WorldSize, Stage: p.Zero.Stage, Precision: p.Precision.DType.String(),
		Batch: p.Batch, Partitioned: partitioned(p), Plan: p, Settings: p.Settings(), Diagnostics: p.Diagnostics()}
}

// partitioned lists what the stage splits across ranks.
func partitioned(p dsconfig.Plan) []string {
	switch p.Zero.Stage {
	case 1:
		return []string{"optimizer_state", "master_params"}
	case 2:
		return []string{"optimizer_state", "master_params", "gradients"}
	case 3:
		return []string{"optimizer_state", "master_params", "gradients", "parameters"}
	}
	return []string{}
}

var stageStory = [...]string{
	"ZeRO stage 0 (data parallel, like DDP): every rank holds the full model, gradients and optimizer state; gradients are all-reduced.",
	"ZeRO stage 1: the fp32 master weights and optimizer state are split across ranks; gradients are reduced at the step boundary, each rank updates its partition, and the updated parameters are all-gathered.",
	"ZeRO stage 2: as stage 1, and gradients are reduce-scattered during backward, so each rank keeps only the gradients of its own partition.",
	"ZeRO stage 3: parameters are split too; each unit's parameters are all-gathered just before its forward and backward and released after, and gradients are reduce-scattered as each unit's backward finishes.",
}

func explainText(w io.Writer, p dsconfig.Plan) {
	z := p.Zero
	fmt.Fprintf(w, "%s (%s semantics, %d data-parallel rank(s))\n\n", p.File, p.Mode, p.WorldSize)
	fmt.Fprintf(w, "Partitioning\n  %s\n", stageStory[z.Stage])
	fmt.Fprintf(w, "  partitioned across ranks: %s\n", listOrNone(partitioned(p)))
	if z.Stage >= 1 {
		fmt.Fprintf(w, "  gradient buckets: reduce_bucket_size %s, overlap_comm %v, contiguous_gradients %v\n",
			count(z.ReduceBucketSize), z.OverlapComm, z.ContiguousGradients)
	}
	if z.Stage == 3 {
		fmt.Fprintf(w, "  stage 3: prefetch %s, max live %s, reuse distance %s, parameters ≤ %s stay gathered, sub-groups of %s\n",
			count(z.PrefetchBucketSize), count(z.MaxLiveParameters), count(z.MaxReuseDistance), count(z.ParamPersistenceThreshold), count(z.SubGroupSize))
	}
	fmt.Fprintf(w, "\nOffload\n")
	switch {
	case z.Stage > 0 && z.OffloadOptimizer.Device != dsconfig.OffloadNone:
		fmt.Fprintf(w, "  optimizer state and fp32 master weights → %s%s (pin_memory %v, ratio %g)\n", z.OffloadOptimizer.Device,
			pathNote(z.OffloadOptimizer.NVMePath), z.OffloadOptimizer.PinMemory, z.OffloadOptimizer.Ratio)
	default:
		fmt.Fprintf(w, "  optimizer state: on the device\n")
	}
	if z.Stage == 3 && z.OffloadParam.Device != dsconfig.OffloadNone {
		fmt.Fprintf(w, "  parameters → %s%s (pin_memory %v)\n", z.OffloadParam.Device, pathNote(z.OffloadParam.NVMePath), z.OffloadParam.PinMemory)
	} else {
		fmt.Fprintf(w, "  parameters: on the device\n")
	}
	b := p.Batch
	fmt.Fprintf(w, "\nBatch\n  train_batch_size %d = micro-batch %d × gradient accumulation %d × %d data-parallel rank(s)\n",
		b.TrainBatchSize, b.TrainMicroBatchSizePerGPU, b.GradientAccumulationSteps, p.DataParallelSize())
	fmt.Fprintf(w, "\nPrecision\n")
	switch p.Precision.DType {
	case device.F16:
		if p.Precision.DynamicLossScale() {
			fmt.Fprintf(w, "  fp16 with fp32 master weights; dynamic loss scale starting at 2^%d, ×2 after %d clean steps, hysteresis %d, minimum %d\n",
				p.Precision.InitialScalePower, p.Precision.LossScaleWindow, p.Precision.Hysteresis, p.Precision.MinLossScale)
		} else {
			fmt.Fprintf(w, "  fp16 with fp32 master weights; static loss scale %g\n", p.Precision.LossScale)
		}
	case device.BF16:
		fmt.Fprintf(w, "  bf16 with fp32 master weights (no loss scaling)\n")
	default:
		fmt.Fprintf(w, "  fp32\n")
	}
	comm := p.CommunicationDataType
	if comm == "" {
		comm = p.Precision.DType.String() + " (the model's dtype)"
	}
	fmt.Fprintf(w, "  gradient communication in %s; clipping at global norm %g\n", comm, p.GradientClipping)
	fmt.Fprintf(w, "\nOptimizer\n")
	if o := p.Optimizer; o.Type != "" {
		fmt.Fprintf(w, "  %s as %s: lr %g, betas %v, eps %g, weight_decay %g\n", o.Type, o.Impl, o.LR, o.Betas, o.Eps, o.WeightDecay)
	} else {
		fmt.Fprintf(w, "  none\n")
	}
	if s := p.Scheduler; s.Type != "" {
		fmt.Fprintf(w, "  scheduler %s\n", s.Type)
	}
	explainCheckpoints(w, p)
	explainKnobs(w, p) // knobs_explain.go
	fmt.Fprintf(w, "\nSettings not taken from DeepSpeed's defaults (value, source)\n")
	settings := p.Settings()
	sort.SliceStable(settings, func(i, j int) bool { return settings[i].Line < settings[j].Line })
	n := 0
	for _, s := range settings {
		if s.Source == dsconfig.FromDefault {
			continue
		}
		n++
		src := s.Source.String()
		if s.Written != "" {
			src += " " + s.Written
		}
		if s.Line > 0 {
			src += fmt.Sprintf(" (line %d)", s.Line)
		}
		fmt.Fprintf(w, "  %-55s %-22s %s\n", s.Path, s.ValueString(), src)
	}
	if n == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	if ds := p.Diagnostics(); len(ds) > 0 {
		fmt.Fprintf(w, "\nNotes\n")
		for _, d := range ds {
			fmt.Fprintf(w, "  %s\n", d.String())
		}
	}
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "nothing"
	}
	return strings.Join(xs, ", ")
}

func pathNote(p string) string {
	if p == "" {
		return ""
	}
	return " at " + p
}

// count writes an element count with its binary-unit size as fp32 bytes.
func count(n int64) string {
	return fmt.Sprintf("%d elements (%s as fp32)", n, mem.FormatBytes(n*4))
}

// worldIfSet is --world-size when given, else 0 (an FSDP file's own
// num_processes).
func worldIfSet(fs *flag.FlagSet, world int) int {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "world-size" })
	if set {
		return world
	}
	return 0
}
