package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/data"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/train"
)

// runAutotune is `dszero autotune`: DeepSpeed's autotuner (deepspeed
// --autotuning run, deepspeed/autotuning/autotuner.py) on in-process
// ranks. For each ZeRO stage the config lists (zero_optimization.stage: a
// stage, a list, or "all") it finds the largest micro-batch that runs
// (doubling from min_train_micro_batch_size_per_gpu until a trial runs
// out of --device-memory or reaches max_train_micro_batch_size_per_gpu or
// max_train_batch_size), picks DeepSpeed's list of micro-batch sizes
// between half of it and it (num_tuning_micro_batch_sizes, same
// train batch per rank), and runs each as a short real training trial of
// end_profile_step+1 steps, measuring the steps after start_profile_step
// as DeepSpeed's engine does (_autotuning_exit): latency (ms per step),
// throughput and FLOPS_per_gpu. It writes exps_dir/<exp>.json,
// results_dir/<exp>/{ds_config.json,metrics.json,cmd.txt},
// results_dir/summary.txt (the table it prints), ds_config_optimal.json and
// cmd_optimal.txt.
//
// Where it differs from DeepSpeed: "fast": false (tuning the stage's
// bucket sizes and overlap flags as well) is not run — dszero tunes the
// micro-batch and stage, and says so; the best latency is the lowest (the
// 0.14.5 autotuner keeps the largest value of every metric, latency
// included); the metric is read from the trial's timers directly.
func runAutotune(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("dszero autotune", stderr)
	cfgPath := fs.String("deepspeed", "", "ds_config.json with an autotuning block (required)")
	modelArg := fs.String("model", "small", "model preset or directory with config.json")
	nproc := fs.Int("nproc", 1, "in-process ranks each trial runs on")
	seq := fs.Int("seq", 64, "tokens per sample")
	devMem := fs.String("device-memory", "", "per-rank device budget, e.g. 4GiB: the largest micro-batch is the largest that fits")
	threads := fs.Int("threads", 0, "BLAS threads (default: OpenBLAS's own)")
	if _, err := parseInterleaved(fs, args); err != nil {
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "dszero autotune: "+format+"\n", a...)
		return code
	}
	if *cfgPath == "" {
		return fail(2, "--deepspeed FILE is required: the config to tune, with an autotuning block")
	}
	if *nproc < 1 || *seq < 1 {
		return fail(2, "--nproc and --seq must be ≥ 1")
	}
	budget := int64(mem.Unlimited)
	if *devMem != "" {
		var err error
		if budget, err = parseBudget("--device-memory", *devMem); err != nil {
			return fail(2, "%v", err)
		}
	}
	mc, err := modelConfig(*modelArg)
	if err != nil {
		return fail(2, "%v", err)
	}
	mc = mc.WithDefaults()
	if *seq > mc.Context {
		return fail(2, "--seq %d exceeds the model's context of %d", *seq, mc.Context)
	}
	user, err := readBaseConfig(*cfgPath)
	if err != nil {
		return fail(1, "--deepspeed: %v", err)
	}
	opts, err := readTuneOptions(user)
	if err != nil {
		return fail(1, "%s: %v", *cfgPath, err)
	}
	gemm, err := blas.New(blas.Options{Threads: *threads})
	if err != nil {
		return fail(1, "%v", err)
	}
	t := &tuner{opts: opts, user: user, mc: mc, world: *nproc, seq: *seq, budget: budget, gemm: gemm, stdout: stdout,
		corpus: data.Random(mc.Vocab, 1<<20, 1), cmdBase: fmt.Sprintf("dszero train --model %s --nproc %d --seq %d", *modelArg, *nproc, *seq)}
	// DeepSpeed's autotuner (0.14.5) knows no sequence_parallel_size: it
	// would write train_batch_size over every rank, which the engine then
	// rejects (it counts world/sp data-parallel ranks). The tuner here
	// counts the data-parallel ranks; the trials check the rest.
	t.dp = t.world
	if sp, ok := user["sequence_parallel_size"].(float64); ok && sp > 1 && t.world%int(sp) == 0 {
		t.dp = t.world / int(sp)
	}
	if err := t.prepareDirs(); err != nil {
		return fail(1, "%v", err)
	}
	if !opts.Fast {
		fmt.Fprintln(stderr, `dszero autotune: warning: "fast": false: dszero tunes the ZeRO stage and micro-batch size only, not DeepSpeed's per-stage spaces of bucket sizes and overlap flags`)
	}
	if opts.TunerType == "random" {
		fmt.Fprintln(stderr, `dszero autotune: note: tuner_type "random" only reorders a search that runs every experiment here; the result is gridsearch's`)
	}
	start := time.Now()
	for _, stage := range opts.Stages {
		if err := t.tuneStage(stage); err != nil {
			return fail(1, "%v", err)
		}
	}
	if err := t.finish(time.Since(start)); err != nil {
		return fail(1, "%v", err)
	}
	return 0
}

