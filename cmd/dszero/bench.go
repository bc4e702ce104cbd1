package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/data"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/dsconfig/lenient"
	"github.com/dszero/dszero/estimate"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/train"
)

// benchRow is one variant of dszero bench, per rank (the largest over the
// ranks): the stable --json form.
type benchRow struct {
	Variant  string  `json:"variant"` // "stage 3", "stage 3 + offload nvme"
	Stage    int     `json:"zero_stage"`
	Offload  string  `json:"offload"` // none, cpu or nvme
	Status   string  `json:"status"`  // ok, oom or error
	Error    string  `json:"error,omitempty"`
	StepS    float64 `json:"step_s"`       // median over the timed steps
	TokensPS float64 `json:"tokens_per_s"` // of the whole world
	// PeakBytes is the peak by tier ("device", "pinned_host", "nvme") and
	// category (mem.Category names, and "total").
	PeakBytes map[string]map[string]int64 `json:"peak_bytes"`
	// ModelStates is the measured model states (params16, master_params,
	// grads, optim_state) over every tier; Estimate is dszero's estimate
	// of them (package estimate: the ZeRO formula in dszero's element
	// sizes, plus padding), and Ratio measured ÷ estimate (0 with NVMe
	// offload: the optimizer state is then counted in its files and again
	// in the pinned swap buffers it streams through; the table's note
	// under the row spells the tiers out).
	ModelStates int64   `json:"model_states_bytes"`
	Estimate    int64   `json:"estimate_bytes"`
	Ratio       float64 `json:"measured_over_estimate"`
	// SentBytes is what rank 0 sent in the last step, per collective kind.
	SentBytes map[string]int64 `json:"sent_bytes_per_step,omitempty"`
}

// benchReport is dszero bench's --json output.
type benchReport struct {
	Model        string     `json:"model"`
	Params       int        `json:"params"`
	Ranks        int        `json:"ranks"`
	MicroBatch   int        `json:"micro_batch"`
	SeqLen       int        `json:"seq_len"`
	Steps        int        `json:"steps"`
	DeviceBudget int64      `json:"device_budget_bytes"` // -1: unlimited
	Variants     []benchRow `json:"variants"`
}

