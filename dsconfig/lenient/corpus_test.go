package lenient

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type verdict struct{ file, phase, notes string }

// readVerdicts reads DEEPSPEED_VERDICTS.tsv: what DeepSpeed v0.19.5 (with
// hjson-py 3.1.0) does with each corpus file; see VERDICTS_README.md.
func readVerdicts(t *testing.T) []verdict {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(corpusDir, "DEEPSPEED_VERDICTS.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	head := strings.Split(lines[0], "\t")
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	var out []verdict
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		out = append(out, verdict{file: f[col["file"]], phase: f[col["phase"]], notes: f[col["notes"]]})
	}
	return out
}

// corpusParseErrors are the corpus files Parse must reject, with the error
// expected. The duplicate is DeepSpeed's own syntax-phase failure; the
// template file is one DeepSpeed reads (with `${zero_stage},` as a string)
// and rejects later, in its config phase.
var corpusParseErrors = map[string]string{
	"hiyouga__LLaMA-Factory__examples__deepspeed__ds_z3_fp8_config.json":                                      `hiyouga__LLaMA-Factory__examples__deepspeed__ds_z3_fp8_config.json:38:3: duplicate key "steps_per_print" in the top-level object (first at line 33); DeepSpeed rejects duplicate keys: keep one`,
	"deepspeedai__DeepSpeedExamples__training__tensor_parallel__hf_integration__configs__ds_config_temp.json": `deepspeedai__DeepSpeedExamples__training__tensor_parallel__hf_integration__configs__ds_config_temp.json:24:16: unquoted value ${zero_stage}, at zero_optimization.stage looks like an unfilled template; DeepSpeed's Hjson reader would take it as the string "${zero_stage}," and fail later; fill in the value or quote it`,
}

func TestCorpusAgreesWithDeepSpeed(t *testing.T) {
	vs := readVerdicts(t)
	if len(vs) != 74 {
		t.Fatalf("%d verdicts, want 74", len(vs))
	}
	var hjsonOnly, syntax int
	for _, vd := range vs {
		t.Run(vd.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(corpusDir, vd.file))
			if err != nil {
				t.Fatal(err)
			}
			_, herr := ParseHjson(vd.file, data)
			v, err := Parse(vd.file, data)
			if vd.phase == "syntax" {
				syntax++
				if herr == nil {
					t.Errorf("ParseHjson accepted a file DeepSpeed rejects while loading it")
				}
			} else if herr != nil {
				t.Errorf("ParseHjson: %v; DeepSpeed loads this file (verdict phase %q)", herr, vd.phase)
			}
			if want, ok := corpusParseErrors[vd.file]; ok {
				if err == nil || err.Error() != want {
					t.Errorf("Parse error\n got: %v\nwant: %s", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if strings.Contains(vd.notes, "Hjson-only") || strings.Contains(vd.notes, "not strict JSON") {
				hjsonOnly++
				if json.Valid(data) {
					t.Errorf("notes say Hjson-only but the file is strict JSON")
				}
			}
			if json.Valid(data) {
				var want any
				if err := json.Unmarshal(data, &want); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, floatNumbers(v.Interface())); diff != "" {
					t.Errorf("Interface differs from encoding/json (-json +ours):\n%s", diff)
				}
			}
		})
	}
	if syntax != 1 || hjsonOnly != 4 {
		t.Errorf("%d syntax-phase files and %d parsed Hjson-only files; want 1 and 4 (the fifth is the template file)", syntax, hjsonOnly)
	}
}

// floatNumbers turns the int64s of Interface into float64, as
// encoding/json decodes every number.
func floatNumbers(x any) any {
	switch x := x.(type) {
	case int64:
		return float64(x)
	case []any:
		for i := range x {
			x[i] = floatNumbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = floatNumbers(x[k])
		}
	}
	return x
}
