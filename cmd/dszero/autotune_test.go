package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// writeTuneConfig writes a config to tune whose autotuning block has
// keys (metric, start_profile_step, end_profile_step, ...) and the
// directories under dir.
func writeTuneConfig(t *testing.T, dir, keys string) string {
	t.Helper()
	js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
		"zero_optimization": {"stage": [0, 2]},
		"autotuning": {"enabled": true, %s, "max_train_batch_size": 16, "results_dir": %q, "exps_dir": %q}}`,
		keys, filepath.Join(dir, "res"), filepath.Join(dir, "exps"))
	path := filepath.Join(dir, "ds.json")
	if err := os.WriteFile(path, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAutotune: the tuner runs DeepSpeed's micro-batch list for each
// listed stage (max_train_batch_size 16 on 2 ranks: at most 8 per rank,
// so micro-batches 4 and 8 with 2 and 1 accumulation steps), writes each
// experiment and its metrics (throughput = train_batch_size·1e6/latency,
// DeepSpeed's formula), the pipe table with a global row, and an optimal
// config that dszero train runs; with the latency metric the lowest wins.
func TestAutotune(t *testing.T) {
	for _, metric := range []string{"throughput", "latency"} {
		t.Run(metric, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeTuneConfig(t, dir, fmt.Sprintf(`"metric": %q, "start_profile_step": 1, "end_profile_step": 3`, metric))
			code, out, errs := runCLI("autotune", "--deepspeed", cfg, "--model", "tiny", "--nproc", "2", "--seq", "8", "--threads", "1")
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out, errs)
			}
			best, bestName := 0.0, ""
			for _, stage := range []int{0, 2} {
				for _, e := range []struct{ gas, mbs int }{{2, 4}, {1, 8}} {
					name := fmt.Sprintf("z%d_gas%d_tmbspg%d", stage, e.gas, e.mbs)
					if _, err := os.Stat(filepath.Join(dir, "exps", name+".json")); err != nil {
						t.Error(err)
					}
					raw, err := os.ReadFile(filepath.Join(dir, "res", name, "metrics.json"))
					if err != nil {
						t.Fatal(err)
					}
					var m struct {
						Latency    float64 `json:"latency"`
						Throughput float64 `json:"throughput"`
						FLOPS      float64 `json:"FLOPS_per_gpu"`
					}
					if err := json.Unmarshal(raw, &m); err != nil {
						t.Fatal(err)
					}
					if d := cmp.Diff(16*1e6/m.Latency, m.Throughput, cmpopts.EquateApprox(1e-9, 0)); d != "" || m.FLOPS <= 0 {
						t.Errorf("%s: metrics %+v: throughput is not train_batch_size·1e6/latency", name, m)
					}
					v := m.Throughput
					if metric == "latency" {
						v = -m.Latency
					}
					if bestName == "" || v > best {
						best, bestName = v, name
					}
				}
			}
			table, err := os.ReadFile(filepath.Join(dir, "res", "summary.txt"))
			if err != nil {
				t.Fatal(err)
			}
			for _, re := range []string{`(?m)^\| tuning_space   \|   num_experiments \|   best_metric_val \| best_exp_name +\|$`,
				`(?m)^\|:-+\|-+:\|-+:\|:-+\|$`, `(?m)^\| z0 +\| +2 \|`, `(?m)^\| z2 +\| +2 \|`,
				`(?m)^\| global +\| +4 \| +[0-9.e+]+ \| ` + bestName + ` +\|$`} {
				if !regexp.MustCompile(re).Match(table) {
					t.Errorf("summary.txt has no line %s:\n%s", re, table)
				}
			}
			if !strings.Contains(out, string(table[:strings.Index(string(table), "\n\n")])) {
				t.Errorf("the table is not printed:\n%s", out)
			}
			opt := filepath.Join(dir, "res", "ds_config_optimal.json")
			raw, err := os.ReadFile(opt)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(raw), "autotuning") || strings.Contains(string(raw), "wall_clock_breakdown") {
				t.Errorf("the optimal config keeps the tuner's keys: %s", raw)
			}
			code, out, errs = runCLI(tinyTrain("--quiet", "--deepspeed", opt, "--nproc", "2", "--steps", "1")...)
			if code != 0 {
				t.Errorf("dszero train on the optimal config: exit %d\n%s%s", code, out, errs)
			}
		})
	}
}

func TestAutotuneRefuses(t *testing.T) {
	for _, tc := range []struct{ keys, want string }{
		{`"mp_size": 2`, "autotuning.mp_size: 2: dszero has no model (tensor) parallelism"},
		{`"tuner_type": "model_based"`, "autotuning.tuner_type"},
		{`"start_profile_step": 2, "end_profile_step": 1`, "autotuning.end_profile_step: 1 must be after start_profile_step 2"},
		{`"metric": "speed"`, "autotuning.metric: must be one of throughput, latency, flops"},
		{`"fast": "yes"`, "autotuning.fast: must be true or false"},
	} {
		dir := t.TempDir()
		cfg := writeTuneConfig(t, dir, tc.keys)
		code, out, errs := runCLI("autotune", "--deepspeed", cfg, "--model", "tiny", "--nproc", "1", "--seq", "8")
		if code != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("%s: exit %d, want 1 with %q\n%s%s", tc.keys, code, tc.want, out, errs)
		}
	}
}

// TestAutotuneSeqParallel: with sequence_parallel_size 2 on 2 ranks the
// tuner counts the one data-parallel rank (DeepSpeed's autotuner, which
// knows no sequence parallelism, would write a train_batch_size over both
// and the engine reject it): max_train_batch_size 16 gives micro-batches
// 8 and 16 with train_batch_size 16, and every trial runs Ulysses.
func TestAutotuneSeqParallel(t *testing.T) {
	dir := t.TempDir()
	js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 1, "sequence_parallel_size": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
		"zero_optimization": {"stage": [0]},
		"autotuning": {"enabled": true, "metric": "flops", "start_profile_step": 1, "end_profile_step": 2, "max_train_batch_size": 16, "results_dir": %q, "exps_dir": %q}}`,
		filepath.Join(dir, "res"), filepath.Join(dir, "exps"))
	cfg := filepath.Join(dir, "ds.json")
	if err := os.WriteFile(cfg, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI("autotune", "--deepspeed", cfg, "--model", "tiny", "--nproc", "2", "--seq", "8", "--threads", "1")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	for _, e := range []struct{ gas, mbs int }{{2, 8}, {1, 16}} {
		name := fmt.Sprintf("z0_gas%d_tmbspg%d", e.gas, e.mbs)
		raw, err := os.ReadFile(filepath.Join(dir, "exps", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var exp struct {
			DSConfig map[string]any `json:"ds_config"`
		}
		if err := json.Unmarshal(raw, &exp); err != nil {
			t.Fatal(err)
		}
		if tb := exp.DSConfig["train_batch_size"]; tb != 16.0 || exp.DSConfig["sequence_parallel_size"] != 2.0 {
			t.Errorf("%s: train_batch_size %v, sequence_parallel_size %v; want 16 and 2", name, tb, exp.DSConfig["sequence_parallel_size"])
		}
		raw, err = os.ReadFile(filepath.Join(dir, "res", name, "metrics.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Latency    float64 `json:"latency"`
			Throughput float64 `json:"throughput"`
			FLOPS      float64 `json:"FLOPS_per_gpu"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(16*1e6/m.Latency, m.Throughput, cmpopts.EquateApprox(1e-9, 0)); d != "" || m.FLOPS <= 0 {
			t.Errorf("%s: metrics %+v", name, m)
		}
		// FLOPS_per_gpu is 3·fwd·1e6·GAS/latency with rank 0's forward:
		// half the whole sequence's for this GPT (every count halves).
		var whole int64
		for _, mod := range mustTiny(t).FlopModules(model.FlopShape{Batch: e.mbs, Seq: 8}) {
			whole += mod.FLOPs
		}
		if fwd := m.FLOPS * m.Latency / (3e6 * float64(e.gas)); math.Abs(fwd-float64(whole)/2) > 1e-6*float64(whole) {
			t.Errorf("%s: the FLOPS metric counts %.0f forward flops per rank, want %d (half of %d)", name, fwd, whole/2, whole)
		}
	}
}

func mustTiny(t *testing.T) gpt.Config {
	t.Helper()
	c, err := gpt.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	return c
}
