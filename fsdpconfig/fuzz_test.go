package fsdpconfig

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzCompile feeds arbitrary files to both syntaxes and both dialects.
// Compile must not panic; every diagnostic names the file and lies within
// it; an accepted plan is consistent (stage from strategy, groups that
// multiply to the process count) and renders as valid JSON and text.
func FuzzCompile(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "corpus", "*"))
	for _, name := range files {
		ext := filepath.Ext(name)
		if ext != ".yaml" && ext != ".json" {
			continue
		}
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, ext == ".json", "")
	}
	for _, c := range append(ruleCases(), trainerCases()...) {
		f.Add([]byte(c.data), strings.HasSuffix(c.file, ".json"), c.opts.TrainerFSDP)
	}
	f.Add([]byte("a: &x [*x]\n"), false, "")
	f.Add([]byte("x: &a {k: 1}\ny:\n  <<: *a\n  j: !!str 2\n"), false, "")
	f.Fuzz(func(t *testing.T, data []byte, isJSON bool, trainer string) {
		name := "f.yaml"
		if isJSON {
			name = "f.json"
		}
		opts := Options{TrainerFSDP: trainer}
		if len(trainer) > 40 {
			opts.Dialect = Trainer
		}
		p, diags := Compile(name, data, opts)
		lines := strings.Count(string(data), "\n") + strings.Count(string(data), "\r") + 2
		for _, d := range diags {
			if d.File != name {
				t.Fatalf("diagnostic without the file: %s", d)
			}
			if d.Line < 0 || d.Line > lines || d.Col < 0 {
				t.Fatalf("diagnostic outside the file (%d lines): %s", lines, d)
			}
			if d.Msg == "" {
				t.Fatalf("empty message: %+v", d)
			}
		}
		if diags.HasErrors() {
			return
		}
		if p.Stage != 0 && p.Stage != 3 || (p.Stage == 0) != (p.Strategy == NoShard) {
			t.Fatalf("stage %d for %s", p.Stage, p.Strategy)
		}
		if p.NumProcesses < 1 || p.ShardGroupSize < 1 || p.ShardGroupSize*p.ReplicaGroups != p.NumProcesses {
			t.Fatalf("groups %d × %d for %d processes", p.ReplicaGroups, p.ShardGroupSize, p.NumProcesses)
		}
		if p.Version != 1 && p.Version != 2 {
			t.Fatalf("version %d", p.Version)
		}
		if !json.Valid(ToDSConfig(p)) {
			t.Fatalf("invalid ds_config JSON: %s", ToDSConfig(p))
		}
		ExplainText(io.Discard, p)
	})
}
