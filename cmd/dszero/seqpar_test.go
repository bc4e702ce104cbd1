package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainSeqParallel: `dszero train` with sequence_parallel_size 2 on 4
// ranks says so in its banner and logs the losses of one rank taking the
// same global batch (2 × 2 micro-batches: accumulation 2 on one rank)
// within 1e-6 relative; heads the size does not divide are refused
// naming the key, with exit 1 before any step.
func TestTrainSeqParallel(t *testing.T) {
	dir := t.TempDir()
	write := func(name, js string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sp := write("sp.json", `{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "sequence_parallel_size": 2, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3}}`)
	one := write("one.json", `{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3}}`)
	code, out, errs := runCLI(tinyTrain("--quiet", "--steps", "3", "--nproc", "4", "--deepspeed", sp, "--json-log", filepath.Join(dir, "sp.jsonl"))...)
	if code != 0 {
		t.Fatalf("sp 2 on 4 ranks: exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, "Ulysses: sequence_parallel_size 2, each of the 2 groups") {
		t.Errorf("the banner does not name the groups:\n%s", out)
	}
	if code, out, errs := runCLI(tinyTrain("--quiet", "--steps", "3", "--nproc", "1", "--deepspeed", one, "--json-log", filepath.Join(dir, "one.jsonl"))...); code != 0 {
		t.Fatalf("one rank: exit %d\n%s%s", code, out, errs)
	}
	got, want := logLosses(t, filepath.Join(dir, "sp.jsonl")), logLosses(t, filepath.Join(dir, "one.jsonl"))
	if len(got) != 3 || len(want) != 3 {
		t.Fatalf("losses: %v and %v, want 3 steps each", got, want)
	}
	for s, w := range want {
		if d := math.Abs(got[s]-w) / w; d > 1e-6 {
			t.Errorf("step %d: loss %v with sp 2, %v on one rank (%.2g relative)", s, got[s], w, d)
		}
	}
	bad := write("sp3.json", `{"train_micro_batch_size_per_gpu": 2, "sequence_parallel_size": 3, "optimizer": {"type": "AdamW"}}`)
	code, out, errs = runCLI(tinyTrain("--quiet", "--steps", "1", "--nproc", "3", "--seq", "18", "--deepspeed", bad)...)
	if code == 0 || !strings.Contains(errs, "sequence_parallel_size 3 does not divide the GPT's 4 attention heads") || strings.Contains(out, "loss ") {
		t.Errorf("sp 3 with 4 heads: exit %d\n%s%s", code, out, errs)
	}
}