var modelStateCats = []mem.Category{mem.Params16, mem.MasterParams, mem.Grads, mem.OptimState}

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("dszero bench", stderr)
	cfgPath := fs.String("deepspeed", "", "base ds_config (default: AdamW, fp32); its zero_optimization stage and offload are set per variant (its offload_optimizer.ratio is kept at stage 3 with cpu)")
	stagesArg := fs.String("stages", "0,1,2,3", "ZeRO stages to run")
	offloadArg := fs.String("offload", "none", "offload devices to run at each stage that has them: none, cpu, nvme (comma-separated)")
	nproc := fs.Int("nproc", 2, "in-process ranks")
	modelArg := fs.String("model", "small", "model preset or directory with config.json")
	micro := fs.Int("micro-batch", 1, "micro-batch per rank")
	seq := fs.Int("seq", 64, "tokens per sample")
	steps := fs.Int("steps", 3, "steps per variant (the first is not timed)")
	devMem := fs.String("device-memory", "", "per-rank device budget, e.g. 4GiB: a variant beyond it is reported as OOM")
	nvmePath := fs.String("nvme-path", "", "directory for the nvme variants' swap files (default: a temporary directory)")
	jsonOut := fs.String("json", "", "write the results as JSON to this file (- for stdout)")
	plotOut := fs.String("plot", "", "draw the peaks as stacked bars to this .png or .svg")
	threads := fs.Int("threads", 0, "BLAS threads (default: OpenBLAS's own)")
	oneBit := fs.Bool("onebit-adam", false, "also run stage 0 with DeepSpeed's OneBitAdam (freeze_step 1), to compare the bytes sent per step")
	if _, err := parseInterleaved(fs, args); err != nil {
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "dszero bench: "+format+"\n", a...)
		return 2
	}
	var stages []int
	for _, s := range strings.Split(*stagesArg, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 || n > 3 {
			return usage("--stages %q: want ZeRO stages 0 to 3, e.g. 2,3", *stagesArg)
		}
		stages = append(stages, n)
	}
	var offloads []string
	for _, o := range strings.Split(*offloadArg, ",") {
		if o = strings.TrimSpace(o); o != "none" && o != "cpu" && o != "nvme" {
			return usage("--offload %q: want none, cpu or nvme", *offloadArg)
		}
		offloads = append(offloads, strings.TrimSpace(o))
	}
	if *nproc < 1 || *micro < 1 || *seq < 1 || *steps < 2 {
		return usage("--nproc, --micro-batch and --seq must be ≥ 1 and --steps ≥ 2")
	}
	budget := mem.Unlimited
	if *devMem != "" {
		var err error
		if budget, err = parseBudget("--device-memory", *devMem); err != nil {
			return usage("%v", err)
		}
	}
	mc, err := modelConfig(*modelArg)
	if err != nil {
		return usage("%v", err)
	}
	mc = mc.WithDefaults()
	if err := mc.Validate(); err != nil {
		return usage("--model: %v", err)
	}
	if *seq > mc.Context {
		return usage("--seq %d exceeds the model's context of %d", *seq, mc.Context)
	}
	base := map[string]any{"optimizer": map[string]any{"type": "AdamW", "params": map[string]any{"lr": 1e-4}}, "zero_force_ds_cpu_optimizer": false}
	if *cfgPath != "" {
		var err error
		if base, err = readBaseConfig(*cfgPath); err != nil {
			return usage("--deepspeed: %v", err)
		}
	}
	nvmeDir := *nvmePath
	if nvmeDir == "" && slices.Contains(offloads, "nvme") {
		if nvmeDir, err = os.MkdirTemp("", "dszero-bench-nvme"); err != nil {
			fmt.Fprintf(stderr, "dszero bench: %v\n", err)
			return 1
		}
		defer os.RemoveAll(nvmeDir)
	}
	gemm, err := blas.New(blas.Options{Threads: *threads})
	if err != nil {
		fmt.Fprintf(stderr, "dszero bench: %v\n", err)
		return 1
	}
	layout := mc.Layout()
	rep := benchReport{Model: *modelArg, Params: layout.Numel, Ranks: *nproc, MicroBatch: *micro, SeqLen: *seq, Steps: *steps, DeviceBudget: budget}
	corpus := data.Random(mc.Vocab, 1<<20, 1)
	for _, st := range stages {
		for _, off := range offloads {
			if off == "cpu" && st == 0 || off == "nvme" && st != 3 {
				continue // DeepSpeed offloads from stage 1 (cpu) and 3 (nvme)
			}
			row := benchOne(base, st, off, nvmeDir, *nproc, *micro, *seq, *steps, budget, mc, gemm, corpus, &layout)
			rep.Variants = append(rep.Variants, row)
			// Hand the variant's buffers back to the OS before the next one,
			// so that the process's peak is one variant's, not their sum.
			debug.FreeOSMemory()
			fmt.Fprintf(stderr, "dszero bench: %s: %s\n", row.Variant, row.Status)
		}
		if st == 0 && *oneBit {
			row := benchOne(oneBitBase(base), 0, "none", nvmeDir, *nproc, *micro, *seq, *steps, budget, mc, gemm, corpus, &layout)
			row.Variant += " + 1-bit Adam"
			rep.Variants = append(rep.Variants, row)
			fmt.Fprintf(stderr, "dszero bench: %s: %s\n", row.Variant, row.Status)
		}
	}
	benchTable(stdout, rep)
	if *jsonOut != "" {
		w := stdout
		if *jsonOut != "-" {
			f, err := os.Create(*jsonOut)
			if err != nil {
				fmt.Fprintf(stderr, "dszero bench: --json: %v\n", err)
				return 1
			}
			defer f.Close()
			w = f
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "dszero bench: --json: %v\n", err)
			return 1
		}
	}
	if *plotOut != "" {
		if err := benchPlot(*plotOut, rep); err != nil {
			fmt.Fprintf(stderr, "dszero bench: --plot: %v\n", err)
			return 1
		}
	}
	return 0
}

// readBaseConfig reads bench's --deepspeed as every command reads a
// ds_config (comments, Hjson and all, through dsconfig's reader), as plain
// values that each variant then edits.
func readBaseConfig(path string) (map[string]any, error) {
	name, raw, _, err := readDSConfig(path, nil)
	if err != nil {
		return nil, err
	}
	root, err := lenient.Parse(name, raw)
	if err != nil {
		return nil, err
	}
	js, err := root.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	base := map[string]any{}
	if err := json.Unmarshal(js, &base); err != nil {
		return nil, fmt.Errorf("%s: the top level is not an object: %w", name, err)
	}
	return base, nil
}

