package hfstate

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/checkpoint/dcp"
	"github.com/dszero/dszero/ptfile"
)

func sampleState() *TrainerState {
	s := NewTrainerState()
	epoch, best, bestStep, ckpt, bs := 2.0, math.Inf(1), int64(20), "out/checkpoint-20", int64(8)
	s.Epoch, s.BestMetric, s.BestGlobalStep, s.BestModelCheckpoint, s.TrainBatchSize = &epoch, &best, &bestStep, &ckpt, &bs
	s.GlobalStep, s.MaxSteps, s.NumTrainEpochs, s.SaveSteps, s.LoggingSteps = 40, 40, 2, 20, 10
	s.TotalFlos = 1.2345e16
	s.NumInputTokensSeen = 81920
	s.LogHistory = []map[string]any{
		{"loss": 2.3026, "grad_norm": 1.5, "learning_rate": 1e-05, "epoch": 0.5, "step": int64(10)},
		{"loss": math.NaN(), "learning_rate": 5e-06, "epoch": 1.0, "step": int64(20)},
		{"eval_loss": 1.25, "eval_runtime": 0.0001, "epoch": 1.0, "step": int64(20)},
	}
	return s
}

// TestTrainerStateJSON checks trainer_state.json's spelling by hand and,
// where python3 is installed, against Python's own json.dumps of the
// same document.
func TestTrainerStateJSON(t *testing.T) {
	b, err := sampleState().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{
		"{\n  \"best_global_step\": 20,\n  \"best_metric\": Infinity,\n  \"best_model_checkpoint\": \"out/checkpoint-20\",\n  \"epoch\": 2.0,\n  \"eval_steps\": 500,\n",
		"\"learning_rate\": 1e-05,", "\"loss\": NaN,", "\"eval_runtime\": 0.0001,", "\"total_flos\": 1.2345e+16,",
		"\"step\": 10\n", "\"trial_name\": null,", "\"stateful_callbacks\": {\n    \"TrainerControl\": {\n      \"args\": {\n        \"should_epoch_stop\": false,",
		"\"attributes\": {}\n", "\"trial_params\": null\n}\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("trainer_state.json lacks %q:\n%s", want, s)
		}
	}
	got, err := ParseTrainerState(b, "trainer_state.json")
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := got.MarshalJSON()
	if string(b2) != s {
		t.Fatalf("read and written again:\n%s\nwant\n%s", b2, s)
	}
	if got.GlobalStep != 40 || *got.Epoch != 2 || !math.IsInf(*got.BestMetric, 1) || !math.IsNaN(got.LogHistory[1]["loss"].(float64)) ||
		got.LogHistory[0]["step"] != int64(10) || *got.BestModelCheckpoint != "out/checkpoint-20" {
		t.Fatalf("parsed %+v", got)
	}
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skip("no /usr/bin/python3: trainer_state.json not compared with Python's json.dumps")
	}
	path := filepath.Join(t.TempDir(), TrainerStateName)
	os.WriteFile(path, b, 0o644)
	out, err := exec.Command(py, "-c", `import json,sys
d = json.load(open(sys.argv[1]))
sys.stdout.write(json.dumps(d, indent=2, sort_keys=True) + "\n")`, path).Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != s {
		t.Fatalf("Python's json.dumps of the same document differs:\n%s\nours\n%s", out, s)
	}
}

func TestParseTrainerStateErrors(t *testing.T) {
	// What a Trainer writes, with a key of a newer version dszero keeps.
	doc := `{"epoch": 1.5, "global_step": 30, "log_history": [{"loss": 1.0, "step": 10}], "future_field": [1, "x"],
	  "stateful_callbacks": {"TrainerControl": {"args": {"should_save": true}, "attributes": {}}}, "best_metric": null}`
	s, err := ParseTrainerState([]byte(doc), "ck/trainer_state.json")
	if err != nil {
		t.Fatal(err)
	}
	if s.GlobalStep != 30 || s.LoggingSteps != 500 || s.BestMetric != nil || !s.IsWorldProcessZero || len(s.Extra) != 1 {
		t.Fatalf("parsed %+v", s)
	}
	for _, c := range []struct{ doc, want string }{
		{`{"global_step": "30"}`, "global_step is a string"},
		{`{"global_step": 3.5}`, "global_step is 3.5, not an integer"},
		{`{"log_history": {}}`, "log_history is a map"},
		{`{"epoch": true}`, "epoch is a bool"},
		{`[1]`, "not a JSON object"},
		{`{"epoch": 1,}`, "want a string key"},
	} {
		_, err := ParseTrainerState([]byte(c.doc), "ck/trainer_state.json")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "ck/trainer_state.json") {
			t.Errorf("%s: error %v, want %q", c.doc, err, c.want)
		}
	}
}

