// Command dszero trains models with DeepSpeed-ZeRO semantics from the
// ds_config.json files people already have.
//
// Usage:
//
//	dszero train [--deepspeed ds_config.json] [--model PRESET|DIR] [--data FILE] [--nproc N] [HF flags]
//	mpirun -np N dszero train …   (one rank per process; build with -tags mpi)
//	dszero config check FILE... [--world-size N] [HF flags]
//	dszero config explain FILE [--world-size N] [HF flags] [--json]
//	dszero bench [--stages 0,1,2,3] [--offload none,cpu,nvme] [--nproc N] [--json OUT] [--plot OUT.png]
//	dszero export CKPT_DIR OUT_DIR [--tag TAG] [--dtype fp32|bf16|fp16]
//	dszero estimate --model PRESET|DIR | --params N [--num_gpus G] [--num_nodes M] [--deepspeed ds_config.json]
//	dszero conformance DIR... [--json OUT] [--only PATTERN]
//	dszero version | report | help [COMMAND]
//
// `dszero help COMMAND` (or `dszero COMMAND --help`) shows a command's
// flags and examples.
package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// command is one subcommand: how to call it, what it does, examples, and
// its entry point.
type command struct {
	name     string // "train", "config check"
	synopsis string
	summary  string
	examples []string
	run      func(args []string, stdout, stderr io.Writer) int
}

// commands are dszero's subcommands, in the order usage lists them.
func commands() []command {
	return []command{
		{name: "train", run: runTrain,
			synopsis: "dszero train [--deepspeed ds_config.json | --fsdp-config accelerate.yaml] [--model PRESET|DIR] [--data FILE]\n" +
				"    [--steps N] [--seq T] [--nproc N] [--save DIR [--save-interval N]] [--load DIR] [--json-log FILE] [HF flags]",
			summary: "train a GPT; with no arguments, the embedded small GPT on Tiny Shakespeare from an embedded ds_config.\n" +
				"--nproc N runs N data-parallel ranks in this process; mpirun -np N dszero train … runs one rank per\n" +
				"process (go build -tags mpi). HF's and DeepSpeed's names work beside dszero's: --save_steps\n" +
				"(--save-interval), --resume_from_checkpoint PATH|true (--load; true: the newest checkpoint under\n" +
				"--output_dir or --save), --num_gpus (--nproc). --output_dir saves as HF's Trainer does (checkpoint-N\n" +
				"folders, trainer_state.json, --save_total_limit); --save as DeepSpeed does (global_stepN).\n" +
				"--per_device_train_batch_size (--micro-batch: alone it sets\n" +
				"train_micro_batch_size_per_gpu; with other HF flags \"auto\" is filled as HF's Trainer fills it).",
			examples: []string{
				"dszero train",
				"dszero train --deepspeed examples/ds_config_zero3.json --nproc 2 --steps 20 --save /tmp/ckpt --save-interval 10",
				"dszero train --deepspeed examples/ds_config_zero3.json --nproc 2 --steps 40 --load /tmp/ckpt",
			}},
		{name: "config check", run: runCheck,
			synopsis: "dszero config check FILE... [--world-size N] [HF flags]",
			summary: "say whether DeepSpeed would accept each config (or Accelerate/Trainer each FSDP setup), with every\n" +
				"problem as file:line:col: path: severity: message; exit 0 (accepted), 1 (rejected), 2 (usage)",
			examples: []string{
				"dszero config check --world-size 8 examples/ds_config_zero2.json",
				"dszero config check --world-size 8 --per_device_train_batch_size 4 --learning_rate 2e-5 --max_steps 1000 --warmup_steps 100 --bf16 --hidden_size 768 examples/ds_config_hf_auto.json",
			}},
		{name: "config explain", run: runExplain,
			synopsis: "dszero config explain FILE [--world-size N] [--model PRESET|DIR] [HF flags] [--json]",
			summary: "the resolved plan: stage, partitioning, batch arithmetic, precision, offload, and every non-default\n" +
				"setting with its source; with --model, the units stage 3 gathers the model in",
			examples: []string{
				"dszero config explain examples/ds_config_zero2.json --world-size 4",
				"dszero config explain examples/ds_config_zero3.json --world-size 4 --model gpt2",
			}},
		{name: "bench", run: runBench,
			synopsis: "dszero bench [--deepspeed ds_config.json] [--stages 0,1,2,3] [--offload none,cpu,nvme] [--nproc N]\n" +
				"    [--model PRESET] [--micro-batch B] [--seq T] [--steps S] [--device-memory X] [--json OUT] [--plot OUT.png|.svg]",
			summary: "train each variant a few steps and report its peak bytes per rank by tier, its model states beside\n" +
				"dszero's estimate, step time and tokens/s; a variant over --device-memory is reported as OOM",
			examples: []string{
				"dszero bench --model small --nproc 2 --offload none,cpu,nvme --device-memory 64MiB --plot /tmp/bench.png",
				"dszero bench --deepspeed examples/ds_config_zero2.json --stages 2,3 --json -",
			}},
		{name: "export", run: runExport,
			synopsis: "dszero export CKPT_DIR OUT_DIR [--tag TAG] [--dtype fp32|bf16|fp16] [--model PRESET|DIR]",
			summary: "the consolidated weights of a checkpoint (dszero's or DeepSpeed's, any stage and world size) as\n" +
				"OUT_DIR/model.safetensors, streamed one piece at a time (zero_to_fp32 without its memory)",
			examples: []string{
				"dszero export checkpoint/testdata/ds_mlp_z2_fp32 /tmp/dszero_export",
				"dszero export /tmp/ckpt /tmp/model --dtype bf16 --model small",
			}},
		{name: "estimate", run: runEstimate,
			synopsis: "dszero estimate --model PRESET|DIR | --params N [--largest-layer N] [--num_gpus G] [--num_nodes M]\n" +
				"    [--deepspeed ds_config.json] [--offload none|cpu|nvme] [--seq T] [HF flags] [--json]",
			summary: "memory before a run: DeepSpeed's estimators as DeepSpeed prints them, and dszero's per-rank estimate\n" +
				"for the config (model states by stage and tier, buffers, activations with and without checkpointing)",
			examples: []string{
				"dszero estimate --model gpt2-medium --num_gpus 4 --num_nodes 1",
				"dszero estimate --params 7B --largest-layer 500M --num_gpus 8 --offload cpu",
			}},
		{name: "conformance", run: runConformance,
			synopsis: "dszero conformance DIR... [--json OUT] [--only PATTERN]",
			summary: "run every reference case under the directories (DeepSpeed's recorded runs, e.g. conformance/testdata)\n" +
				"on its world size and compare losses, lr, grad norms and final weights; exit 0 only when every case passes",
			examples: []string{
				"dszero conformance conformance/testdata",
				"dszero conformance conformance/testdata/deepspeed-0.14.5-cpu --only 'mlp/z2_*' --json /tmp/conformance.json",
			}},
		{name: "version", run: runVersion,
			synopsis: "dszero version   (or dszero --version)",
			summary:  "this binary's version, commit, Go version and build tags",
			examples: []string{"dszero version"}},
		{name: "report", run: runReport,
			synopsis: "dszero report [--json]",
			summary: "what this machine offers dszero, like DeepSpeed's ds_report: the build, the BLAS kernel in use, the\n" +
				"MPI, CUDA, NCCL, NVRTC and cuBLASLt libraries found (not loaded) with their versions, and the CPU's features",
			examples: []string{"dszero report", "dszero report --json"}},
	}
}

