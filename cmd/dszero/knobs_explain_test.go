package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExplainKnobs: config explain lists the training-loop knobs the plan
// turns on, each with its settings, and no section when none is on.
func TestExplainKnobs(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ds.json")
	js := `{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"},
		"flops_profiler": {"enabled": true, "profile_step": 3, "output_file": "p.txt"},
		"tensorboard": {"enabled": true, "output_path": "tb", "job_name": "j"},
		"comms_logger": {"enabled": true, "prof_all": false, "prof_ops": ["all_reduce"]},
		"progressive_layer_drop": {"enabled": true, "theta": 0.5, "gamma": 0.001},
		"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 8, "max_difficulty": 64,
			"schedule_type": "fixed_discrete", "schedule_config": {"difficulty": [8, 64], "max_step": [10]}}}`
	if err := os.WriteFile(cfg, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI("config", "explain", cfg)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	for _, want := range []string{"\nTraining loop\n",
		"  FLOPS profiler: the forwards of optimizer step 4 (after 3 finished), module_depth -1, top_modules 1, detailed true, to p.txt\n",
		"  tensorboard: event file in tb/j\n",
		"  comms logger: all_reduce, summary table after training (verbose false)\n",
		"  progressive layer drop: theta(t) = (1 − 0.5)·exp(−0.001·t) + 0.5",
		"  sequence-length curriculum (curriculum_learning): 8 to 64 tokens, fixed_discrete: lengths [8 64] up to steps [10]\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if err := os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, out, _ := runCLI("config", "explain", cfg); strings.Contains(out, "Training loop") {
		t.Errorf("a Training loop section without knobs:\n%s", out)
	}
}
