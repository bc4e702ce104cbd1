package main

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/model/llama"
)

//go:embed default_ds_config.json
var defaultConfig []byte

// runTrain is `dszero train`. It reads in one order, one step a function:
// the flags, who runs which ranks (launch), whether what the run will
// write can be written, the plan (a ds_config or an FSDP setup), each
// rank's device, the model, the data, then training and the report.
func runTrain(args []string, stdout, stderr io.Writer) (code int) {
	f, err := parseTrainFlags(args, stderr)
	if err != nil {
		return exitCode(err, "dszero train", stderr)
	}
	j := &trainJob{f: f, stdout: stdout, stderr: stderr, diagw: stderr}
	if err := j.launch(); err != nil {
		return exitCode(err, "dszero train", stderr)
	}
	// Every rank finalises MPI when training succeeded (see
	// launch.finalize).
	defer func() {
		if code != 0 {
			j.l.awaitAbort()
			return
		}
		if err := j.l.finalize(); err != nil {
			code = j.fail(err)
		}
	}()
	defer j.close()
	for _, step := range []func() error{j.checkOutputs, j.compilePlan, j.newRanks, j.loadModel, j.loadData} {
		if err := step(); err != nil {
			return j.fail(err)
		}
	}
	res, err := j.train()
	if err != nil {
		return j.fail(err)
	}
	if err := j.report(res); err != nil {
		return j.fail(err)
	}
	return 0
}

// trainFlags are dszero train's command line.
type trainFlags struct {
	cfgPath                      string // --deepspeed
	fsdpFile, fsdpOpts, fsdpJSON string // --fsdp-config, --fsdp, --fsdp_config
	shardGroup                   int
	saveModel                    string
	modelArg, dataPath           string
	steps, seq                   int
	jsonLog, devMem              string
	seed                         uint64
	gradCkpt                     bool
	blasName                     string
	threads                      int
	fastMath                     bool // --math fast (mathFlag)
	quiet                        bool
	cpuProfile                   string
	saveDir                      string
	saveEvery                    int
	saveAsync                    bool
	trainer                      *trainerOpts // --output_dir and the Trainer's other checkpoint flags
	loadDir                      string
	commTimeout                  time.Duration
	nproc                        int
	nprocSet                     bool // --nproc or --num_gpus was given
	hf                           *hfOptions
	llama                        llamaFlags // train_llama.go
}

