package dsconfig

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzCompile feeds arbitrary bytes through parsing and validation in both
// modes: nothing may panic, and a rejection is always a diagnostic with a
// position or a JSON path.
func FuzzCompile(f *testing.F) {
	files, _ := filepath.Glob("testdata/ds_configs/*")
	for _, name := range files {
		if filepath.Ext(name) == ".json" || filepath.Ext(name) == ".conf" {
			data, err := os.ReadFile(name)
			if err == nil {
				f.Add(data, uint8(8))
			}
		}
	}
	f.Add([]byte(`{"train_batch_size": "auto", "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}`), uint8(3))
	f.Add([]byte(`{"zero_optimization": true, "allgather_size": 1e9, "bfloat16": {"enabled": 1}}`), uint8(1))
	hf := DefaultHFArgs()
	hf.HiddenSize, hf.MaxSteps = 64, 10
	f.Fuzz(func(t *testing.T, data []byte, world uint8) {
		w := int(world%16) + 1
		for _, opts := range []Options{{WorldSize: w}, {WorldSize: w, HF: &hf}} {
			_, diags := Compile("fuzz.json", data, opts)
			for _, d := range diags {
				if d.Severity == Error && d.Line == 0 && d.Path == "" {
					t.Fatalf("error without position or path: %s", d)
				}
				if d.Msg == "" {
					t.Fatalf("empty message: %+v", d)
				}
			}
		}
	})
}
