package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const confRef = "../../conformance/testdata/deepspeed-0.14.5-cpu"

// TestConformanceCLI: the MLP's stage-2 cases of the shipped reference
// pass (exit 0), with the table and the JSON reports.
func TestConformanceCLI(t *testing.T) {
	out := filepath.Join(t.TempDir(), "conf.json")
	code, stdout, stderr := runCLI("conformance", confRef, "--only", "mlp/z2_*", "--json", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"case", "weights max |Δ|", "mlp/z2_fp32 ", "mlp/z2_offcpu_bf16 ", "match: 4 files", "bit-exact; DeepSpeed's: loss", "6 cases: 6 pass, 0 fail"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "gpt/") {
		t.Errorf("--only mlp/z2_* ran GPT cases:\n%s", stdout)
	}
	var rep struct {
		Passed bool
		Cases  []struct {
			Case, Status string
			Loss         struct{ N int }
		}
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Passed || len(rep.Cases) != 6 || rep.Cases[0].Status != "pass" || rep.Cases[0].Loss.N != 10 {
		t.Errorf("JSON report: %s", raw)
	}
}

// copyCase copies the reference's MLP run into dir/mlp/<run> with the
// shared init/, for a test to alter.
func copyCase(t *testing.T, dir, run string) string {
	t.Helper()
	cp := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"models.json", "mlp_init.safetensors", "mlp_data.safetensors"} {
		cp(filepath.Join(confRef, "init", f), filepath.Join(dir, "init", f))
	}
	caseDir := filepath.Join(dir, "mlp", run)
	cp(filepath.Join(confRef, "mlp", run, "result.json"), filepath.Join(caseDir, "result.json"))
	cp(filepath.Join(confRef, "mlp", run, "final_fp32.safetensors"), filepath.Join(caseDir, "final_fp32.safetensors"))
	return caseDir
}

// TestConformanceCLIFailures: a case whose recorded loss is off fails, an
// architecture dszero does not know is "unsupported", a run without a
// result is not counted; exit 1 when any case does not pass.
func TestConformanceCLIFailures(t *testing.T) {
	dir := t.TempDir()
	caseDir := copyCase(t, dir, "z2_fp32")
	code, stdout, _ := runCLI("conformance", dir)
	if code != 0 || !strings.Contains(stdout, "1 cases: 1 pass") {
		t.Fatalf("the copied case: exit %d\n%s", code, stdout)
	}

	// Step 3's loss 1e-4 relative off: a failure naming the losses.
	raw, _ := os.ReadFile(filepath.Join(caseDir, "result.json"))
	var res map[string]any
	json.Unmarshal(raw, &res)
	step := res["steps"].([]any)[2].(map[string]any)
	step["loss"] = step["loss"].(float64) * (1 + 1e-4)
	raw, _ = json.Marshal(res)
	os.WriteFile(filepath.Join(caseDir, "result.json"), raw, 0o644)
	// A run DeepSpeed never finished.
	os.MkdirAll(filepath.Join(dir, "mlp", "hung"), 0o755)
	os.WriteFile(filepath.Join(dir, "mlp", "hung", "result.json"), []byte(`{"model": "mlp", "run": "hung", "status": "no_result", "note": "killed"}`), 0o644)
	code, stdout, _ = runCLI("conformance", dir)
	if code != 1 || !strings.Contains(stdout, "mlp/z2_fp32: fail: losses: max rel Δ 9.99e-05 > 1e-05") ||
		!strings.Contains(stdout, "mlp/hung: no result") || !strings.Contains(stdout, "1 without a reference result") {
		t.Errorf("a wrong loss: exit %d\n%s", code, stdout)
	}

	// An architecture dszero does not build.
	dir = t.TempDir()
	copyCase(t, dir, "z2_fp32")
	models := filepath.Join(dir, "init", "models.json")
	raw, _ = os.ReadFile(models)
	os.WriteFile(models, []byte(strings.ReplaceAll(string(raw), `"fc`, `"dense`)), 0o644)
	code, stdout, _ = runCLI("conformance", dir)
	if code != 1 || !strings.Contains(stdout, "mlp/z2_fp32: unsupported: model \"mlp\": an architecture dszero does not know") {
		t.Errorf("an unknown architecture: exit %d\n%s", code, stdout)
	}
}

func TestConformanceUsage(t *testing.T) {
	if code, _, errs := runCLI("conformance"); code != 2 || !strings.Contains(errs, "give the directories") {
		t.Errorf("no directory: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI("conformance", confRef, "--only", "nothing-like-this"); code != 2 || !strings.Contains(errs, "no case matches") {
		t.Errorf("--only matching nothing: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI("conformance", t.TempDir()); code != 2 || !strings.Contains(errs, "no cases") {
		t.Errorf("an empty directory: exit %d, %s", code, errs)
	}
}