// benchOne trains one variant and measures it.
func benchOne(base map[string]any, stage int, off, nvmeDir string, nproc, micro, seq, steps int, budget int64,
	mc gpt.Config, gemm blas.Engine, corpus *data.Corpus, layout *model.Layout) benchRow {
	row := benchRow{Variant: fmt.Sprintf("stage %d", stage), Stage: stage, Offload: off, PeakBytes: map[string]map[string]int64{}}
	if off != "none" {
		row.Variant += " + offload " + off
	}
	cfg := map[string]any{}
	for k, v := range base {
		cfg[k] = v
	}
	zo := map[string]any{"stage": stage}
	if old, ok := base["zero_optimization"].(map[string]any); ok {
		for k, v := range old {
			zo[k] = v
		}
		zo["stage"] = stage
	}
	// offload_optimizer.ratio (partial offload, stage 3 only) is kept from
	// the base config in the stage 3 cpu variant.
	oo, _ := zo["offload_optimizer"].(map[string]any)
	ratio, hasRatio := oo["ratio"].(float64)
	delete(zo, "offload_optimizer")
	delete(zo, "offload_param")
	switch off {
	case "cpu":
		zo["offload_optimizer"] = map[string]any{"device": "cpu"}
		if hasRatio && stage == 3 && ratio != 1 {
			zo["offload_optimizer"] = map[string]any{"device": "cpu", "ratio": ratio}
			row.Variant += fmt.Sprintf(" r%g", ratio)
		}
	case "nvme":
		zo["offload_optimizer"] = map[string]any{"device": "nvme", "nvme_path": nvmeDir}
		zo["offload_param"] = map[string]any{"device": "nvme", "nvme_path": nvmeDir}
	}
	cfg["zero_optimization"] = zo
	cfg["wall_clock_breakdown"] = true // for the bytes sent per step
	cfg["train_micro_batch_size_per_gpu"] = micro
	delete(cfg, "train_batch_size")
	raw, _ := json.Marshal(cfg)
	plan, diags := dsconfig.Compile(row.Variant, raw, dsconfig.Options{WorldSize: nproc})
	if diags.HasErrors() {
		var msgs []string
		for _, d := range diags.Filter(dsconfig.Error) {
			msgs = append(msgs, d.String())
		}
		row.Status, row.Error = "error", strings.Join(msgs, "; ")
		return row
	}
	if r, err := estimate.Compute(estimate.Input{Model: "bench", Layout: layout, Hardware: estimate.Hardware{GPUsPerNode: nproc, Nodes: 1, BufferFactor: 1.5},
		Plan: &plan, GPT: &mc, SeqLen: seq}); err == nil && r.Dszero != nil {
		t := r.Dszero.Stages[stage].StatesTotal
		row.Estimate = t.Device + t.PinnedHost + t.NVMe
	}
	loader, err := data.NewLoader(corpus, data.Layout{B: micro, T: seq, GAS: int(plan.Batch.GradientAccumulationSteps), World: int(plan.DataParallelSize())})
	if err != nil {
		row.Status, row.Error = "error", err.Error()
		return row
	}
	devs := make([]train.Device, nproc)
	for r := range devs {
		a := mem.NewAccountant(r)
		a.SetCapacity(mem.Device, budget)
		devs[r] = train.Device{Acct: a, Gemm: gemm}
	}
	var times []float64
	_, err = train.Run(train.Config{Plan: plan, Model: mc, Seed: 1, Batches: train.Tokens(loader, seq), SeqLen: seq, Steps: steps, Devices: devs},
		func(r train.Record) error {
			if r.Step > 1 {
				times = append(times, r.StepTimeS)
			}
			if r.Breakdown != nil {
				row.SentBytes = r.Breakdown.SentBytes
			}
			return nil
		})
	var oom *mem.OOMError
	switch {
	case errors.As(err, &oom):
		row.Status, row.Error = "oom", oom.Error()
	case err != nil:
		row.Status, row.Error = "error", err.Error()
	default:
		row.Status = "ok"
	}
	if len(times) > 0 {
		slices.Sort(times)
		row.StepS = times[len(times)/2]
		row.TokensPS = float64(micro*seq*int(plan.Batch.GradientAccumulationSteps)*nproc) / row.StepS
	}
	for _, d := range devs {
		s := d.Acct.Snapshot()
		var states int64
		for _, t := range mem.Tiers() {
			m := row.PeakBytes[t.String()]
			if m == nil {
				m = map[string]int64{}
				row.PeakBytes[t.String()] = m
			}
			for _, c := range mem.Categories() {
				m[c.String()] = max(m[c.String()], s.PeakBytes(t, c))
			}
			m["total"] = max(m["total"], s.PeakTotal[t])
			for _, c := range modelStateCats {
				states += s.PeakBytes(t, c)
			}
		}
		row.ModelStates = max(row.ModelStates, states)
	}
	// With NVMe the swap buffers (pinned host) come on top of the model
	// states, which are then in files: no ratio.
	if row.Estimate > 0 && row.Status == "ok" && off != "nvme" {
		row.Ratio = float64(row.ModelStates) / float64(row.Estimate)
	}
	return row
}

