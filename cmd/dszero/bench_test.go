package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dszero/dszero/model/gpt"
)

// TestBench: dszero bench's model-state bytes equal dszero's estimate (the
// ZeRO formula in dszero's element sizes, plus padding) for every stage on
// 1 to 4 ranks; its --json parses; a variant over --device-memory is
// reported as OOM, not as a crash; the plot is written as PNG and SVG; bad
// flags are usage errors.
func TestBench(t *testing.T) {
	dir := t.TempDir()
	for world := 1; world <= 4; world++ {
		out := filepath.Join(dir, fmt.Sprintf("w%d.json", world))
		code, stdout, errs := runCLI("bench", "--model", "tiny", "--nproc", fmt.Sprint(world), "--seq", "16", "--steps", "2", "--json", out)
		if code != 0 {
			t.Fatalf("world %d: exit %d\n%s%s", world, code, stdout, errs)
		}
		raw, _ := os.ReadFile(out)
		var rep benchReport
		if err := json.Unmarshal(raw, &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Variants) != 4 {
			t.Fatalf("world %d: %d variants", world, len(rep.Variants))
		}
		for _, v := range rep.Variants {
			if v.Status != "ok" || v.ModelStates != v.Estimate || v.Ratio != 1 {
				t.Errorf("world %d %s: %s, model states %d bytes, estimate %d", world, v.Variant, v.Status, v.ModelStates, v.Estimate)
			}
		}
	}
	png, svg := filepath.Join(dir, "b.png"), filepath.Join(dir, "b.svg")
	code, stdout, errs := runCLI("bench", "--model", "tiny", "--nproc", "2", "--seq", "16", "--steps", "2", "--offload", "none,cpu,nvme",
		"--device-memory", "1900KiB", "--plot", png)
	if code != 0 || !strings.Contains(stdout, "stage 0                    oom") || !strings.Contains(stdout, "stage 3 + offload nvme     ok") {
		t.Fatalf("budget: exit %d\n%s%s", code, stdout, errs)
	}
	if code, _, errs := runCLI("bench", "--model", "tiny", "--stages", "3", "--steps", "2", "--seq", "16", "--plot", svg); code != 0 {
		t.Fatalf("svg: exit %d: %s", code, errs)
	}
	for _, f := range []string{png, svg} {
		if fi, err := os.Stat(f); err != nil || fi.Size() < 1000 {
			t.Errorf("plot %s: %v", f, err)
		}
	}
	for _, bad := range [][]string{{"--stages", "5"}, {"--offload", "disk"}, {"--steps", "1"}, {"--model", "gpt7"}, {"--plot", filepath.Join(dir, "x.jpg"), "--stages", "0", "--steps", "2", "--model", "tiny", "--seq", "16"}} {
		if code, _, _ := runCLI(append([]string{"bench"}, bad...)...); code == 0 {
			t.Errorf("%v: accepted", bad)
		}
	}
}

// TestBenchMatchesDeepSpeedStates: on the reference harness's tiny GPT at
// 2 ranks in fp32, dszero bench reports DeepSpeed 0.14.5's own fp32 master
// and Adam bytes per rank for each stage (the reference's result.json
// memory records, copied here): 441,344 + 882,804 at stage 0 and 220,672 +
// 441,348 at stages 1–3 — less DeepSpeed's 4-byte "step" tensor per
// optimizer state entry (one per parameter at stage 0, one per flat group
// at stages 1–3), which dszero keeps as a counter.
func TestBenchMatchesDeepSpeedStates(t *testing.T) {
	out := filepath.Join(t.TempDir(), "b.json")
	if code, o, e := runCLI("bench", "--model", "tiny", "--nproc", "2", "--seq", "16", "--steps", "2", "--json", out); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, o, e)
	}
	raw, _ := os.ReadFile(out)
	var rep benchReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	deepspeed := map[int][2]int64{0: {441344, 882804}, 1: {220672, 441348}, 2: {220672, 441348}, 3: {220672, 441348}}
	tiny, _ := gpt.Preset("tiny")
	params := int64(len(tiny.WithDefaults().Layout().Specs)) // 29 tensors
	for _, v := range rep.Variants {
		ds := deepspeed[v.Stage]
		steps := int64(1)
		if v.Stage == 0 {
			steps = params
		}
		master, opt := v.PeakBytes["device"]["master_params"], v.PeakBytes["device"]["optim_state"]
		if master != ds[0] || opt != ds[1]-4*steps {
			t.Errorf("%s: master %d, optimizer state %d bytes; DeepSpeed %d and %d (less %d step tensors)", v.Variant, master, opt, ds[0], ds[1], steps)
		}
	}
}