// tuner is one autotuning session.
type tuner struct {
	opts    tuneOptions
	user    map[string]any
	mc      gpt.Config
	world   int
	dp      int // the data-parallel ranks: world / sequence_parallel_size
	seq     int
	budget  int64
	gemm    blas.Engine
	corpus  *data.Corpus
	stdout  io.Writer
	cmdBase string
	// spaces are the tuning spaces in the order they were tuned, each
	// with its experiments.
	spaces []tuneSpace
	nexps  int
}

type tuneSpace struct {
	name string
	exps []tuneExp
}

// tuneExp is one experiment and what it measured (ok false: it failed).
type tuneExp struct {
	Name     string         `json:"name"`
	DSConfig map[string]any `json:"ds_config"`
	NumGPUs  int            `json:"num_gpus"`
	NumNodes int            `json:"num_nodes"`
	ok       bool
	metrics  tuneMetrics
	err      error
}

// tuneMetrics are what DeepSpeed's engine writes to metric_path.
type tuneMetrics struct {
	LatencyMS   float64 `json:"latency"`
	FLOPSPerGPU float64 `json:"FLOPS_per_gpu"`
	Throughput  float64 `json:"throughput"`
}

func (m tuneMetrics) value(metric string) float64 {
	switch metric {
	case "latency":
		return m.LatencyMS
	case "flops":
		return m.FLOPSPerGPU
	}
	return m.Throughput
}

// better says whether a beats b under the metric.
func (t *tuner) better(a, b float64) bool {
	if t.opts.Metric == "latency" {
		return a < b
	}
	return a > b
}

func (t *tuner) prepareDirs() error {
	for _, d := range []string{t.opts.ExpsDir, t.opts.ResultsDir} {
		if t.opts.Overwrite {
			if err := os.RemoveAll(d); err != nil {
				return fmt.Errorf("autotuning: clearing %s: %w", d, err)
			}
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("autotuning: %w; check results_dir and exps_dir", err)
		}
	}
	return nil
}

// config is the user's config for one experiment: the stage, micro-batch
// and accumulation set, train_batch_size derived, the autotuning block
// dropped, the timers on.
func (t *tuner) config(stage, mbs, gas int) map[string]any {
	raw, _ := json.Marshal(t.user)
	var c map[string]any
	json.Unmarshal(raw, &c)
	delete(c, "autotuning")
	zo, _ := c["zero_optimization"].(map[string]any)
	if zo == nil {
		zo = map[string]any{}
	}
	zo["stage"] = stage
	c["zero_optimization"] = zo
	c["train_micro_batch_size_per_gpu"] = mbs
	c["gradient_accumulation_steps"] = gas
	c["train_batch_size"] = mbs * gas * t.dp / t.opts.MPSize
	return c
}