// lookup finds the command args name ("config" takes its subcommand).
func lookup(args []string) (command, bool) {
	name := args[0]
	if name == "config" && len(args) > 1 {
		name += " " + args[1]
	}
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// usage is dszero's top-level help.
func usage() string {
	var b strings.Builder
	b.WriteString("dszero: a DeepSpeed-ZeRO-compatible training engine in Go\n\nUsage:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %s\n%s\n", strings.ReplaceAll(c.synopsis, "\n", "\n  "), indent(c.summary, "        "))
	}
	b.WriteString(`  dszero help COMMAND   (or dszero COMMAND --help)
        a command's flags and examples

HF flags (fill "auto" like HF's Trainer): --learning_rate --per_device_train_batch_size
  --gradient_accumulation_steps --max_grad_norm --warmup_steps --max_steps
  --weight_decay --adam_beta1 --adam_beta2 --adam_epsilon --fp16 --bf16 --hidden_size
`)
	return b.String()
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) == 1 {
			fmt.Fprint(stdout, usage())
			return 0
		}
		return help(args[1:], stdout, stderr)
	case "-version", "--version":
		return runVersion(nil, stdout, stderr)
	case "config":
		if len(args) == 1 || args[1] != "check" && args[1] != "explain" {
			if len(args) > 1 && wantsHelp(args[1:2]) {
				return help(args[:1], stdout, stderr)
			}
			fmt.Fprintf(stderr, "dszero config: want check or explain (dszero help config)\n")
			return 2
		}
	}
	c, ok := lookup(args)
	if !ok {
		fmt.Fprintf(stderr, "dszero: unknown command %q\n\n%s", args[0], usage())
		return 2
	}
	rest := args[1+strings.Count(c.name, " "):]
	if wantsHelp(rest) {
		return help(args, stdout, stderr)
	}
	return c.run(rest, stdout, stderr)
}

// wantsHelp reports whether a command's arguments ask for its help.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// help prints a command's synopsis, summary, examples and flags (exit 0);
// "config" alone lists its two subcommands.
func help(args []string, stdout, stderr io.Writer) int {
	if args[0] == "config" && (len(args) == 1 || args[1] != "check" && args[1] != "explain") {
		for _, name := range []string{"check", "explain"} {
			c, _ := lookup([]string{"config", name})
			fmt.Fprintf(stdout, "usage: %s\n%s\n\n", c.synopsis, indent(c.summary, "    "))
		}
		fmt.Fprintln(stdout, "dszero help config check (or explain) shows the flags and examples.")
		return 0
	}
	c, ok := lookup(args)
	if !ok {
		fmt.Fprintf(stderr, "dszero help: unknown command %q\n\n%s", args[0], usage())
		return 2
	}
	fmt.Fprintf(stdout, "usage: %s\n\n%s\n", c.synopsis, c.summary)
	if len(c.examples) > 0 {
		fmt.Fprintf(stdout, "\nExamples:\n")
		for _, e := range c.examples {
			fmt.Fprintf(stdout, "  %s\n", e)
		}
	}
	if flags := c.flags(); flags != "" {
		fmt.Fprintf(stdout, "\nFlags:\n%s", flags)
	}
	return 0
}

// flags is the command's flag list, as its own flag set prints it: the
// command runs with -h and a flagHelp as its stderr, where the flag set
// writes its defaults (see newFlagSet) instead of doing anything.
func (c command) flags() string {
	var h flagHelp
	c.run([]string{"-h"}, io.Discard, &h)
	lines := strings.Split(h.String(), "\n")
	lines = slices.DeleteFunc(lines, func(l string) bool { return strings.HasPrefix(l, "Usage of ") })
	for i, l := range lines {
		// A flag set printed by the flag package (PrintDefaults) writes
		// -name; the help text writes --name.
		if strings.HasPrefix(l, "  -") && !strings.HasPrefix(l, "  --") {
			lines[i] = "  -" + l[2:]
		}
	}
	return strings.Join(lines, "\n")
}
