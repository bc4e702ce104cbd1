package conformance

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

const zeroppCases = "testdata/deepspeed-0.14.5-cpu-zeropp"

// TestZeroPPCases runs the ZeRO++ qwZ and qgZ reference cases (DeepSpeed
// 0.14.5's stage 3 with its quantizer kernels ported to torch,
// testdata/deepspeed-0.14.5-cpu-zeropp/README.md), and, as a control,
// each quantized reference replayed with the quantization taken out of
// its config: that run must fail, so the bands tell quantized from plain
// stage 3.
func TestZeroPPCases(t *testing.T) {
	cases, err := Find(zeroppCases)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 5 {
		t.Fatalf("%d cases under %s, want 5", len(cases), zeroppCases)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			r := Run(c)
			t.Logf("%s %s: losses max rel Δ %.2e (micro %.2e), grad norms %.2e, weights max |Δ| %.2e", r.Case, r.Status, r.Loss.MaxRel, r.Micro.MaxRel, r.GradNorm.MaxRel, r.Weights.MaxAbs)
			if r.Status != Pass {
				t.Errorf("%s: %s", r.Status, r.Reason)
			}
		})
		if err := c.Load(); err != nil {
			t.Fatal(err)
		}
		if c.Name == "mlp/z3_qgz_fp16" || !bytes.Contains(c.Result.DSConfig, []byte(`"zero_quantized_`)) {
			continue // the MLP's control is the GPT's; the plain case has none
		}
		t.Run(c.Name+"/unquantized", func(t *testing.T) {
			r := Run(unquantized(t, c))
			t.Logf("unquantized against %s: %s, losses max rel Δ %.2e, grad norms %.2e", c.Name, r.Status, r.Loss.MaxRel, r.GradNorm.MaxRel)
			if r.Status != Fail {
				t.Errorf("stage 3 without qwZ/qgZ against the quantized reference: %s, want fail (%s)", r.Status, r.Reason)
			}
		})
	}
}

// unquantized is a copy of case c in a temporary directory with qwZ and
// qgZ turned off in its ds_config (Run reads the case from its files),
// its init directory named in a case.json.
func unquantized(t *testing.T, c Case) Case {
	t.Helper()
	dir := filepath.Join(t.TempDir(), filepath.FromSlash(c.Name))
	if err := os.CopyFS(dir, os.DirFS(c.Dir)); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(c.Dir, ResultFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"zero_quantized_weights", "zero_quantized_gradients"} {
		raw = bytes.Replace(raw, []byte(`"`+key+`": true`), []byte(`"`+key+`": false`), 1)
	}
	if err := os.WriteFile(filepath.Join(dir, ResultFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	init, err := filepath.Abs(c.InitDir)
	if err != nil {
		t.Fatal(err)
	}
	meta := fmt.Sprintf(`{"init": %q}`, init)
	if err := os.WriteFile(filepath.Join(dir, MetaFile), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	return Case{Name: c.Name + " unquantized", Dir: dir}
}
