package main

import (
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/data"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/fsdpconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/train"
	"github.com/schollz/progressbar/v3"
)

//go:embed default_ds_config.json
var defaultConfig []byte

func runTrain(args []string, stdout, stderr io.Writer) (code int) {
	fs := flag.NewFlagSet("dszero train", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("deepspeed", "", "ds_config.json (default: the embedded default config)")
	fsdpFile := fs.String("fsdp-config", "", "an Accelerate FSDP config (YAML), instead of --deepspeed")
	fsdpOpts := fs.String("fsdp", "", `HF Trainer's --fsdp options, e.g. "full_shard auto_wrap", instead of --deepspeed`)
	fsdpJSON := fs.String("fsdp_config", "", "HF Trainer's fsdp_config JSON (with --fsdp)")
	shardGroup := fs.Int("shard-group-size", 0, "HYBRID_SHARD: ranks per shard group (default: the processes of one machine)")
	saveModel := fs.String("save-model", "", "write the consolidated final weights as a Hugging Face GPT-2 directory (model.safetensors + config.json)")
	modelArg := fs.String("model", "small", "model preset ("+strings.Join(gpt.PresetNames(), ", ")+") or a Hugging Face GPT-2 directory (config.json + model.safetensors)")
	dataPath := fs.String("data", "", "training text, a nanoGPT .bin of uint16 token ids, or \"random\" (uniform ids, for throughput runs) (default: embedded Tiny Shakespeare)")
	steps := fs.Int("steps", 0, "optimizer steps (default: --max_steps, else the scheduler's total_num_steps, else 100)")
	seq := fs.Int("seq", 0, "tokens per sample (default: min(model context, 128))")
	jsonLog := fs.String("json-log", "", "write one JSON object per optimizer step to this file")
	devMem := fs.String("device-memory", "", "per-rank device memory budget, e.g. 4GiB (default unlimited)")
	seed := fs.Uint64("seed", 1234, "seed of the random initialization")
	ckpt := fs.Bool("gradient_checkpointing", false, "recompute each block in backward (also on with an activation_checkpointing block)")
	blasName := fs.String("blas", "auto", "matmul backend: auto, openblas or gonum")
	threads := fs.Int("threads", 0, "BLAS threads (default: OpenBLAS's own)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (go tool pprof) to this file")
	saveDir := fs.String("save", "", "write DeepSpeed-layout checkpoints to this directory (after the last step, and every --save-interval steps)")
	saveEvery := fs.Int("save-interval", 0, "steps between checkpoints (with --save; 0: only after the last step)")
	loadDir := fs.String("load", "", "resume from this checkpoint directory's latest checkpoint (--steps is then the total)")
	var nproc int
	fs.IntVar(&nproc, "nproc", 1, "data-parallel ranks, run in this process (the plan's world size); under mpirun, one rank per process instead")
	fs.IntVar(&nproc, "num_gpus", 1, "alias of --nproc (DeepSpeed's launcher flag)")
	hf := hfFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dszero train: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "dszero train: "+format+"\n", a...)
		return 1
	}

	// Who runs which ranks: --nproc in this process, or one rank per
	// process under mpirun. Then only rank 0 prints and logs, and every
	// rank finalises MPI when training succeeded (see launch.finalize).
	nprocSet := false
	fs.Visit(func(f *flag.Flag) { nprocSet = nprocSet || f.Name == "nproc" || f.Name == "num_gpus" })

	// An FSDP setup instead of a ds_config: read first, for its
	// num_processes (the in-process ranks unless --nproc says otherwise).
	src := fsdpSource{file: *fsdpFile + *fsdpJSON, options: *fsdpOpts, shardGroup: *shardGroup}
	var fp fsdpconfig.Plan
	var fdiags fsdpconfig.Diagnostics
	switch {
	case *fsdpFile != "" && *fsdpJSON != "":
		fmt.Fprintln(stderr, "dszero train: --fsdp-config (Accelerate) and --fsdp_config (Trainer) are two dialects; give one")
		return 2
	case src.given() && *cfgPath != "":
		fmt.Fprintln(stderr, "dszero train: --deepspeed and an FSDP setup (--fsdp-config, --fsdp) both say how to shard; give one")
		return 2
	case src.given():
		world := 0
		if nprocSet {
			world = nproc
		}
		if fp, fdiags = src.load(world, hf(), *ckpt); !fdiags.HasErrors() && !nprocSet && fp.NumProcesses > 1 {
			nproc, nprocSet = fp.NumProcesses, true
		}
	}
	l, err := newLaunch(comm.EnvMap(os.Environ()), nproc, nprocSet)
	if err != nil {
		return fail("%v", err)
	}
	defer func() {
		if code != 0 {
			return
		}
		if err := l.finalize(); err != nil {
			code = fail("%v", err)
		}
	}()
	nproc = l.size
	diagw := stderr // the config's diagnostics
	if l.external() {
		prefix := fail
		fail = func(format string, a ...any) int {
			return prefix("rank %d: "+format, append([]any{l.env.Rank}, a...)...)
		}
		if !l.lead() {
			stdout, diagw, *quiet = io.Discard, io.Discard, true
		}
	}

	name, raw := "<embedded default ds_config>", defaultConfig
	if *cfgPath != "" {
		n, b, err := dsconfig.ReadInput(*cfgPath)
		if err != nil {
			return fail("%v", err)
		}
		name, raw = n, b
	}
	hfArgs := hf()
	var plan dsconfig.Plan
	var diags dsconfig.Diagnostics
	if src.given() {
		if !printFSDPDiags(diagw, fdiags, false) {
			return fail("%s: the FSDP setup has errors or asks for what dszero does not run (see above)", src.name())
		}
		name = src.name()
		plan, diags = dsPlan(src, fp, nproc, hfArgs)
	} else {
		plan, diags = dsconfig.Compile(name, raw, dsconfig.Options{WorldSize: nproc, HF: hfArgs})
	}
	for _, d := range diags {
		if d.Severity == dsconfig.Error || d.Severity == dsconfig.Warning || d.Severity == dsconfig.Unsupported {
			fmt.Fprintln(diagw, d.String())
		}
	}
	if diags.HasErrors() {
		return fail("%s: the config has errors (see above)", name)
	}

	budget := mem.Unlimited
	if *devMem != "" {
		var err error
		if budget, err = device.ParseBytes(*devMem); err != nil {
			return fail("--device-memory: %v", err)
		}
	}
	backend, err := blas.ParseBackend(*blasName)
	if err != nil {
		return fail("--blas: %v", err)
	}
	engine, err := blas.New(blas.Options{Backend: backend, Threads: *threads})
	if err != nil {
		return fail("%v", err)
	}
	// Each rank's device: its own accountant (and budget); the BLAS engine
	// is shared, it is safe for concurrent use.
	ranks := l.ranks()
	devs, accts := make([]train.Device, len(ranks)), make([]*mem.Accountant, len(ranks))
	for i, r := range ranks {
		accts[i] = mem.NewAccountant(r)
		accts[i].SetCapacity(mem.Device, budget)
		dev := device.NewCPU(accts[i], engine)
		devs[i] = train.Device{Acct: dev.Accountant(), Gemm: dev.BLAS()}
	}

	var mcfg gpt.Config
	var weights *gpt.Weights // --model DIR: every rank reads only what it holds
	if st, err := os.Stat(*modelArg); err == nil && st.IsDir() {
		if mcfg, err = gpt.ReadConfig(filepath.Join(*modelArg, "config.json")); err == nil {
			weights, err = gpt.OpenWeights(filepath.Join(*modelArg, "model.safetensors"), mcfg)
		}
		if err != nil {
			return fail("--model %s: %v", *modelArg, err)
		}
		defer weights.Close()
	} else if mcfg, err = gpt.Preset(*modelArg); err != nil {
		return fail("--model: %v (or give a directory with config.json and model.safetensors)", err)
	}
	corpus := data.TinyShakespeare()
	if *dataPath == "random" {
		corpus = data.Random(mcfg.Vocab, 1<<20, *seed)
	} else if *dataPath != "" {
		if corpus, err = data.Load(*dataPath); err != nil {
			return fail("%v", err)
		}
	}
	if corpus.Vocab > mcfg.Vocab {
		return fail("--data %s has token ids up to %d but the model's vocabulary is %d; use a model with a larger vocabulary", corpus.Name, corpus.Vocab-1, mcfg.Vocab)
	}
	T := *seq
	if T == 0 {
		T = min(mcfg.Context, 128)
	}
	if T > mcfg.Context {
		return fail("--seq %d is longer than the model's context of %d tokens", T, mcfg.Context)
	}
	n := *steps
	switch {
	case n > 0:
	case hfArgs != nil && hfArgs.MaxSteps > 0:
		n = int(hfArgs.MaxSteps)
	case plan.Scheduler.TotalNumSteps > 0:
		n = int(plan.Scheduler.TotalNumSteps)
	default:
		n = 100
	}
	B, gas := int(plan.Batch.TrainMicroBatchSizePerGPU), int(plan.Batch.GradientAccumulationSteps)
	loader, err := data.NewLoader(corpus, data.Layout{B: B, T: T, GAS: gas, World: nproc})
	if err != nil {
		return fail("%v", err)
	}
	var logw *json.Encoder
	if *jsonLog != "" && l.lead() {
		f, err := os.Create(*jsonLog)
		if err != nil {
			return fail("--json-log: %v", err)
		}
		defer f.Close()
		logw = json.NewEncoder(f)
	}
	fmt.Fprintf(stdout, "dszero: %s | model %s (%s parameters) | data %s (%d tokens)\n", name, *modelArg, paramCount(mcfg.NumParams()), corpus.Name, corpus.Len())
	fmt.Fprintf(stdout, "        %s | batch %d × %d tokens × %d accumulation | %d steps | matmul: %s\n",
		summary(plan), B, T, gas, n, engine.Description())
	var bar *progressbar.ProgressBar
	if !*quiet {
		bar = progressbar.NewOptions(n, progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription("training"),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fail("--cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail("--cpuprofile: %v", err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	var first, last train.Record
	start := time.Now()
	var initRange func([]float32, int) error
	if weights != nil {
		initRange = weights.ReadRange
	}
	// The consolidated weights (FSDP's FULL_STATE_DICT, DeepSpeed's
	// stage3_gather_16bit_weights_on_model_save) go beside the checkpoints.
	if *saveModel == "" && *saveDir != "" && (fp.StateDict == fsdpconfig.FullStateDict || plan.Zero.Stage == 3 && plan.Zero.Gather16BitWeightsOnModelSave) {
		*saveModel = filepath.Join(*saveDir, "consolidated")
	}
	final, err := train.Run(train.Config{Plan: plan, Model: mcfg, InitRange: initRange, Seed: *seed, ReturnParams: *saveModel != "", Batches: loader, SeqLen: T, Steps: n, Devices: devs, Comm: l.comm(),
		Checkpoint: *ckpt || plan.ActivationCheckpointing.Present || fp.ActivationCkpt, CPUCheckpoint: plan.ActivationCheckpointing.CPUCheckpointing,
		KeepAfterForward: fp.KeepAfterForward, WrapMinNumParams: fp.WrapMinNumParams,
		SaveDir: *saveDir, SaveInterval: *saveEvery, LoadDir: *loadDir,
		Warn: func(msg string) { fmt.Fprintf(stderr, "dszero train: warning: %s\n", msg) }},
		func(r train.Record) error {
			if r.Step == 1 {
				first = r
			}
			last = r
			if bar != nil {
				bar.Add(1)
			}
			if logw != nil {
				if err := logw.Encode(r); err != nil {
					return fmt.Errorf("--json-log: %w", err)
				}
			}
			if every := plan.StepsPerPrint; every > 0 && r.Step%every == 0 || r.Step == 1 || int(r.Step) == n {
				if bar != nil {
					bar.Clear()
				}
				fmt.Fprintf(stdout, "step %5d/%d | loss %.4f | lr %.3e | loss scale %g | grad norm %.3f%s | %.0f tokens/s | peak %s%s\n",
					r.Step, n, r.Loss, r.LR, r.LossScale, r.GradNorm, skipped(r.Skipped), r.TokensPerS, mem.FormatBytes(r.Peak["total"]), maxRank(r, nproc))
				if b := r.Breakdown; b != nil {
					fmt.Fprintf(stdout, "      time (ms) | forward: %.1f | backward: %.1f | step: %.1f", b.ForwardMS, b.BackwardMS, b.StepMS)
					if b.Gathers > 0 {
						fmt.Fprintf(stdout, " | waited for all-gathers %.1f, reduce-scatters %.1f | %d units gathered, %d prefetched",
							b.GatherWaitMS, b.ReduceWaitMS, b.Gathers, b.Prefetched)
					}
					fmt.Fprintln(stdout)
				}
			}
			return nil
		})
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		return fail("%v", err)
	}
	if *saveModel != "" && l.lead() {
		if err := gpt.SaveDir(*saveModel, mcfg, final); err != nil {
			return fail("--save-model: %v", err)
		}
		fmt.Fprintf(stdout, "consolidated weights written to %s (model.safetensors + config.json)\n", *saveModel)
	}
	el := time.Since(start)
	fmt.Fprintf(stdout, "done: %d steps in %s, loss %.4f → %.4f, %.0f tokens/s overall\n", last.Step, el.Round(time.Millisecond), first.Loss, last.Loss,
		float64(int(last.Step)*B*T*gas*nproc)/el.Seconds())
	for i, a := range accts {
		r := ranks[i]
		if r > 0 && r < nproc-1 {
			continue // rank 0 and the last rank, whose partition holds the padding
		}
		s := a.Snapshot()
		who := ""
		if nproc > 1 {
			who = fmt.Sprintf(" (rank %d)", r)
		}
		for _, tier := range mem.Tiers() {
			if tier != mem.Device && s.PeakTotal[tier] == 0 {
				continue
			}
			var parts []string
			for _, c := range mem.Categories() {
				if v := s.PeakBytes(tier, c); v > 0 {
					parts = append(parts, fmt.Sprintf("%s %s", c, mem.FormatBytes(v)))
				}
			}
			what := map[mem.Tier]string{mem.Device: "device memory", mem.PinnedHost: "pinned host memory", mem.NVMe: "NVMe swap files"}[tier]
			fmt.Fprintf(stdout, "peak %s%s %s: %s\n", what, who, mem.FormatBytes(s.PeakTotal[tier]), strings.Join(parts, ", "))
		}
	}
	return 0
}

// maxRank is ", max over ranks X" when there are several ranks.
func maxRank(r train.Record, nproc int) string {
	if nproc == 1 {
		return ""
	}
	return fmt.Sprintf(" (max over %d ranks %s)", nproc, mem.FormatBytes(r.PeakMax["total"]))
}

func skipped(b bool) string {
	if b {
		return " (overflow: step skipped)"
	}
	return ""
}

// paramCount writes a parameter count in K, M or B.
func paramCount(n int) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