// tuneStage is tune_space for the stage's micro-batch sizes.
func (t *tuner) tuneStage(stage int) error {
	maxMBS, err := t.maxMicroBatch(stage)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("z%d", stage)
	if maxMBS == 0 {
		fmt.Fprintf(t.stdout, "%s: no micro-batch size runs at ZeRO stage %d (not even %d)\n", name, stage, t.opts.MinMicro)
		return nil
	}
	list, perGPU := t.opts.microBatchList(t.opts.MinMicro, maxMBS, t.dp)
	fmt.Fprintf(t.stdout, "%s: largest micro-batch %d; tuning micro-batch sizes %v (train batch per rank %d)\n", name, maxMBS, list, perGPU)
	sp := tuneSpace{name: name}
	for _, mbs := range list {
		gas := perGPU / mbs
		if gas < 1 {
			continue
		}
		e := tuneExp{Name: fmt.Sprintf("%s_gas%d_tmbspg%d", name, gas, mbs), DSConfig: t.config(stage, mbs, gas), NumGPUs: t.world, NumNodes: 1}
		if err := t.run(&e); err != nil {
			return err
		}
		sp.exps = append(sp.exps, e)
	}
	t.spaces = append(t.spaces, sp)
	return nil
}

// maxMicroBatch doubles the micro-batch from the minimum while a 1-step
// trial fits, up to the caps; 0 when the minimum does not run.
func (t *tuner) maxMicroBatch(stage int) (int, error) {
	limit := t.opts.MaxMicroBatch
	if t.opts.MaxTrainBatchSize > 0 {
		limit = min(limit, t.opts.MaxTrainBatchSize*t.opts.MPSize/t.dp)
	}
	best := 0
	for mbs := t.opts.MinMicro; mbs <= limit; mbs *= 2 {
		_, err := t.trial(t.config(stage, mbs, 1), 1)
		var oom *mem.OOMError
		if errors.As(err, &oom) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("ZeRO stage %d, micro-batch %d: %w", stage, mbs, err)
		}
		best = mbs
	}
	if best > 0 && best < limit && best*2 > limit {
		// The next doubling passed the cap: try the cap itself.
		if _, err := t.trial(t.config(stage, limit, 1), 1); err == nil {
			best = limit
		}
	}
	return best, nil
}

// run runs one experiment and writes its files.
func (t *tuner) run(e *tuneExp) error {
	t.nexps++
	js, _ := json.Marshal(e)
	if err := os.WriteFile(filepath.Join(t.opts.ExpsDir, e.Name+".json"), js, 0o644); err != nil {
		return err
	}
	dir := filepath.Join(t.opts.ResultsDir, e.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg, _ := json.MarshalIndent(e.DSConfig, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "ds_config.json"), cfg, 0o644); err != nil {
		return err
	}
	cmd := fmt.Sprintf("%s --deepspeed %s --steps %d\n", t.cmdBase, filepath.Join(dir, "ds_config.json"), t.opts.EndProfileStep+1)
	if err := os.WriteFile(filepath.Join(dir, "cmd.txt"), []byte(cmd), 0o644); err != nil {
		return err
	}
	e.metrics, e.err = t.trial(e.DSConfig, t.opts.EndProfileStep+1)
	e.ok = e.err == nil
	if !e.ok {
		fmt.Fprintf(t.stdout, "  %s: did not run: %v\n", e.Name, e.err)
		return os.WriteFile(filepath.Join(dir, "stderr.log"), []byte(e.err.Error()+"\n"), 0o644)
	}
	m, _ := json.Marshal(e.metrics)
	fmt.Fprintf(t.stdout, "  %s: latency %.2f ms, throughput %.6g, FLOPS_per_gpu %.6g\n", e.Name, e.metrics.LatencyMS, e.metrics.Throughput, e.metrics.FLOPSPerGPU)
	return os.WriteFile(filepath.Join(dir, "metrics.json"), m, 0o644)
}

