package main

import (
	"strings"
	"testing"

	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/model/llama"
)

// TestLoadModelFamilies: --model picks the family, and the trainModel
// answers for it: a GPT preset is a gptJob, a Llama-family preset a
// llamaJob, each with its configuration's shape and size and no weights
// to read; only the Llama family takes records; an unknown name lists
// both families' presets.
func TestLoadModelFamilies(t *testing.T) {
	gptCfg, err := gpt.Preset("small")
	if err != nil {
		t.Fatal(err)
	}
	llamaCfg, err := llama.Preset("tiny-llama")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		arg            string
		vocab, context int
		params         int
		records        bool // RecordsTokenizer succeeds
	}{
		{"small", gptCfg.Vocab, gptCfg.Context, gptCfg.NumParams(), false},
		{"tiny-llama", llamaCfg.Vocab, llamaCfg.MaxSeq(), llamaCfg.NumParams(), true},
	} {
		j := &trainJob{f: &trainFlags{modelArg: tc.arg}}
		if err := j.loadModel(); err != nil {
			t.Fatalf("--model %s: %v", tc.arg, err)
		}
		switch j.m.(type) {
		case *gptJob:
			if tc.arg != "small" {
				t.Errorf("--model %s loaded a GPT", tc.arg)
			}
		case *llamaJob:
			if tc.arg != "tiny-llama" {
				t.Errorf("--model %s loaded a Llama-family model", tc.arg)
			}
		default:
			t.Fatalf("--model %s: a %T", tc.arg, j.m)
		}
		if v, c := j.m.Shape(); v != tc.vocab || c != tc.context {
			t.Errorf("--model %s: Shape %d, %d, want %d, %d", tc.arg, v, c, tc.vocab, tc.context)
		}
		if n := j.m.NumParams(); n != tc.params || j.m.Builder().Layout().Numel != tc.params {
			t.Errorf("--model %s: NumParams %d, layout %d, want %d", tc.arg, n, j.m.Builder().Layout().Numel, tc.params)
		}
		if j.m.InitRange() != nil {
			t.Errorf("--model %s: a preset has weights to read", tc.arg)
		}
		dir, err := j.m.RecordsTokenizer()
		if tc.records != (err == nil) || dir != "" {
			t.Errorf("--model %s: RecordsTokenizer %q, %v; want records %v from no directory", tc.arg, dir, err, tc.records)
		}
		_, streams := j.m.(checkpointSaver)
		if streams != (tc.arg == "small") {
			t.Errorf("--model %s: writes --save-model from the checkpoints: %v", tc.arg, streams)
		}
	}
	j := &trainJob{f: &trainFlags{modelArg: "gpt5"}}
	err = j.loadModel()
	if err == nil || !strings.Contains(err.Error(), "unknown preset") || !strings.Contains(err.Error(), "tiny-llama") {
		t.Errorf("--model gpt5: %v, want an error naming both families' presets", err)
	}
}
