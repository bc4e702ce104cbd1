package main

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSaveModelStreamed: --save-model written from the run's last
// checkpoint (with --save, streaming as dszero export does) is the
// directory the in-memory path writes without --save, tensor for tensor
// and config.json byte for byte; and --save-async with --save-model
// writes it too, once the last checkpoint is finished.
func TestSaveModelStreamed(t *testing.T) {
	dir := t.TempDir()
	common := []string{"train", "--model", "tiny", "--data", "random", "--seq", "16", "--steps", "2", "--nproc", "2", "--quiet",
		"--deepspeed", "../../examples/ds_config_zero3.json"}
	outs := map[string][]string{
		"memory":   {"--save-model", filepath.Join(dir, "memory")},
		"streamed": {"--save", filepath.Join(dir, "ck"), "--save-model", filepath.Join(dir, "streamed")},
		"async":    {"--save", filepath.Join(dir, "ck-async"), "--save-async", "--save-model", filepath.Join(dir, "async")},
	}
	for name, args := range outs {
		if code, o, e := runCLI(append(append([]string(nil), common...), args...)...); code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", name, code, o, e)
		}
	}
	want := tensorsOf(t, filepath.Join(dir, "memory", "model.safetensors"))
	wantCfg, err := os.ReadFile(filepath.Join(dir, "memory", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"streamed", "async"} {
		got := tensorsOf(t, filepath.Join(dir, name, "model.safetensors"))
		if len(want) == 0 || !maps.Equal(got, want) {
			for k := range want {
				if got[k] != want[k] {
					t.Errorf("%s: %s is %.60s…, in memory %.60s…", name, k, got[k], want[k])
				}
			}
			t.Fatalf("%s: tensors differ from the in-memory --save-model's", name)
		}
		cfg, err := os.ReadFile(filepath.Join(dir, name, "config.json"))
		if err != nil || string(cfg) != string(wantCfg) {
			t.Errorf("%s: config.json %q (%v), want %q", name, cfg, err, wantCfg)
		}
	}
	for _, extra := range [][]string{{"--save-async"}, {"--save-async", "--output_dir", filepath.Join(dir, "trainer")}} {
		if code, _, e := runCLI(append(append([]string(nil), common...), extra...)...); code != 2 || !strings.Contains(e, "--save-async needs --save") {
			t.Errorf("%v: exit %d, %q; want a usage error", extra, code, e)
		}
	}
}
