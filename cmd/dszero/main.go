// Command dszero trains models with DeepSpeed-ZeRO semantics from the
// ds_config.json files people already have.
//
// Usage:
//
//	dszero train [--deepspeed ds_config.json] [--model PRESET|DIR] [--data FILE] [--nproc N] [HF flags]
//	mpirun -np N dszero train …   (one rank per process; build with -tags mpi)
//	dszero config check FILE... [--world-size N] [HF flags]
//	dszero config explain FILE [--world-size N] [HF flags] [--json]
//	dszero estimate --model PRESET|DIR | --params N [--largest-layer N] [--num_gpus G] [--num_nodes M] [--deepspeed ds_config.json] [--offload DEVICE] [--json]
//	dszero conformance DIR... [--json OUT] [--only PATTERN]
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `dszero: a DeepSpeed-ZeRO-compatible training engine in Go

Usage:
  dszero train [--deepspeed ds_config.json] [--model PRESET|DIR] [--data FILE] [--steps N]
        [--seq T] [--json-log FILE] [--device-memory 4GiB] [HF flags]
        train a GPT; with no arguments, the embedded small GPT on Tiny Shakespeare;
        --nproc N runs N data-parallel ranks in this process, and
        mpirun -np N dszero train … one rank per process (go build -tags mpi)
  dszero config check FILE... [--world-size N] [HF flags]
        say whether DeepSpeed would accept each config, with every problem as
        file:line:col: path: message; exit 0 (accepted), 1 (rejected), 2 (usage)
  dszero config explain FILE [--world-size N] [HF flags] [--json]
        the resolved plan: stage, partitioning, batch arithmetic, precision,
        offload, and every non-default knob with its source
  dszero bench [--deepspeed ds_config.json] [--stages 0,1,2,3] [--offload none,cpu,nvme]
        [--nproc N] [--model PRESET] [--micro-batch B] [--seq T] [--steps S]
        [--device-memory X] [--json OUT] [--plot OUT.png|.svg]
        train each variant a few steps and report its peak bytes per rank by tier,
        its model states beside dszero's estimate, step time and tokens/s; over
        --device-memory it is reported as OOM
  dszero export CKPT_DIR OUT_DIR [--tag TAG] [--dtype fp32|bf16|fp16] [--model PRESET|DIR]
        the consolidated weights of a checkpoint (dszero's or DeepSpeed's, any
        stage and world size) as OUT_DIR/model.safetensors, streamed one piece at
        a time (zero_to_fp32 without its memory)
  dszero estimate --model PRESET|DIR | --params N [--largest-layer N] [--num_gpus G]
        [--num_nodes M] [--deepspeed ds_config.json] [--offload none|cpu|nvme] [--seq T]
        [HF flags] [--json]
        memory before a run: DeepSpeed's estimators as DeepSpeed prints them, and
        dszero's per-rank estimate for the config (model states by stage and tier,
        buffers, activations with and without checkpointing)
  dszero conformance DIR... [--json OUT] [--only PATTERN]
        run every reference case under the directories (DeepSpeed's recorded runs,
        e.g. conformance/testdata) on its world size and compare losses, lr, grad
        norms and final weights; exit 0 only when every case passes

HF flags (fill "auto" like HF's Trainer): --learning_rate --per_device_train_batch_size
  --gradient_accumulation_steps --max_grad_norm --warmup_steps --max_steps
  --weight_decay --adam_beta1 --adam_beta2 --adam_epsilon --fp16 --bf16 --hidden_size
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "config":
		return runConfig(args[1:], stdout, stderr)
	case "train":
		return runTrain(args[1:], stdout, stderr)
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "export":
		return runExport(args[1:], stdout, stderr)
	case "estimate":
		return runEstimate(args[1:], stdout, stderr)
	case "conformance":
		return runConformance(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "dszero: unknown command %q\n\n%s", args[0], usage)
	return 2
}
