package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExplainUnits: with --model, explain shows the stage 3 units of the
// model — one per block by default (gpt2: embeddings, 12 blocks, the
// tied head that also reads the embeddings), fewer with size-based
// wrapping — the persistent parameters, and the per-rank partitions; the
// JSON form carries the same report. A bad --model is a usage error.
func TestExplainUnits(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "z3.json")
	os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3}}`), 0o644)
	code, out, errs := runCLI("config", "explain", cfg, "--world-size", "4", "--model", "gpt2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"transformer layer based", "blocks.11", "also reads unit [0]", "persistent (always gathered): 98 parameters"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain --model gpt2 lacks %q:\n%s", want, out)
		}
	}
	code, out, errs = runCLI("config", "explain", cfg, "--world-size", "4", "--model", "gpt2", "--wrap-min-params", "20000000", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var e struct {
		Units *struct {
			Policy string `json:"wrap_policy"`
			Units  []struct {
				Name     string `json:"name"`
				Elements int    `json:"elements"`
			} `json:"units"`
			PerRank int `json:"partition_elements_per_rank"`
		} `json:"stage3_units"`
	}
	if err := json.Unmarshal([]byte(out), &e); err != nil || e.Units == nil {
		t.Fatalf("%v: %s", err, out)
	}
	total := 0
	for _, u := range e.Units.Units {
		total += u.Elements
	}
	// gpt2: 124,439,808 parameters, every one divisible by 4.
	if len(e.Units.Units) != 5 || total != 124439808 || e.Units.PerRank != 124439808/4 || !strings.Contains(e.Units.Policy, "size based") {
		t.Errorf("size-based units %+v", *e.Units)
	}
	if code, _, errs := runCLI("config", "explain", cfg, "--model", "gpt7"); code != 2 || !strings.Contains(errs, "gpt7") {
		t.Errorf("--model gpt7: exit %d, %s", code, errs)
	}
}
