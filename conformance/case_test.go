package conformance

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

const ref = "testdata/deepspeed-0.14.5-cpu"

// TestStepRecordMicro: both spellings of micro_losses give [rank][micro].
func TestStepRecordMicro(t *testing.T) {
	for _, js := range []string{
		`{"loss": 1, "micro_losses": {"rank1": [3, 4], "rank0": [1, 2]}}`,
		`{"loss": 1, "micro_losses": [{"micro": 1, "rank": 0, "loss": 2}, {"micro": 0, "rank": 0, "loss": 1}, {"micro": 0, "rank": 1, "loss": 3}, {"micro": 1, "rank": 1, "loss": 4}]}`,
	} {
		var s StepRecord
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			t.Fatal(err)
		}
		if len(s.Micro) != 2 || !slices.Equal(s.Micro[0], []float64{1, 2}) || !slices.Equal(s.Micro[1], []float64{3, 4}) || s.Loss != 1 {
			t.Errorf("%s: %+v", js, s)
		}
	}
	var s StepRecord
	if err := json.Unmarshal([]byte(`{"micro_losses": {"r0": [1]}}`), &s); err == nil {
		t.Error("a key that is not rank<N> was accepted")
	}
}

// TestFind: every run of the shipped reference is a case, named by its
// path below the root.
func TestFind(t *testing.T) {
	cases, err := Find(ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 44 || cases[0].Name != "gpt/plain_dsclip" {
		t.Errorf("%d cases, first %q", len(cases), cases[0].Name)
	}
	one, err := Find(filepath.Join(ref, "mlp", "z1_bf16"))
	if err != nil || len(one) != 1 || one[0].Name != "z1_bf16" {
		t.Fatalf("a case directory as the root: %v %+v", err, one)
	}
	c := one[0]
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	if c.WorldSize() != 2 || c.ModelKey() != "mlp" || filepath.Base(c.InitDir) != "init" {
		t.Errorf("world %d, model %q, init %s", c.WorldSize(), c.ModelKey(), c.InitDir)
	}
	// z1_bf16 ends on z0_bf16's weights.
	if f, err := c.finalWeights(); err != nil || f != filepath.Join(ref, "mlp", "z0_bf16", FinalFile) {
		t.Errorf("final weights: %s, %v", f, err)
	}
}

// TestBuildArch: the models of the reference are recognized from their
// parameters; anything else is unsupported.
func TestBuildArch(t *testing.T) {
	c := Case{Dir: filepath.Join(ref, "gpt", "z0_fp32")}
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	d, err := readModel(&c)
	if err != nil {
		t.Fatal(err)
	}
	a, err := buildArch(&c, d)
	if err != nil {
		t.Fatal(err)
	}
	if g := a.gpt; a.name != "gpt" || g.Vocab != 64 || g.Context != 32 || g.Dim != 64 || g.Heads != 4 || g.Layers != 2 || g.MLP != 256 || g.Tied || a.layout.Numel != 110336 {
		t.Errorf("GPT: %s %+v, %d params", a.name, a.gpt, a.layout.Numel)
	}
	c.Result.Model = "mlp"
	dm, err := readModel(&c)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := buildArch(&c, dm); err != nil || !slices.Equal(a.mlp.Sizes, []int{16, 64, 64, 8}) {
		t.Errorf("MLP: %v %v", a, err)
	}
	var u *unsupportedError
	bad := d
	bad.Params = slices.Clone(d.Params)
	bad.Params[2].Name = "blocks.0.rmsnorm.weight"
	if _, err := buildArch(&c, bad); !errors.As(err, &u) {
		t.Errorf("a GPT with an RMSNorm: %v", err)
	}
	bad = dm
	bad.Activation = "gelu"
	if _, err := buildArch(&c, bad); !errors.As(err, &u) {
		t.Errorf("an MLP with GELU: %v", err)
	}
	bad.Activation, bad.Params = "", nil
	if _, err := buildArch(&c, bad); !errors.As(err, &u) {
		t.Errorf("no parameters: %v", err)
	}
}

// TestRunUnsupportedVersion: a case from a DeepSpeed release dszero does
// not follow is unsupported, not run.
func TestRunUnsupportedVersion(t *testing.T) {
	dir := t.TempDir()
	raw, err := os.ReadFile(filepath.Join(ref, "mlp", "z2_fp32", ResultFile))
	if err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	json.Unmarshal(raw, &res)
	res["deepspeed_version"] = "0.16.0"
	raw, _ = json.Marshal(res)
	os.WriteFile(filepath.Join(dir, ResultFile), raw, 0o644)
	abs, _ := filepath.Abs(filepath.Join(ref, "init"))
	os.WriteFile(filepath.Join(dir, MetaFile), []byte(`{"init": "`+abs+`"}`), 0o644)
	rep := Run(Case{Name: "x", Dir: dir})
	if rep.Status != Unsupported || rep.Checkpoint != NotChecked {
		t.Errorf("%s: %s", rep.Status, rep.Reason)
	}
}
