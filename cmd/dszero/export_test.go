package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExportCLI: dszero export writes a checkpoint's consolidated weights
// (here DeepSpeed's own ZeRO-2 checkpoint, and one dszero saved at stage 3
// with --model for config.json, which dszero train --model then loads);
// bad arguments are usage errors, a missing checkpoint an error naming it.
func TestExportCLI(t *testing.T) {
	out := t.TempDir()
	code, stdout, errs := runCLI("export", "../../checkpoint/testdata/ds_mlp_z2_fp32", filepath.Join(out, "ds"))
	if code != 0 || !strings.Contains(stdout, "ZeRO stage 2, 2 rank(s)") || !strings.Contains(stdout, "6 parameters, 5768 elements") {
		t.Fatalf("exit %d\n%s%s", code, stdout, errs)
	}
	ck := filepath.Join(out, "ck")
	if code, o, e := runCLI("train", "--model", "tiny", "--data", "random", "--seq", "16", "--steps", "2", "--nproc", "2", "--quiet",
		"--deepspeed", "../../examples/ds_config_zero3.json", "--save", ck); code != 0 {
		t.Fatalf("train: exit %d\n%s%s", code, o, e)
	}
	if code, o, e := runCLI("export", ck, filepath.Join(out, "tiny"), "--model", "tiny"); code != 0 || !strings.Contains(o, "checked against its manifests") {
		t.Fatalf("export: exit %d\n%s%s", code, o, e)
	}
	if _, err := os.Stat(filepath.Join(out, "tiny", "config.json")); err != nil {
		t.Error(err)
	}
	if code, o, e := runCLI("train", "--model", filepath.Join(out, "tiny"), "--data", "random", "--seq", "16", "--steps", "1", "--quiet"); code != 0 {
		t.Errorf("train --model of the export: exit %d\n%s%s", code, o, e)
	}
	if code, _, _ := runCLI("export", ck); code != 2 {
		t.Errorf("one argument: exit %d, want 2", code)
	}
	if code, _, e := runCLI("export", filepath.Join(out, "nothing"), filepath.Join(out, "x")); code != 1 || !strings.Contains(e, "latest") {
		t.Errorf("a missing checkpoint: exit %d, %s", code, e)
	}
}
