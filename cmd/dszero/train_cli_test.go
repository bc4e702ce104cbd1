package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tinyTrain is a dszero train command line on the tiny model and random
// data, quick enough to run many times.
func tinyTrain(extra ...string) []string {
	return append([]string{"train", "--model", "tiny", "--data", "random", "--seq", "16", "--blas", "gonum"}, extra...)
}

// logLosses reads the losses of a --json-log file by step.
func logLosses(t *testing.T, path string) map[int64]float64 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]float64{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r struct {
			Step int64   `json:"step"`
			Loss float64 `json:"loss"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		out[r.Step] = r.Loss
	}
	return out
}

// TestTrainResumeSummary: a resumed run says which checkpoint it resumed
// from and which it saved (with its size and time), and its summary counts
// only the steps it ran, from the first of them: not "4 steps, loss
// 0.0000 → …" for 2.
func TestTrainResumeSummary(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	code, out, errs := runCLI(tinyTrain("--quiet", "--steps", "2", "--save", ck)...)
	if code != 0 {
		t.Fatalf("first run: exit %d\n%s%s", code, out, errs)
	}
	if !regexp.MustCompile(`(?m)^saved ` + regexp.QuoteMeta(filepath.Join(ck, "global_step2")) + ` \([0-9.]+ [KM]iB, [0-9.]+ s\)$`).MatchString(out) {
		t.Errorf("first run does not say it saved global_step2:\n%s", out)
	}
	log := filepath.Join(dir, "resumed.jsonl")
	code, out, errs = runCLI(tinyTrain("--quiet", "--steps", "4", "--load", ck, "--save", ck, "--json-log", log)...)
	if code != 0 {
		t.Fatalf("resumed run: exit %d\n%s%s", code, out, errs)
	}
	losses := logLosses(t, log)
	for _, want := range []string{
		"resumed from " + filepath.Join(ck, "global_step2") + " (step 2)\n",
		"saved " + filepath.Join(ck, "global_step4") + " (",
		"done: 2 steps (steps 3 to 4) in ",
		fmt.Sprintf("loss %.4f → %.4f", losses[3], losses[4]),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("resumed run lacks %q:\n%s", want, out)
		}
	}
	// Resuming at the last step trains nothing, and says so.
	code, out, errs = runCLI(tinyTrain("--quiet", "--steps", "4", "--load", ck)...)
	if code != 0 || !strings.Contains(out, "nothing to train: the checkpoint is at step 4 and --steps 4 is the total") {
		t.Errorf("resume at the end: exit %d\n%s%s", code, out, errs)
	}
}

// TestTrainChecksOutputsFirst: --save and --save-model targets that
// cannot be written fail before the first step, naming the flag.
func TestTrainChecksOutputsFirst(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	os.WriteFile(file, []byte("x"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--save", filepath.Join(file, "ck")}, "--save " + filepath.Join(file, "ck") + ": " + file + " is a file"},
		{[]string{"--save-model", file}, "--save-model " + file + ": it exists and is not a directory"},
		{[]string{"--save-model", filepath.Join(file, "sub", "m")}, "is a file, so no directory can be made under it"},
		{[]string{"--load", filepath.Join(dir, "missing")}, "no such checkpoint directory"},
	} {
		code, out, errs := runCLI(tinyTrain(append([]string{"--quiet", "--steps", "3"}, tc.args...)...)...)
		if code != 1 || !strings.Contains(errs, tc.want) || strings.Contains(out, "step ") {
			t.Errorf("%v: exit %d, want 1, %q and no step trained:\n%s%s", tc.args, code, tc.want, out, errs)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); err == nil {
		t.Errorf("the check created a directory")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("the checks left files behind: %v", entries)
	}
}

// TestTrainRejectsBadCounts: a count that cannot be meant is an error, not
// the default (--steps -1 trained 150 steps), one setting under two names
// with two values is an error (--nproc 2 --num_gpus 3 trained 3 ranks),
// and a budget without a unit is not bytes.
func TestTrainRejectsBadCounts(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--steps", "-1"}, 2, `invalid value "-1" for flag -steps: want 1 or more optimizer steps`},
		{[]string{"--steps", "0"}, 2, `invalid value "0" for flag -steps: want 1 or more optimizer steps (leave --steps out for the default)`},
		{[]string{"--seq", "0"}, 2, "want 1 or more tokens per sample"},
		{[]string{"--nproc", "0"}, 2, "want 1 or more ranks"},
		{[]string{"--nproc", "2", "--num_gpus", "3"}, 2, "--nproc already gave 2; --nproc and --num_gpus are one setting, give one"},
		{[]string{"--num_gpus", "3", "--nproc", "2"}, 2, "--num_gpus already gave 3"},
		{[]string{"--threads", "-1"}, 2, "want 0 or more threads"},
		{[]string{"--save-interval", "2"}, 2, "--save-interval 2 needs --save DIR"},
		{[]string{"--device-memory", "4"}, 1, "--device-memory 4: give a unit, e.g. 4GiB or 4MiB (4B if you mean 4 bytes)"},
		{[]string{"--device-memory", "0.5"}, 1, "give a unit"},
		{[]string{"--micro-batch", "0"}, 2, "want 1 or more samples"},
		{[]string{"--micro-batch", "2", "--per_device_train_batch_size", "3"}, 2, "--micro-batch already gave 2"},
	} {
		code, out, errs := runCLI(tinyTrain(append([]string{"--quiet"}, tc.args...)...)...)
		if code != tc.code || !strings.Contains(errs, tc.want) || strings.Contains(out, "step ") {
			t.Errorf("%v: exit %d, want %d and %q:\n%s%s", tc.args, code, tc.code, tc.want, out, errs)
		}
	}
	// The same value under both names is one setting given twice.
	if code, out, errs := runCLI(tinyTrain("--quiet", "--steps", "1", "--nproc", "2", "--num_gpus", "2")...); code != 0 || !strings.Contains(out, "× 2 ranks") {
		t.Errorf("--nproc 2 --num_gpus 2: exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs := runCLI(tinyTrain("--quiet", "--steps", "1", "--device-memory", "64MiB")...); code != 0 {
		t.Errorf("--device-memory 64MiB: exit %d: %s", code, errs)
	}
}

// TestTrainHFNames: HF's names work beside dszero's — --save_steps
// saves, --resume_from_checkpoint true resumes from --save's latest
// checkpoint (a path, from that one) — and the
// micro-batch alone (--per_device_train_batch_size or --micro-batch)
// sets train_micro_batch_size_per_gpu without HF mode, whose mismatch
// checks would reject the embedded config's lr 2e-3 against HF's default
// learning_rate 5e-5.
func TestTrainHFNames(t *testing.T) {
	dir := t.TempDir()
	out1 := filepath.Join(dir, "out")
	code, out, errs := runCLI(tinyTrain("--quiet", "--steps", "4", "--save", out1, "--save_steps", "2")...)
	if code != 0 {
		t.Fatalf("--save: exit %d\n%s%s", code, out, errs)
	}
	for _, tag := range []string{"global_step2", "global_step4"} {
		if _, err := os.Stat(filepath.Join(out1, tag)); err != nil {
			t.Errorf("--save --save_steps 2: %v", err)
		}
	}
	code, out, errs = runCLI(tinyTrain("--quiet", "--steps", "5", "--save", out1, "--resume_from_checkpoint", "true")...)
	if code != 0 || !strings.Contains(out, "resumed from "+filepath.Join(out1, "global_step4")) || !strings.Contains(out, "done: 1 step (step 5)") {
		t.Errorf("--resume_from_checkpoint true: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCLI(tinyTrain("--quiet", "--steps", "6", "--resume_from_checkpoint", out1)...)
	if code != 0 || !strings.Contains(out, "resumed from "+filepath.Join(out1, "global_step5")) {
		t.Errorf("--resume_from_checkpoint PATH: exit %d\n%s%s", code, out, errs)
	}
	for _, bad := range [][]string{
		{"--resume_from_checkpoint", "true"},
		{"--load", out1, "--resume_from_checkpoint", filepath.Join(dir, "other")},
		{"--save", out1, "--output_dir", filepath.Join(dir, "other")},
	} {
		if code, _, errs := runCLI(tinyTrain(append([]string{"--quiet", "--steps", "1"}, bad...)...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", bad, code, errs)
		}
	}
	for _, flag := range []string{"--micro-batch", "--per_device_train_batch_size"} {
		code, out, errs := runCLI(tinyTrain("--quiet", "--steps", "1", flag, "3")...)
		if code != 0 {
			t.Fatalf("%s 3: exit %d\n%s%s", flag, code, out, errs)
		}
		if !strings.Contains(out, "batch 3 = micro 3 × accumulation 1 × 1 ranks") || !strings.Contains(errs, "--micro-batch 3 sets train_micro_batch_size_per_gpu (<embedded default ds_config> has 12)") {
			t.Errorf("%s 3:\n%s%s", flag, out, errs)
		}
	}
}

// TestTrainProgressNotTerminal: with stderr not a terminal (here a
// buffer) there is no progress bar, whose \r frames would fill a log;
// the step lines at steps_per_print are the progress.
func TestTrainProgressNotTerminal(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "ds.json")
	os.WriteFile(cfg, []byte(`{"train_micro_batch_size_per_gpu": 2, "steps_per_print": 2, "optimizer": {"type": "AdamW"}}`), 0o644)
	code, out, errs := runCLI(tinyTrain("--steps", "5", "--deepspeed", cfg)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	if strings.Contains(errs, "\r") || errs != "" {
		t.Errorf("stderr is not a terminal but got %d bytes: %q", len(errs), errs)
	}
	var steps []int
	for _, m := range regexp.MustCompile(`(?m)^step +(\d+)/5 \|.*\| [^|]+, [^|]+ left$`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		steps = append(steps, n)
	}
	if diff := cmp.Diff([]int{1, 2, 4, 5}, steps); diff != "" {
		t.Errorf("step lines (-want +got):\n%s\n%s", diff, out)
	}
}

// TestSetTopLevelNumber: --micro-batch edits only the value's text, so
// the rest of the config keeps its lines and columns (and comments).
func TestSetTopLevelNumber(t *testing.T) {
	for _, tc := range []struct {
		name, in, want, was, err string
	}{
		{"number", "{\n  // c\n  \"train_micro_batch_size_per_gpu\": 16, \"x\": 1\n}", "{\n  // c\n  \"train_micro_batch_size_per_gpu\": 4, \"x\": 1\n}", "16", ""},
		{"auto", `{"train_micro_batch_size_per_gpu": "auto"}`, `{"train_micro_batch_size_per_gpu": 4}`, `"auto"`, ""},
		{"single quotes", `{"train_micro_batch_size_per_gpu": 'a\'b', "y": 2}`, `{"train_micro_batch_size_per_gpu": 4, "y": 2}`, `'a\'b'`, ""},
		{"null", `{"train_micro_batch_size_per_gpu": null}`, `{"train_micro_batch_size_per_gpu": 4}`, "null", ""},
		{"absent", "{\n\"train_batch_size\": 8}", "{ \"train_micro_batch_size_per_gpu\": 4,\n\"train_batch_size\": 8}", "no value", ""},
		{"empty", "{}", `{ "train_micro_batch_size_per_gpu": 4}`, "no value", ""},
		{"object", `{"train_micro_batch_size_per_gpu": {"a": 1}}`, "", "", "c.json:1:36: train_micro_batch_size_per_gpu is not a number but an object"},
		{"unparsable", `{"a": }`, `{"a": }`, "no value", ""},
	} {
		out, was, err := setTopLevelNumber("c.json", []byte(tc.in), microKey, 4)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err == "" && (string(out) != tc.want || was != tc.was):
			t.Errorf("%s: got %q (was %q), want %q (was %q)", tc.name, out, was, tc.want, tc.was)
		}
	}
}