// usageError is a command line that cannot run (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// exitCode prints err (unless the flag package already did) and returns
// 2 for a usage error, 1 otherwise.
func exitCode(err error, cmd string, stderr io.Writer) int {
	var ue usageError
	switch {
	case errors.Is(err, errFlagsPrinted):
		return 2
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %s\n", cmd, ue.msg)
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
	return 1
}

// errFlagsPrinted: the flag package has reported the bad flag.
var errFlagsPrinted = errors.New("bad flags")

func parseTrainFlags(args []string, stderr io.Writer) (*trainFlags, error) {
	f := &trainFlags{steps: 0, seed: 1234, nproc: 1, fastMath: true}
	fs := newFlagSet("dszero train", stderr)
	fs.StringVar(&f.cfgPath, "deepspeed", "", "ds_config.json (default: the embedded default config)")
	fs.StringVar(&f.fsdpFile, "fsdp-config", "", "an Accelerate FSDP config (YAML), instead of --deepspeed")
	fs.StringVar(&f.fsdpOpts, "fsdp", "", `HF Trainer's --fsdp options, e.g. "full_shard auto_wrap", instead of --deepspeed`)
	fs.StringVar(&f.fsdpJSON, "fsdp_config", "", "HF Trainer's fsdp_config JSON (with --fsdp)")
	intAtLeast(fs, &f.shardGroup, "shard-group-size", 0, "ranks", "HYBRID_SHARD: ranks per shard group (default: the processes of one machine)")
	fs.StringVar(&f.saveModel, "save-model", "", "write the consolidated final weights as a Hugging Face directory transformers loads (config.json, the weights, and for the Llama family generation_config.json and the tokenizer files)")
	fs.StringVar(&f.modelArg, "model", "small", "model preset ("+strings.Join(append(gpt.PresetNames(), llama.PresetNames()...), ", ")+") or a Hugging Face directory (config.json + model.safetensors, or shards with model.safetensors.index.json) of model_type gpt2, llama, qwen2, qwen3 or mistral")
	fs.StringVar(&f.dataPath, "data", "", "training text, a nanoGPT .bin of uint16 token ids, or \"random\" (uniform ids, for throughput runs) (default: embedded Tiny Shakespeare)")
	intAtLeast(fs, &f.steps, "steps", 1, "optimizer steps (leave --steps out for the default)",
		"optimizer steps; with --load the total, counting the checkpoint's (default: --max_steps, else the scheduler's total_num_steps, else 100)")
	intAtLeast(fs, &f.seq, "seq", 1, "tokens per sample", "tokens per sample (default: min(model context, 128))")
	fs.StringVar(&f.jsonLog, "json-log", "", "write one JSON object per optimizer step to this file")
	fs.StringVar(&f.devMem, "device-memory", "", "per-rank device memory budget with its unit, e.g. 4GiB or 512MiB (default unlimited)")
	fs.Uint64Var(&f.seed, "seed", f.seed, "seed of the random initialization")
	fs.BoolVar(&f.gradCkpt, "gradient_checkpointing", false, "recompute each block in backward (also on with an activation_checkpointing block)")
	fs.StringVar(&f.blasName, "blas", "auto", "matmul backend: auto, openblas or gonum")
	intAtLeast(fs, &f.threads, "threads", 0, "threads", threadsUsage)
	fs.Var(mathFlag{&f.fastMath}, "math", mathUsage)
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile (go tool pprof) to this file")
	save := aliasVar(fs, &f.saveDir, parseString, "write DeepSpeed-layout checkpoints DIR/global_stepN to this directory (after the last step, and every --save-interval steps)",
		"save")
	f.trainer = trainerFlags(fs)
	every := aliasVar(fs, &f.saveEvery, atLeast(0, "steps"), "steps between checkpoints (with --save or --output_dir; 0: only after the last step)", "save-interval", "save_steps")
	fs.BoolVar(&f.saveAsync, "save-async", false, "with --save: write each checkpoint in the background while training goes on, from a snapshot of the state in host memory (costs the model states' size; default: synchronous, streamed from the partitions)")
	fs.StringVar(&f.loadDir, "load", "", "resume from this checkpoint directory's latest checkpoint (--steps is then the total)")
	fs.DurationVar(&f.commTimeout, "comm-timeout", comm.DefaultTimeout, "a collective that does not complete within this fails every rank, naming the step, the collective and the ranks that did not arrive (DeepSpeed's and torch's default)")
	var resume string
	fs.StringVar(&resume, "resume_from_checkpoint", "", `HF's flag: "true" resumes from the latest checkpoint under --output_dir (--save), a path from that checkpoint directory (as --load)`)
	procs := aliasVar(fs, &f.nproc, atLeast(1, "ranks"), "data-parallel ranks, run in this process (the plan's world size); under mpirun, one rank per process instead",
		"nproc", "num_gpus")
	f.hf = hfFlags(fs)
	registerLlamaFlags(fs, &f.llama)
	if err := fs.Parse(args); err != nil {
		return nil, errFlagsPrinted
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q", fs.Arg(0))
	}
	f.nprocSet = procs.set()
	if err := f.trainer.resolve(f, save.set(), resume); err != nil {
		return nil, err
	}
	switch {
	case f.fsdpFile != "" && f.fsdpJSON != "":
		return nil, usagef("--fsdp-config (Accelerate) and --fsdp_config (Trainer) are two dialects; give one")
	case f.fsdp().given() && f.cfgPath != "":
		return nil, usagef("--deepspeed and an FSDP setup (--fsdp-config, --fsdp) both say how to shard; give one")
	case f.commTimeout <= 0:
		return nil, usagef("--comm-timeout %v: want a positive duration, e.g. 30m or 90s", f.commTimeout)
	case every.set() && f.saveDir == "":
		return nil, usagef("--%s %d needs --save DIR (or --output_dir) to write the checkpoints to", every.by, f.saveEvery)
	case f.saveAsync && !save.set():
		return nil, usagef("--save-async needs --save DIR (DeepSpeed's layout) to write the checkpoints to; the Trainer's --output_dir saves synchronously")
	}
	return f, nil
}

// fsdp is the FSDP setup the flags give, if any.
func (f *trainFlags) fsdp() fsdpSource {
	return fsdpSource{file: f.fsdpFile + f.fsdpJSON, options: f.fsdpOpts, shardGroup: f.shardGroup}
}

// launch decides who runs which ranks: --nproc in this process, or one
// rank per process under mpirun; then only rank 0 prints and logs. An
// FSDP setup is read first, for its num_processes (the in-process ranks
// unless --nproc says otherwise).
func (j *trainJob) launch() error {
	f := j.f
	nproc, nprocSet := f.nproc, f.nprocSet
	if src := f.fsdp(); src.given() {
		world := 0
		if nprocSet {
			world = nproc
		}
		if j.fp, j.fdiags = src.load(world, f.hf.forFSDP(), f.gradCkpt); !j.fdiags.HasErrors() && !nprocSet && j.fp.NumProcesses > 1 {
			nproc, nprocSet = j.fp.NumProcesses, true
		}
	}
	l, err := newLaunch(comm.EnvMap(os.Environ()), nproc, nprocSet, f.commTimeout, j.stderr)
	if err != nil {
		return err
	}
	j.l, j.nproc = l, l.size
	if l.external() && !l.lead() {
		j.stdout, j.diagw, f.quiet = io.Discard, io.Discard, true
	}
	return nil
}

// fail prints err, naming this process's rank under a launcher, and
// returns exit code 1.
func (j *trainJob) fail(err error) int {
	if j.l != nil && j.l.external() {
		err = fmt.Errorf("rank %d: %w", j.l.env.Rank, err)
	}
	fmt.Fprintf(j.stderr, "dszero train: %v\n", err)
	return 1
}