// TestBenchPartialOffload: a --deepspeed config's offload_optimizer.ratio
// is kept in the stage 3 cpu variant, whose master, gradients and
// optimizer state are then split between the device and the pinned host,
// and whose model states still equal the estimate.
func TestBenchPartialOffload(t *testing.T) {
	dir := t.TempDir()
	cfg, out := filepath.Join(dir, "ds.json"), filepath.Join(dir, "b.json")
	os.WriteFile(cfg, []byte(`{"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
  "zero_optimization": {"sub_group_size": 20000, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}`), 0o644)
	if code, o, e := runCLI("bench", "--model", "tiny", "--nproc", "2", "--seq", "16", "--steps", "2", "--stages", "3", "--offload", "cpu",
		"--deepspeed", cfg, "--json", out); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, o, e)
	}
	raw, _ := os.ReadFile(out)
	var rep benchReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Variants) != 1 {
		t.Fatalf("%d variants", len(rep.Variants))
	}
	v := rep.Variants[0]
	if v.Variant != "stage 3 + offload cpu r0.5" || v.Status != "ok" || v.Ratio != 1 {
		t.Errorf("%s: %s, model states %d bytes, estimate %d", v.Variant, v.Status, v.ModelStates, v.Estimate)
	}
	for _, c := range []string{"master_params", "grads", "optim_state"} {
		if v.PeakBytes["device"][c] == 0 || v.PeakBytes["pinned_host"][c] == 0 {
			t.Errorf("%s: %d bytes on the device, %d on the host: want both", c, v.PeakBytes["device"][c], v.PeakBytes["pinned_host"][c])
		}
	}
}

// TestBenchReadsConfigsAsTrainDoes: bench reads --deepspeed through
// dsconfig's reader, so the repository's commented example (which train
// reads) works, and a syntax error is positioned; a budget needs a unit.
func TestBenchReadsConfigsAsTrainDoes(t *testing.T) {
	code, out, errs := runCLI("bench", "--deepspeed", "../../examples/ds_config_zero2.json", "--model", "tiny", "--seq", "16", "--steps", "2", "--stages", "2")
	if code != 0 || !strings.Contains(out, "stage 2                    ok") {
		t.Errorf("commented example: exit %d\n%s%s", code, out, errs)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte("{\n  // a comment\n  \"zero_optimization\": {\"stage\": }\n}\n"), 0o644)
	if code, _, errs := runCLI("bench", "--deepspeed", bad, "--model", "tiny", "--seq", "16"); code != 2 || !strings.Contains(errs, "bad.json:3:34: ") {
		t.Errorf("syntax error: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI("bench", "--device-memory", "64", "--model", "tiny", "--seq", "16"); code != 2 || !strings.Contains(errs, "--device-memory 64: give a unit") {
		t.Errorf("--device-memory 64: exit %d: %s", code, errs)
	}
}

// TestBenchPlotReadable: the plot writes each bar's total above it, names
// a budget far above the bars in the legend instead of drawing the bars
// flat under it, draws a budget near them as a line, and keeps the legend
// beside the axes. (Look at the PNG too: the test cannot see overlap.)
func TestBenchPlotReadable(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		budget string
		want   []string
		absent string
	}{
		{"64MiB", []string{"device budget 64.00 MiB: ", "the tallest bar, off the chart"}, ""},
		{"2MiB", []string{"device budget 2.00 MiB<"}, "off the chart"},
	} {
		svg, js := filepath.Join(dir, tc.budget+".svg"), filepath.Join(dir, tc.budget+".json")
		code, out, errs := runCLI("bench", "--model", "tiny", "--seq", "16", "--steps", "2", "--stages", "0,3", "--device-memory", tc.budget, "--plot", svg, "--json", js)
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out, errs)
		}
		raw, _ := os.ReadFile(svg)
		var rep benchReport
		b, _ := os.ReadFile(js)
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		want := append([]string{}, tc.want...)
		for _, v := range rep.Variants {
			want = append(want, fmt.Sprintf(">%.3g<", float64(v.PeakBytes["device"]["total"])/(1<<20)))
		}
		for _, w := range want {
			if !strings.Contains(string(raw), w) {
				t.Errorf("--device-memory %s: the SVG lacks %q", tc.budget, w)
			}
		}
		if tc.absent != "" && strings.Contains(string(raw), tc.absent) {
			t.Errorf("--device-memory %s: the SVG says %q", tc.budget, tc.absent)
		}
	}
}

// TestBenchNVMeNote: the table explains an NVMe variant's model states
// beside its estimate, and the measurement is exactly the parts it names.
func TestBenchNVMeNote(t *testing.T) {
	js := filepath.Join(t.TempDir(), "b.json")
	code, out, errs := runCLI("bench", "--model", "tiny", "--seq", "16", "--steps", "2", "--stages", "3", "--offload", "nvme", "--json", js)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	var rep benchReport
	b, _ := os.ReadFile(js)
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Variants) != 1 {
		t.Fatalf("%v: %s", err, b)
	}
	v := rep.Variants[0]
	pb := func(tier, cat string) int64 { return v.PeakBytes[tier][cat] }
	parts := pb("device", "params16") + pb("pinned_host", "grads") + pb("nvme", "total") + pb("pinned_host", "master_params") + pb("pinned_host", "optim_state")
	if parts != v.ModelStates {
		t.Errorf("model states %d bytes, the note's parts %d", v.ModelStates, parts)
	}
	for _, want := range []string{"stage 3 + offload nvme: model states", "The estimate counts each state\n  once, where it lives", "hence no ratio."} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