// benchTable prints the results, one variant a line.
func benchTable(w io.Writer, rep benchReport) {
	b := "unlimited"
	if rep.DeviceBudget >= 0 {
		b = mem.FormatBytes(rep.DeviceBudget)
	}
	fmt.Fprintf(w, "%s (%d parameters) on %d rank(s), micro-batch %d × %d tokens, %d steps; device budget %s; bytes per rank (the largest over the ranks)\n\n",
		rep.Model, rep.Params, rep.Ranks, rep.MicroBatch, rep.SeqLen, rep.Steps, b)
	fmt.Fprintf(w, "%-26s %-6s %12s %12s %12s %14s %12s %8s %9s %10s %12s\n", "variant", "status", "device", "pinned host", "NVMe",
		"model states", "estimate", "÷ est.", "step s", "tokens/s", "sent/step")
	for _, r := range rep.Variants {
		tot := func(t mem.Tier) string {
			v := r.PeakBytes[t.String()]["total"]
			if v == 0 {
				return "-"
			}
			return mem.FormatBytes(v)
		}
		ratio, step, tps := "-", "-", "-"
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.3f", r.Ratio)
		}
		if r.StepS > 0 {
			step, tps = fmt.Sprintf("%.3f", r.StepS), fmt.Sprintf("%.0f", r.TokensPS)
		}
		sent := "-"
		if r.SentBytes != nil {
			sent = mem.FormatBytes(sentTotal(r.SentBytes))
		}
		fmt.Fprintf(w, "%-26s %-6s %12s %12s %12s %14s %12s %8s %9s %10s %12s\n", r.Variant, r.Status, tot(mem.Device), tot(mem.PinnedHost), tot(mem.NVMe),
			mem.FormatBytes(r.ModelStates), mem.FormatBytes(r.Estimate), ratio, step, tps, sent)
	}
	for _, r := range rep.Variants {
		if r.Offload == "nvme" && r.Status == "ok" {
			fmt.Fprintf(w, "\n%s", nvmeNote(r))
		}
	}
	for _, r := range rep.Variants {
		if r.Error != "" {
			fmt.Fprintf(w, "\n%s: %s\n", r.Variant, r.Error)
		}
	}
}

// nvmeNote explains an NVMe variant's model states beside its estimate.
// The estimate counts each state once, where it lives: the fp32 master
// and the optimizer state in the swap files. The measurement adds up every
// tier, so it also counts the pinned host copies the files are stepped
// through: one sub-group's master and the swap buffers.
func nvmeNote(r benchRow) string {
	at := func(t mem.Tier, c mem.Category) string { return mem.FormatBytes(r.PeakBytes[t.String()][c.String()]) }
	return fmt.Sprintf(`%s: model states %s against an estimate of %s. The estimate counts each state
  once, where it lives: params16 on the device (%s), the gradient partitions in pinned host memory (%s),
  the fp32 master and optimizer state in the NVMe files (%s). The measurement adds up every tier, so it
  also counts the pinned host copies the files are stepped through: one sub-group's fp32 master (%s)
  and the swap buffers the optimizer state streams through (%s); hence no ratio.
`, r.Variant, mem.FormatBytes(r.ModelStates), mem.FormatBytes(r.Estimate), at(mem.Device, mem.Params16), at(mem.PinnedHost, mem.Grads),
		mem.FormatBytes(r.PeakBytes[mem.NVMe.String()]["total"]), at(mem.PinnedHost, mem.MasterParams), at(mem.PinnedHost, mem.OptimState))
}
