package checkpoint_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/internal/ztest"
)

// The DeepSpeed 0.14.5 reference runs: checkpoint.json records every file,
// key, type, dtype and shape engine.save_checkpoint wrote (regenerate with
// ../shared/reference/harness).
const referenceDir = "testdata"

// TestMatchesDeepSpeedLayout saves the harness's MLP setup at world 2 for
// each stage and precision and compares every file DeepSpeed wrote for the
// same run — names, keys, types, dtypes, shapes — with what Save wrote.
func TestMatchesDeepSpeedLayout(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	for _, run := range []string{"z0_fp32", "z1_fp32", "z2_fp32", "z3_fp32", "z0_bf16", "z1_bf16", "z2_bf16", "z3_bf16"} {
		rec, err := checkpoint.ReadRecord(filepath.Join(referenceDir, "mlp_"+run, "checkpoint.json"))
		if err != nil {
			t.Fatal(err)
		}
		var stage int
		var dtype string
		fmt.Sscanf(run, "z%d_%s", &stage, &dtype)
		plan, err := ztest.Plan(stageJSON(stage, dtype, 0), 2)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		runMLP(t, plan, d, 0, 1, dir, false, true)
		m, err := rec.Match(dir, "global_step1", checkpoint.MatchOptions{Skip: []string{"zero_to_fp32.py"}, StructureOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if !m.OK() || fmt.Sprint(m.Client) != "[harness_step]" {
			t.Errorf("%s: %+v", run, m)
		}
		t.Logf("%s: %d files match DeepSpeed's keys, dtypes and shapes", run, m.Files)
	}
}

// TestRecordMatchFinds shows that Record.Match reports each kind of
// difference: a missing file, an extra file, a tensor of another dtype.
func TestRecordMatchFinds(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	plan, err := ztest.Plan(stageJSON(1, "fp32", 0), 2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	runMLP(t, plan, d, 0, 1, dir, false, true)
	read := func() *checkpoint.Record {
		rec, err := checkpoint.ReadRecord(filepath.Join(referenceDir, "mlp_z1_fp32", "checkpoint.json"))
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	optim1 := "global_step1/zero_pp_rank_1_mp_rank_00_optim_states.pt"
	for _, tc := range []struct {
		name   string
		change func(rec *checkpoint.Record)
		want   func(m checkpoint.Match) bool
	}{
		{"missing", func(rec *checkpoint.Record) {
			rec.Files = append(rec.Files, checkpoint.RecordFile{Path: rec.Tag + "/extra_states.pt"})
		}, func(m checkpoint.Match) bool { return fmt.Sprint(m.Missing) == "[global_step1/extra_states.pt]" }},
		{"extra", func(rec *checkpoint.Record) {
			for i, f := range rec.Files {
				if strings.HasSuffix(f.Path, "zero_pp_rank_1_mp_rank_00_optim_states.pt") {
					rec.Files = append(rec.Files[:i], rec.Files[i+1:]...)
					break
				}
			}
		}, func(m checkpoint.Match) bool { return fmt.Sprint(m.Extra) == "["+optim1+"]" }},
		{"dtype", func(rec *checkpoint.Record) {
			for _, f := range rec.Files {
				if strings.HasSuffix(f.Path, "zero_pp_rank_1_mp_rank_00_optim_states.pt") {
					f.Content.Items = json.RawMessage(strings.Replace(string(f.Content.Items), `"dtype": "float32"`, `"dtype": "bfloat16"`, 1))
				}
			}
		}, func(m checkpoint.Match) bool { return len(m.Diffs) == 1 && strings.Contains(m.Diffs[0], "bfloat16") }},
	} {
		rec := read()
		tc.change(rec)
		m, err := rec.Match(dir, "global_step1", checkpoint.MatchOptions{Skip: []string{"zero_to_fp32.py"}, StructureOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if m.OK() || !tc.want(m) {
			t.Errorf("%s: %+v", tc.name, m)
		}
	}
}
