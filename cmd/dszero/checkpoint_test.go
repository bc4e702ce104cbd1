package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSaveLoadResume: --save writes DeepSpeed-layout checkpoints (every
// --save-interval steps and at the end, latest pointing at the last), and
// --load resumes from the latest one: 2 steps, save, resume to 4 logs the
// same steps 3 and 4 as 4 uninterrupted steps, at stages 1 and 3.
func TestSaveLoadResume(t *testing.T) {
	for _, stage := range []int{1, 3} {
		t.Run(fmt.Sprintf("stage%d", stage), func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "ds.json")
			os.WriteFile(cfg, []byte(fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
			  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": %d, "stage3_param_persistence_threshold": 0}}`, stage)), 0o644)
			args := []string{"train", "--deepspeed", cfg, "--nproc", "2", "--model", "tiny", "--data", "random", "--seq", "16", "--quiet"}
			run := func(log string, extra ...string) []float64 {
				t.Helper()
				if code, out, errs := runCLI(append(append(args, "--json-log", log), extra...)...); code != 0 {
					t.Fatalf("%v: exit %d\n%s%s", extra, code, out, errs)
				}
				raw, _ := os.ReadFile(log)
				var losses []float64
				for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
					var r struct {
						Loss float64 `json:"loss"`
					}
					json.Unmarshal([]byte(line), &r)
					losses = append(losses, r.Loss)
				}
				return losses
			}
			full := run(filepath.Join(dir, "full.jsonl"), "--steps", "4", "--save", filepath.Join(dir, "every"), "--save-interval", "2")
			ck := filepath.Join(dir, "ck")
			run(filepath.Join(dir, "first.jsonl"), "--steps", "2", "--save", ck)
			resumed := run(filepath.Join(dir, "resumed.jsonl"), "--steps", "4", "--load", ck)
			if !slices.Equal(resumed, full[2:]) {
				t.Errorf("resumed steps 3-4 %v, uninterrupted %v", resumed, full[2:])
			}
			for _, want := range []string{"global_step2", "global_step4", "latest"} {
				if _, err := os.Stat(filepath.Join(dir, "every", want)); err != nil {
					t.Errorf("--save-interval 2: %v", err)
				}
			}
			if latest, _ := os.ReadFile(filepath.Join(dir, "every", "latest")); string(latest) != "global_step4" {
				t.Errorf("latest is %q", latest)
			}
		})
	}
	if code, _, errs := runCLI("train", "--model", "tiny", "--data", "random", "--seq", "16", "--steps", "2", "--quiet", "--load", t.TempDir()); code != 1 || !strings.Contains(errs, "resuming from") {
		t.Errorf("--load of an empty directory: exit %d, %s", code, errs)
	}
}
