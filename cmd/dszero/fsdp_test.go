package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const fsdpCorpus = "../../fsdpconfig/testdata/corpus/"

// TestTrainFSDP: dszero train takes an Accelerate FSDP config instead of a
// ds_config. FULL_SHARD and SHARD_GRAD_OP (the same file but for the
// strategy, and activation checkpointing) log the same losses — they
// differ in memory, not in numbers —
// and a --deepspeed config together with an FSDP one is a usage error.
func TestTrainFSDP(t *testing.T) {
	dir := t.TempDir()
	logs := map[string]string{}
	for _, f := range []string{"BenasdTW__LLMTrain__fsdp.yaml", "BenasdTW__LLMTrain__fsdp_grad_op.yaml"} {
		log := filepath.Join(dir, f+".jsonl")
		code, out, errs := runCLI("train", "--fsdp-config", fsdpCorpus+f, "--nproc", "2", "--model", "tiny", "--data", "random", "--steps", "2", "--seq", "16",
			"--per_device_train_batch_size", "2", "--quiet", "--json-log", log)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", f, code, out, errs)
		}
		if !strings.Contains(out, "ZeRO stage 3") {
			t.Errorf("%s: the header does not say stage 3:\n%s", f, out)
		}
		raw, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		var losses []string
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			_, rest, _ := strings.Cut(line, `"loss":`)
			v, _, _ := strings.Cut(rest, ",")
			losses = append(losses, v)
		}
		logs[f] = strings.Join(losses, " ")
	}
	if a, b := logs["BenasdTW__LLMTrain__fsdp.yaml"], logs["BenasdTW__LLMTrain__fsdp_grad_op.yaml"]; a != b || a == "" {
		t.Errorf("FULL_SHARD losses %s, SHARD_GRAD_OP %s", a, b)
	}
	if code, _, errs := runCLI("train", "--fsdp-config", fsdpCorpus+"BenasdTW__LLMTrain__fsdp.yaml", "--deepspeed", "../../examples/ds_config_zero3.json"); code != 2 || !strings.Contains(errs, "give one") {
		t.Errorf("--deepspeed with --fsdp-config: exit %d, %s", code, errs)
	}
}

// TestCheckExplainFSDP: config check reads Accelerate YAML and Trainer
// fsdp_config JSON as FSDP setups, and explain shows the FSDP plan beside
// the ds_config that means the same.
func TestCheckExplainFSDP(t *testing.T) {
	code, out, _ := runCLI("config", "check", fsdpCorpus+"BenasdTW__LLMTrain__fsdp_grad_op.yaml", fsdpCorpus+"tom-peter12__T5-Parallelism__fsdp_config.json",
		fsdpCorpus+"OptimalScale__LMFlow__configs__accelerate_fsdp_config.yaml")
	if code != 1 || !strings.Contains(out, "fsdp_grad_op.yaml: ACCEPT: FSDP1 SHARD_GRAD_OP → ZeRO stage 3 keeping parameters") ||
		!strings.Contains(out, "fsdp_config.json: ACCEPT: FSDP1 FULL_SHARD") || !strings.Contains(out, "accelerate_fsdp_config.yaml: REJECT") {
		t.Errorf("check: exit %d\n%s", code, out)
	}
	code, out, errs := runCLI("config", "explain", fsdpCorpus+"BenasdTW__LLMTrain__fsdp_grad_op.yaml")
	if code != 0 || !strings.Contains(out, "The same as a ds_config") || !strings.Contains(out, `"stage": 3`) || !strings.Contains(out, "ZeRO stage 3: parameters are split too") {
		t.Errorf("explain: exit %d\n%s%s", code, out, errs)
	}
}
