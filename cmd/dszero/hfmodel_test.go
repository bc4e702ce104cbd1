package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHFAutoBucketsTakeTheModelsHiddenSize: in HF mode the "auto" bucket
// sizes of a ZeRO-3 config are filled from --model's hidden size (the
// tiny preset's 64: reduce_bucket_size 64·64), as the Trainer fills them
// from model.config.hidden_size; --hidden_size still wins.
func TestHFAutoBucketsTakeTheModelsHiddenSize(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ds.json")
	js := `{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
		"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}}`
	if err := os.WriteFile(cfg, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(tinyTrain("--quiet", "--deepspeed", cfg, "--steps", "1", "--learning_rate", "1e-4", "--per_device_train_batch_size", "2")...)
	if code != 0 || strings.Contains(errs, "hidden size") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCLI("config", "explain", "--hidden_size", "10", "--learning_rate", "1e-4", cfg)
	if code != 0 || !regexp.MustCompile(`(?m)^\s*zero_optimization.reduce_bucket_size\s+100\s+auto→hf`).MatchString(out) {
		t.Errorf("explain with --hidden_size 10: exit %d\n%s%s", code, out, errs)
	}
}
