package main

import (
	"encoding/json"
	"math"
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

// TestHybridAndFullStateDict: HYBRID_SHARD on 4 ranks in shard groups of
// 2 (--shard-group-size) trains like FULL_SHARD over all 4 (losses within
// 1e-4 relative: only the order of the sums differs, but both configs are
// bf16, and that order decides which way some bf16 roundings of the
// reduced gradients go — 1.6e-5 at step 2 on the fast path); with a
// FULL_STATE_DICT config, --save also writes the consolidated weights as
// a Hugging Face directory, which --model then loads.
func TestHybridAndFullStateDict(t *testing.T) {
	dir := t.TempDir()
	losses := func(log string) []float64 {
		raw, _ := os.ReadFile(log)
		var out []float64
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var r struct {
				Loss float64 `json:"loss"`
			}
			json.Unmarshal([]byte(line), &r)
			out = append(out, r.Loss)
		}
		return out
	}
	common := []string{"--nproc", "4", "--model", "tiny", "--data", "random", "--seq", "16", "--steps", "2", "--per_device_train_batch_size", "2", "--quiet"}
	hyb, full := filepath.Join(dir, "hybrid.jsonl"), filepath.Join(dir, "full.jsonl")
	if code, out, errs := runCLI(append([]string{"train", "--fsdp-config", fsdpCorpus + "pacman100__LLM-Workshop__code_assistant__training__configs__fsdp_config.yaml",
		"--shard-group-size", "2", "--json-log", hyb}, common...)...); code != 0 {
		t.Fatalf("hybrid: exit %d\n%s%s", code, out, errs)
	}
	save := filepath.Join(dir, "ck")
	if code, out, errs := runCLI(append([]string{"train", "--fsdp-config", fsdpCorpus + "huggingface__trl__examples__accelerate_configs__fsdp1.yaml",
		"--json-log", full, "--save", save}, common...)...); code != 0 || !strings.Contains(out, "consolidated weights written") {
		t.Fatalf("full shard: exit %d\n%s%s", code, out, errs)
	}
	a, b := losses(hyb), losses(full)
	if len(a) != 2 || len(b) != 2 {
		t.Fatalf("logs %v %v", a, b)
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-4*math.Abs(b[i]) {
			t.Errorf("step %d: HYBRID_SHARD loss %v, FULL_SHARD %v", i+1, a[i], b[i])
		}
	}
	if code, out, errs := runCLI("train", "--model", filepath.Join(save, "consolidated"), "--data", "random", "--seq", "16", "--steps", "1", "--quiet"); code != 0 {
		t.Errorf("--model of the consolidated weights: exit %d\n%s%s", code, out, errs)
	}
}
