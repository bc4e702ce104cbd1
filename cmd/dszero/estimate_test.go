package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEstimateModel: a preset prints DeepSpeed's _all_live blocks and
// dszero's estimate for the embedded default config.
func TestEstimateModel(t *testing.T) {
	code, out, errs := runCLI("estimate", "--model", "gpt2-medium", "--num_gpus", "4", "--num_nodes", "1")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	for _, want := range []string{
		">>> estimate_zero2_model_states_mem_needs_all_live(model, num_gpus_per_node=4, num_nodes=1)",
		"HW: Setup with 1 node, 4 GPUs per node.\nSW: Model with 354M total params.\n  per CPU  |  per GPU |   Options\n",
		"SW: Model with 354M total params, 51M largest layer params.",
		"| offload_param=none, offload_optimizer=none, zero_init=1\n",
		"ZeRO stage 0, fp32",
		"  stage 2 ", "  stage 3 ",
		"Activations for a micro-batch of 12 × 128 tokens",
		"Total per rank at stage 0, without activation checkpointing: device ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestEstimateParams: --params is DeepSpeed's _all_cold; with
// --largest-layer the ZeRO-3 block is DeepSpeed's published t5-3b one
// (docs/code-docs/source/memory.rst).
func TestEstimateParams(t *testing.T) {
	code, out, errs := runCLI("estimate", "--params", "2851e6", "--largest-layer", "32M", "--num_gpus", "8")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	for _, want := range []string{
		">>> estimate_zero3_model_states_mem_needs_all_cold(total_params=2851000000, largest_layer_params=32000000, num_gpus_per_node=8, num_nodes=1)",
		"   71.69GB |   0.12GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1\n",
		"    1.43GB |   6.09GB | offload_param=none, offload_optimizer=none, zero_init=1\n",
		"with --params alone the parameter list is unknown",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Activations") {
		t.Errorf("--params has no model, so no activations:\n%s", out)
	}
	_, out, _ = runCLI("estimate", "--params", "7.5B")
	if !strings.Contains(out, "give --largest-layer N") {
		t.Errorf("without --largest-layer, ZeRO-3's block should say what it needs:\n%s", out)
	}
}

// TestEstimateJSON: --json has the documented field names.
func TestEstimateJSON(t *testing.T) {
	code, out, errs := runCLI("estimate", "--model", "tiny", "--num_gpus", "2", "--deepspeed", "../../examples/ds_config_zero2.json", "--seq", "16", "--json")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	var r struct {
		Model     string `json:"model"`
		Params    int64  `json:"params"`
		GPUs      int    `json:"num_gpus_per_node"`
		DeepSpeed struct {
			Zero2 []map[string]any `json:"zero2"`
			Zero3 []map[string]any `json:"zero3"`
		} `json:"deepspeed"`
		Dszero struct {
			Ranks  int    `json:"ranks"`
			Stage  int    `json:"zero_stage"`
			Prec   string `json:"precision"`
			Stages []struct {
				Stage  int `json:"stage"`
				States []struct {
					Category string `json:"category"`
					Tier     string `json:"tier"`
					Bytes    int64  `json:"bytes"`
				} `json:"states"`
				Total map[string]int64 `json:"total"`
			} `json:"stages"`
			Activations []map[string]any `json:"activations"`
			Total       map[string]int64 `json:"total"`
		} `json:"dszero"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	d := r.Dszero
	if r.Model != "tiny" || r.Params != 110336 || r.GPUs != 2 || len(r.DeepSpeed.Zero2) != 2 || len(r.DeepSpeed.Zero3) != 6 ||
		d.Ranks != 2 || d.Stage != 2 || d.Prec != "bf16" || len(d.Stages) != 4 || len(d.Activations) == 0 || d.Total["device"] <= 0 {
		t.Errorf("unexpected JSON:\n%s", out)
	}
	// Stage 2 at 2 ranks: the fp32 gradient partition is Ψ/2 (110336 is a
	// multiple of 2N = 4).
	for _, l := range d.Stages[2].States {
		if l.Category == "grads" && (l.Tier != "device" || l.Bytes != 4*110336/2) {
			t.Errorf("stage 2 gradients: %+v", l)
		}
	}
	for _, key := range []string{`"per_cpu_bytes"`, `"zero_init"`, `"states_total"`, `"activations_checkpointed"`, `"pinned_host"`, `"notes"`} {
		if !strings.Contains(out, key) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

// TestEstimateOffloadAndHF: --offload moves the optimizer's partitions
// to pinned host memory at stages 1–3, and HF flags fill "auto".
func TestEstimateOffloadAndHF(t *testing.T) {
	code, out, errs := runCLI("estimate", "--model", "tiny", "--seq", "16", "--offload", "cpu", "--json",
		"--deepspeed", "../../examples/ds_config_hf_auto.json", "--per_device_train_batch_size", "4", "--learning_rate", "1e-4", "--max_steps", "100", "--warmup_steps", "10", "--bf16", "--hidden_size", "64")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	var r struct {
		Dszero struct {
			Stage  int `json:"zero_stage"`
			Micro  int `json:"micro_batch"`
			Stages []struct {
				Total map[string]int64 `json:"total"`
			} `json:"stages"`
		} `json:"dszero"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	d := r.Dszero
	if d.Stage != 3 || d.Micro != 4 || d.Stages[0].Total["pinned_host"] != 0 || d.Stages[1].Total["pinned_host"] == 0 || d.Stages[3].Total["pinned_host"] == 0 {
		t.Errorf("unexpected estimate:\n%s", out)
	}
}

// TestEstimateBadInput: usage errors exit 2 naming the flag and the fix;
// a config with errors or a missing file exits 1; nothing panics.
func TestEstimateBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"train_batch_size": 3, "train_micro_batch_size_per_gpu": 2}`), 0o644)
	cases := []struct {
		code int
		args []string
		want string
	}{
		{2, nil, "give --model PRESET|DIR"},
		{2, []string{"--model", "gpt5"}, `--model "gpt5" is neither a preset (gpt2,`},
		{2, []string{"--model", filepath.Join(dir, "missing")}, "neither a preset"},
		{2, []string{"--model", dir}, "config.json"},
		{2, []string{"--model", "tiny", "--params", "1e6"}, "give one"},
		{2, []string{"--params", "0"}, "--params \"0\": want at least 1 parameter"},
		{2, []string{"--params", "-5"}, "--params"},
		{2, []string{"--params", "lots"}, "such as 7.5e9"},
		{2, []string{"--params", "2.5"}, "not a whole number"},
		{2, []string{"--params", "1e6", "--largest-layer", "2e6"}, "--largest-layer 2e6 is more than --params"},
		{2, []string{"--model", "tiny", "--largest-layer", "5"}, "--largest-layer goes with --params"},
		{2, []string{"--params", "1e6", "--seq", "64"}, "--seq needs --model"},
		{2, []string{"--model", "tiny", "--seq", "4096"}, "--seq 4096: want 1 to 32"},
		{2, []string{"--model", "tiny", "--num_gpus", "0"}, "--num_gpus 0"},
		{2, []string{"--model", "tiny", "--num_nodes", "0"}, "--num_nodes 0"},
		{2, []string{"--model", "tiny", "--num_gpus", "100000", "--num_nodes", "100000"}, "at most 16777216 GPUs"},
		{2, []string{"--model", "tiny", "--seq", "0"}, "--seq 0: want 1 to 32"},
		{2, []string{"--model", "tiny", "--additional_buffer_factor", "0"}, "--additional_buffer_factor"},
		{2, []string{"--model", "tiny", "--offload", "gpu"}, `--offload "gpu": want none, cpu or nvme`},
		{2, []string{"--model", "tiny", "--offload_param", "disk"}, `--offload_param "disk"`},
		{2, []string{"--model", "tiny", "--offload", "cpu", "--offload_optimizer", "nvme"}, "not both"},
		{2, []string{"--model", "tiny", "extra"}, `unexpected argument "extra"`},
		{2, []string{"--model", "tiny", "--frobnicate"}, "flag provided but not defined"},
		{1, []string{"--model", "tiny", "--deepspeed", filepath.Join(dir, "none.json")}, "--deepspeed"},
		{1, []string{"--model", "tiny", "--deepspeed", bad}, "the config has errors"},
	}
	for _, tc := range cases {
		code, out, errs := runCLI(append([]string{"estimate"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, want %d and %q in stderr\n%s%s", tc.args, code, tc.code, tc.want, out, errs)
		}
	}
}

func TestParseCount(t *testing.T) {
	for in, want := range map[string]int64{"7.5e9": 7_500_000_000, "7.5B": 7_500_000_000, "350M": 350_000_000, "65K": 65_000,
		"1.1M": 1_100_000, "2851e6": 2_851_000_000, "110336": 110_336, "1T": 1_000_000_000_000} {
		if got, err := parseCount(in); err != nil || got != want {
			t.Errorf("parseCount(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "0.5", "1.5", "x", "NaNM", "Inf", "1e30"} {
		if _, err := parseCount(in); err == nil {
			t.Errorf("parseCount(%q) accepted", in)
		}
	}
}