// trial trains cfg for steps steps and measures, over the steps after
// start_profile_step, what DeepSpeed's _autotuning_exit computes:
// latency = the mean of fwd+bwd+step per step in ms, FLOPS_per_gpu =
// 3·fwd flops·1e6·GAS/latency, throughput = train_batch_size·1e6/latency.
func (t *tuner) trial(cfg map[string]any, steps int) (tuneMetrics, error) {
	run := map[string]any{"wall_clock_breakdown": true}
	for k, v := range cfg {
		if k != "wall_clock_breakdown" {
			run[k] = v
		}
	}
	raw, _ := json.Marshal(run)
	plan, diags := dsconfig.Compile("autotune", raw, dsconfig.Options{WorldSize: t.world})
	if diags.HasErrors() || len(plan.Unsupported()) > 0 {
		var msgs []string
		for _, d := range diags {
			if d.Severity == dsconfig.Error || d.Severity == dsconfig.Unsupported {
				msgs = append(msgs, d.String())
			}
		}
		return tuneMetrics{}, errors.New(strings.Join(msgs, "; "))
	}
	B, gas := int(plan.Batch.TrainMicroBatchSizePerGPU), int(plan.Batch.GradientAccumulationSteps)
	loader, err := data.NewLoader(t.corpus, data.Layout{B: B, T: t.seq, GAS: gas, World: int(plan.DataParallelSize())}) // Ulysses: a shard per sequence-parallel group
	if err != nil {
		return tuneMetrics{}, err
	}
	devs := make([]train.Device, t.world)
	for r := range devs {
		a := mem.NewAccountant(r)
		a.SetCapacity(mem.Device, t.budget)
		devs[r] = train.Device{Acct: a, Gemm: t.gemm}
	}
	var lat []float64
	_, err = train.Run(train.Config{Plan: plan, Model: t.mc, Seed: 1, Batches: train.Tokens(loader, t.seq), SeqLen: t.seq, Steps: steps, Devices: devs, Stdout: io.Discard},
		func(r train.Record) error {
			if b := r.Breakdown; b != nil && (steps == 1 || int(r.Step) > t.opts.StartProfileStep) {
				lat = append(lat, b.ForwardMS+b.BackwardMS+b.StepMS)
			}
			return nil
		})
	if err != nil {
		return tuneMetrics{}, err
	}
	var m tuneMetrics
	for _, l := range lat {
		m.LatencyMS += l / float64(len(lat))
	}
	if m.LatencyMS <= 0 || math.IsNaN(m.LatencyMS) {
		return m, nil
	}
	var fwd int64
	// The profiled rank's forward: under Ulysses its seq/sp tokens, the
	// attention core on heads/sp over seq (model.FlopShape.SeqParallel).
	sp := max(1, int(plan.SequenceParallelSize))
	for _, mod := range t.mc.FlopModules(model.FlopShape{Batch: B, Seq: t.seq / sp, SeqParallel: sp}) {
		fwd += mod.FLOPs
	}
	m.FLOPSPerGPU = float64(3*fwd) * 1e6 * float64(gas) / m.LatencyMS
	m.Throughput = float64(plan.Batch.TrainBatchSize) * 1e6 / m.LatencyMS
	return m, nil
}