func mkdirs(t *testing.T, root string, names ...string) {
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(root, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestListCheckpoints(t *testing.T) {
	out := t.TempDir()
	mkdirs(t, out, "checkpoint-5", "checkpoint-10", "checkpoint-9", "checkpoint-12.tmp", "checkpoint-x", ".tmp-checkpoint-13", "runs")
	os.WriteFile(filepath.Join(out, "checkpoint-11"), nil, 0o644) // a file is not a checkpoint
	l, err := ListCheckpoints(out)
	if err != nil {
		t.Fatal(err)
	}
	var steps []int64
	for _, c := range l {
		steps = append(steps, c.Step)
	}
	if diff := cmp.Diff([]int64{5, 9, 10}, steps); diff != "" {
		t.Fatal(diff)
	}
	last, ok, _ := LastCheckpoint(out)
	if !ok || last.Path != filepath.Join(out, "checkpoint-10") {
		t.Fatalf("last %v %v", last, ok)
	}
	if _, ok, err := LastCheckpoint(filepath.Join(out, "missing")); ok || err != nil {
		t.Fatalf("missing dir: %v %v", ok, err)
	}
}

func TestRotationPlan(t *testing.T) {
	cases := []struct {
		name  string
		limit int
		best  int // 0: none
		keep  []int
	}{
		{"newest two", 2, 0, []int{4, 5}},
		{"best kept beside the newest", 2, 2, []int{2, 5}},
		{"limit 1 with an older best keeps two", 1, 3, []int{3, 5}},
		{"limit 1 when the best is the newest", 1, 5, []int{5}},
		{"best among the kept", 3, 4, []int{3, 4, 5}},
		{"no limit", 0, 0, []int{1, 2, 3, 4, 5}},
		{"under the limit", 6, 0, []int{1, 2, 3, 4, 5}},
		{"best not a checkpoint here", 2, 9, []int{4, 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			for i := 1; i <= 5; i++ {
				mkdirs(t, out, filepath.Base(CheckpointDir(out, int64(i))))
			}
			best := ""
			if c.best > 0 {
				best = CheckpointDir(out, int64(c.best))
			}
			if _, err := Rotate(out, c.limit, best); err != nil {
				t.Fatal(err)
			}
			l, _ := ListCheckpoints(out)
			var kept []int
			for _, ck := range l {
				kept = append(kept, int(ck.Step))
			}
			if diff := cmp.Diff(c.keep, kept); diff != "" {
				t.Fatal(diff)
			}
		})
	}
}

func TestResolveResume(t *testing.T) {
	out := t.TempDir()
	if p, err := ResolveResume(out, ""); p != "" || err != nil {
		t.Fatalf("empty: %q %v", p, err)
	}
	if _, err := ResolveResume(out, "true"); err == nil || !strings.Contains(err.Error(), "no valid checkpoint found in output directory") {
		t.Fatalf("true, none: %v", err)
	}
	mkdirs(t, out, "checkpoint-2", "checkpoint-10")
	os.WriteFile(filepath.Join(out, "checkpoint-10", TrainerStateName), []byte("{}"), 0o644)
	if p, err := ResolveResume(out, "True"); err != nil || p != filepath.Join(out, "checkpoint-10") {
		t.Fatalf("true: %q %v", p, err)
	}
	if _, err := ResolveResume(out, filepath.Join(out, "checkpoint-2")); err == nil || !strings.Contains(err.Error(), "no trainer_state.json") {
		t.Fatalf("path without state: %v", err)
	}
	if _, err := ResolveResume(out, filepath.Join(out, "nope")); err == nil {
		t.Fatal("missing path: no error")
	}
}

func TestCommit(t *testing.T) {
	out := t.TempDir()
	for round := range 2 {
		staged := StagingDir(out, 7)
		mkdirs(t, out, filepath.Base(staged))
		os.WriteFile(filepath.Join(staged, "f"), []byte{byte(round)}, 0o644)
		if l, _ := ListCheckpoints(out); round == 0 && len(l) != 0 {
			t.Fatalf("a staged checkpoint is listed: %v", l)
		}
		final, err := Commit(out, 7)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(final, "f"))
		if len(b) != 1 || b[0] != byte(round) {
			t.Fatalf("round %d: %v", round, b)
		}
	}
	ents, _ := os.ReadDir(out)
	if len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
}

func TestSchedulerRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := LambdaLR{BaseLRs: []float64{1e-3, 5e-4}, LastEpoch: 12, LastLR: []float64{8e-4, 4e-4}}
	if err := WriteScheduler(dir, s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadScheduler(filepath.Join(dir, SchedulerName))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Fatal(diff)
	}
	py := "/usr/bin/python3"
	if exec.Command(py, "-c", "import torch").Run() != nil {
		t.Skip("no python3 with torch: scheduler.pt not loaded into a torch LambdaLR")
	}
	// The Trainer's own load: lr_scheduler.load_state_dict(torch.load(scheduler.pt))
	// into a LambdaLR of functools.partial schedules, as get_scheduler builds.
	out, err := exec.Command(py, "-c", `import functools, sys, torch
def lin(step, n): return max(0.0, 1 - step / n)
p = [torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))]
opt = torch.optim.AdamW([{"params": [p[0]], "lr": 1e-3}, {"params": [p[1]], "lr": 5e-4}])
s = torch.optim.lr_scheduler.LambdaLR(opt, [functools.partial(lin, n=100)] * 2)
s.load_state_dict(torch.load(sys.argv[1]))
print(s.last_epoch, s._step_count, s.get_last_lr(), s.base_lrs)`, filepath.Join(dir, SchedulerName)).CombinedOutput()
	if err != nil {
		t.Fatalf("torch: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "12 13 [0.0008, 0.0004] [0.001, 0.0005]" {
		t.Fatalf("torch's LambdaLR: %s", got)
	}
}

func TestRNG(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []RNGState{{Seed: 42, Step: 7}, {Seed: math.MaxUint64, Step: 0}} {
		if err := WriteRNG(dir, 3, s); err != nil {
			t.Fatal(err)
		}
		got, err := ReadRNG(dir, 3)
		if err != nil || got != s {
			t.Fatalf("%+v: got %+v %v", s, got, err)
		}
	}
	if DszeroRNGName(3) == RNGStateName(4, 3) {
		t.Fatal("dszero's RNG file must not be the Trainer's (it would stop a Trainer resume)")
	}
	ptfile.Write(filepath.Join(dir, DszeroRNGName(1)), ptfile.DictOf("python", int64(1)))
	if _, err := ReadRNG(dir, 1); err == nil || !strings.Contains(err.Error(), "not dszero's random state") {
		t.Fatalf("foreign file: %v", err)
	}
}

func TestNames(t *testing.T) {
	got := []string{
		ModelDir(0), OptimizerDir(0), OptimizerDir(1), FullModelName(0), FullModelName(2), FullOptimizerName(0),
		FullOptimizerName(1), AccelerateSchedulerName(0), SamplerName(1), RandomStatesName(3),
		filepath.Base(CheckpointDir("o", 500)), RNGStateName(1, 0), RNGStateName(8, 3),
		ModelFQN("fc.weight"), OptimizerFQN("fc.weight", "exp_avg"), ParamGroupFQN(0, "lr"),
	}
	want := []string{
		"pytorch_model_fsdp_0", "optimizer_0", "optimizer_1", "pytorch_model_fsdp.bin", "pytorch_model_fsdp_2.bin", "optimizer.bin",
		"optimizer_1.bin", "scheduler.bin", "sampler_1.bin", "random_states_3.pkl",
		"checkpoint-500", "rng_state.pth", "rng_state_3.pth",
		"model.fc.weight", "optimizer.state.fc.weight.exp_avg", "optimizer.param_groups.0.lr",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatal(diff)
	}
}

// TestAccelerateLayout saves a model and its AdamW state as Accelerate's
// SHARDED_STATE_DICT does (two ranks) and reads them back on three.
func TestAccelerateLayout(t *testing.T) {
	w := ptfile.FromFloat32([]int64{5, 2}, []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	b := ptfile.FromFloat32([]int64{5}, []float32{10, 11, 12, 13, 14})
	m := ptfile.FromFloat32([]int64{5, 2}, []float32{.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5})
	v := ptfile.FromFloat32([]int64{5, 2}, []float32{1, 1, 2, 2, 3, 3, 4, 4, 5, 5})
	mb := ptfile.FromFloat32([]int64{5}, []float32{1, 2, 3, 4, 5})
	root := t.TempDir()
	model := filepath.Join(root, ModelDir(0))
	optim := filepath.Join(root, OptimizerDir(0))
	if _, err := dcp.SaveStateDict(model, ModelState([]Param{{"fc.weight", w}, {"fc.bias", b}}), 2, dcp.Options{}); err != nil {
		t.Fatal(err)
	}
	osd := OptimizerState(
		[]AdamWParam{{"fc.weight", 3, m, v}, {"fc.bias", 3, mb, mb}},
		[]AdamWGroup{{LR: 1e-3, InitialLR: 1e-3, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, WeightDecay: 0.01, Params: []string{"fc.weight", "fc.bias"}}})
	if _, err := dcp.SaveStateDict(optim, osd, 2, dcp.Options{}); err != nil {
		t.Fatal(err)
	}
	c, err := dcp.Open(optim)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var keys []string
	for _, it := range c.Meta.Items {
		keys = append(keys, it.FQN)
	}
	want := []string{
		"optimizer.state.fc.weight.step", "optimizer.state.fc.weight.exp_avg", "optimizer.state.fc.weight.exp_avg_sq",
		"optimizer.state.fc.bias.step", "optimizer.state.fc.bias.exp_avg", "optimizer.state.fc.bias.exp_avg_sq",
	}
	for _, k := range []string{"lr", "betas", "eps", "weight_decay", "amsgrad", "foreach", "maximize", "capturable",
		"differentiable", "fused", "decoupled_weight_decay", "initial_lr", "params"} {
		want = append(want, ParamGroupFQN(0, k))
	}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Fatal(diff)
	}
	if got := ParamNames(c); !slices.Equal(got, []string{"fc.weight", "fc.bias"}) {
		t.Fatalf("param names %v", got)
	}
	for r := range 3 {
		p, err := ReadAdamW(c, "fc.weight", 3, r)
		if err != nil {
			t.Fatal(err)
		}
		rows, _ := dcp.RowChunk([]int64{5, 2}, 3, r)
		f, _ := p.ExpAvg.Float32s()
		if p.Step != 3 || len(f) != int(rows.Sizes[0])*2 || f[0] != float32(rows.Offsets[0]*2)+.5 {
			t.Fatalf("rank %d: step %v exp_avg %v", r, p.Step, f)
		}
	}
	mc, err := dcp.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	bias, err := mc.ReadTensor(ModelFQN("fc.bias"))
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := bias.Float32s(); !slices.Equal(f, []float32{10, 11, 12, 13, 14}) {
		t.Fatalf("bias %v", f)
	}
}

func TestFullStateDictFiles(t *testing.T) {
	dir := t.TempDir()
	w := ptfile.FromFloat32([]int64{2}, []float32{1, 2})
	if err := WriteFullModel(filepath.Join(dir, FullModelName(0)), []Param{{"fc.weight", w}}); err != nil {
		t.Fatal(err)
	}
	if err := WriteFullOptimizer(filepath.Join(dir, FullOptimizerName(0)), []AdamWParam{{"fc.weight", 1, w, w}},
		[]AdamWGroup{{LR: 0.1, Params: []string{"fc.weight"}}}); err != nil {
		t.Fatal(err)
	}
	m, err := ptfile.Read(filepath.Join(dir, "pytorch_model_fsdp.bin"), ptfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ptfile.Get[*ptfile.Tensor](m, `["fc.weight"]`); err != nil || got.Shape[0] != 2 {
		t.Fatalf("model: %v %v", got, err)
	}
	o, err := ptfile.Read(filepath.Join(dir, "optimizer.bin"), ptfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if lr, err := ptfile.Get[float64](o, "param_groups[0].lr"); err != nil || lr != 0.1 {
		t.Fatalf("optimizer lr: %v %v", lr, err)
	}
	if _, err := ptfile.Get[*ptfile.Tensor](o, `state["fc.weight"].exp_avg`); err != nil {
		t.Fatal(err)
	}
}
