package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainBadInputs: every bad input is a clear error (exit 1), never a panic.
func TestTrainBadInputs(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, nil, 0o644)
	badModel := filepath.Join(dir, "model")
	os.MkdirAll(badModel, 0o755)
	os.WriteFile(filepath.Join(badModel, "config.json"), []byte(`{"n_embd": 64, "n_layer": 1, "n_head": 4, "n_positions": 32, "vocab_size": 256}`), 0o644)
	stage3 := filepath.Join(dir, "z3.json")
	os.WriteFile(stage3, []byte(`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "offload_param": {"device": "nvme", "nvme_path": "/nonexistent"}}}`), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--data", empty}, "empty"},
		{[]string{"--data", filepath.Join(dir, "missing.txt")}, "no such file"},
		{[]string{"--model", "gpt5"}, "unknown preset"},
		{[]string{"--model", badModel}, "model.safetensors"},
		{[]string{"--seq", "4096"}, "context"},
		{[]string{"--deepspeed", filepath.Join(dir, "none.json")}, "no such file"},
		{[]string{"--deepspeed", stage3}, "offload_param.nvme_path \"/nonexistent\" does not exist"},
		{[]string{"--device-memory", "12 parsecs"}, "--device-memory"},
		{[]string{"--device-memory", "1MiB"}, "out of device memory"},
	}
	for _, tc := range cases {
		code, out, errs := runCLI(append([]string{"train", "--quiet", "--steps", "1"}, tc.args...)...)
		if code != 1 || !strings.Contains(out+errs, tc.want) {
			t.Errorf("%v: exit %d, want 1 and %q in\n%s%s", tc.args, code, tc.want, out, errs)
		}
	}
}

// TestTrainJSONLog runs a few steps of the tiny model and checks the log.
func TestTrainJSONLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log.jsonl")
	code, out, errs := runCLI("train", "--quiet", "--model", "tiny", "--steps", "3", "--seq", "16", "--json-log", log, "--data", "random")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d log lines", len(lines))
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[2]), &rec); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"step", "loss", "lr", "loss_scale", "grad_norm", "skipped", "tokens_per_s", "peak_bytes"} {
		if _, ok := rec[k]; !ok {
			t.Errorf("log record lacks %q: %v", k, rec)
		}
	}
}

// TestTrainNproc: --nproc 2 (and its alias --num_gpus) trains the same
// global batches as one rank with twice the accumulation steps, to float32
// rounding, and logs the largest peak over the ranks; the ZeRO stages
// agree with stage 0.
func TestTrainNproc(t *testing.T) {
	dir := t.TempDir()
	logLosses := func(stage int, args ...string) []float64 {
		t.Helper()
		cfg := filepath.Join(dir, "ds.json")
		os.WriteFile(cfg, []byte(fmt.Sprintf(`{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
		  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": %d}}`, stage)), 0o644)
		log := filepath.Join(dir, "log.jsonl")
		code, out, errs := runCLI(append([]string{"train", "--quiet", "--model", "tiny", "--steps", "3", "--seq", "16", "--data", "random",
			"--blas", "gonum", "--deepspeed", cfg, "--json-log", log}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errs)
		}
		raw, _ := os.ReadFile(log)
		var losses []float64
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var rec struct {
				Loss    float64          `json:"loss"`
				PeakMax map[string]int64 `json:"peak_bytes_max_rank"`
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatal(err)
			}
			if rec.PeakMax["total"] <= 0 {
				t.Errorf("%v: no peak_bytes_max_rank in %s", args, line)
			}
			losses = append(losses, rec.Loss)
		}
		return losses
	}
	one := logLosses(0)
	for _, tc := range []struct {
		stage int
		args  []string
	}{{0, []string{"--nproc", "2"}}, {1, []string{"--num_gpus", "2"}}, {2, []string{"--nproc", "4"}}} {
		got := logLosses(tc.stage, tc.args...)
		for i := range one {
			if d := math.Abs(got[i]-one[i]) / one[i]; d > 1e-6 {
				t.Errorf("stage %d %v: step %d loss %.9g, one rank %.9g", tc.stage, tc.args, i+1, got[i], one[i])
			}
		}
	}
	if code, _, errs := runCLI("train", "--quiet", "--nproc", "0"); code != 2 || !strings.Contains(errs, "-nproc") {
		t.Errorf("--nproc 0: exit %d, %s", code, errs)
	}
}