// finish prints the summary table, writes summary.txt and the optimal
// config and command.
func (t *tuner) finish(took time.Duration) error {
	type best struct {
		space string
		exp   *tuneExp
		n     int
	}
	var rows []best
	var global *tuneExp
	total := 0
	for i := range t.spaces {
		sp := &t.spaces[i]
		b := best{space: sp.name, n: len(sp.exps)}
		for j := range sp.exps {
			e := &sp.exps[j]
			if e.ok && (b.exp == nil || t.better(e.metrics.value(t.opts.Metric), b.exp.metrics.value(t.opts.Metric))) {
				b.exp = e
			}
		}
		total += b.n
		if b.exp != nil {
			rows = append(rows, b)
			if global == nil || t.better(b.exp.metrics.value(t.opts.Metric), global.metrics.value(t.opts.Metric)) {
				global = b.exp
			}
		}
	}
	if global == nil {
		fmt.Fprintln(t.stdout, "No optimal setup is found. Please check that experiments were run successfully.")
		return errors.New("no experiment ran")
	}
	rows = append(rows, best{space: "global", exp: global, n: total})
	cells := [][]string{}
	for _, r := range rows {
		cells = append(cells, []string{r.space, strconv.Itoa(r.n), pyG(r.exp.metrics.value(t.opts.Metric)), r.exp.Name})
	}
	table := pipeTable([]string{"tuning_space", "num_experiments", "best_metric_val", "best_exp_name"}, []bool{false, true, true, false}, cells)
	fmt.Fprintln(t.stdout, table)
	summary := table + fmt.Sprintf("\n\nTuning completed in %s. Total number of experiments: %d.", took.Round(time.Second), t.nexps)
	if err := os.WriteFile(filepath.Join(t.opts.ResultsDir, "summary.txt"), []byte(summary), 0o644); err != nil {
		return err
	}
	opt, _ := json.Marshal(global.DSConfig)
	optPath := filepath.Join(t.opts.ResultsDir, "ds_config_optimal.json")
	if err := os.WriteFile(optPath, opt, 0o644); err != nil {
		return err
	}
	cmd := fmt.Sprintf("%s --deepspeed %s\n", t.cmdBase, optPath)
	if err := os.WriteFile(filepath.Join(t.opts.ResultsDir, "cmd_optimal.txt"), []byte(cmd), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(t.stdout, "%s is the optimal setup after tuning (%s %s). Wrote %s and %s\n", global.Name, t.opts.Metric,
		pyG(global.metrics.value(t.opts.Metric)), optPath, filepath.Join(t.opts.ResultsDir, "cmd_optimal.txt"))
	return nil
}

// pyG is Python's format(x, "g").
func pyG(x float64) string {
	s := strconv.FormatFloat(x, 'g', 6, 64)
	if i := strings.IndexAny(s, "e"); i >= 0 {
		mant, exp := s[:i], s[i+1:]
		sign := exp[0]
		exp = strings.TrimLeft(exp[1:], "0")
		if len(exp) < 2 {
			exp = strings.Repeat("0", 2-len(exp)) + exp
		}
		return mant + "e" + string(sign) + exp
	}
	return s
}

// pipeTable is tabulate(..., tablefmt="pipe"): columns padded to their
// widest cell plus one space each side, numbers right-aligned with a
// "---:" rule, text left-aligned with ":---".
func pipeTable(headers []string, right []bool, rows [][]string) string {
	w := make([]int, len(headers))
	for i, h := range headers {
		w[i] = len(h) + 2 // tabulate's MIN_PADDING
		for _, r := range rows {
			w[i] = max(w[i], len(r[i]))
		}
	}
	pad := func(s string, i int) string {
		if right[i] {
			return strings.Repeat(" ", w[i]-len(s)) + s
		}
		return s + strings.Repeat(" ", w[i]-len(s))
	}
	line := func(cells []string) string {
		var b strings.Builder
		for i, c := range cells {
			b.WriteString("| " + pad(c, i) + " ")
		}
		return b.String() + "|"
	}
	var b strings.Builder
	b.WriteString(line(headers) + "\n")
	for i := range headers {
		if right[i] {
			b.WriteString("|" + strings.Repeat("-", w[i]+1) + ":")
		} else {
			b.WriteString("|:" + strings.Repeat("-", w[i]+1))
		}
	}
	b.WriteString("|")
	for _, r := range rows {
		b.WriteString("\n" + line(r))
	}
	return b.String()
}
