package checkpoint_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/ptfile"
)

// The DeepSpeed 0.14.5 reference runs: checkpoint.json records every file,
// key, type, dtype and shape engine.save_checkpoint wrote (regenerate with
// ../shared/reference/harness).
const referenceDir = "testdata"

type recNode struct {
	Type  string              `json:"type"`
	DType string              `json:"dtype"`
	Shape []int64             `json:"shape"`
	Items json.RawMessage     `json:"items"`
	Len   int                 `json:"len"`
	Attrs map[string]*recNode `json:"attrs"`
}

// matchStructure compares a value with a recorded node: types, dict keys,
// list lengths, tensor dtypes and shapes (not values). ds_config's
// contents and client state are the run's own.
func matchStructure(n *recNode, v any, path string) error {
	fail := func(f string, a ...any) error {
		return fmt.Errorf("%s: recorded %s: %s", path, n.Type, fmt.Sprintf(f, a...))
	}
	switch n.Type {
	case "tensor":
		t, ok := v.(*ptfile.Tensor)
		if !ok || t.DType.String() != n.DType || fmt.Sprint(t.Shape) != fmt.Sprint(n.Shape) {
			return fail("got %v %s", ptfile.TypeName(v), fmt.Sprint(v))
		}
	case "dict", "OrderedDict":
		d, ok := v.(*ptfile.Dict)
		if !ok || d.OrderedDict != (n.Type == "OrderedDict") {
			return fail("got %s", ptfile.TypeName(v))
		}
		if strings.HasSuffix(path, "ds_config") {
			return nil
		}
		var items map[string]*recNode
		json.Unmarshal(n.Items, &items)
		var want, got []string
		for k := range items {
			want = append(want, k)
		}
		for _, k := range d.Keys() {
			if ks := fmt.Sprint(k); ks != "dszero" {
				got = append(got, ks)
			}
		}
		sort.Strings(want)
		sort.Strings(got)
		if strings.Join(want, ",") != strings.Join(got, ",") {
			return fail("keys %v, recorded %v", got, want)
		}
		for _, k := range d.Keys() {
			c, ok := items[fmt.Sprint(k)]
			if !ok {
				continue
			}
			x, _ := d.Get(k)
			if err := matchStructure(c, x, path+"."+fmt.Sprint(k)); err != nil {
				return err
			}
		}
	case "list":
		l, ok := v.(ptfile.List)
		if !ok || len(l) != n.Len {
			return fail("got %s of %v", ptfile.TypeName(v), v)
		}
		var items []*recNode
		json.Unmarshal(n.Items, &items)
		for i, c := range items {
			if err := matchStructure(c, l[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case "int", "float", "bool", "str", "NoneType", "torch.Size", "builtins.set":
		want := map[string]string{"int": "int", "float": "float", "bool": "bool", "str": "str", "NoneType": "None", "torch.Size": "torch.Size", "builtins.set": "set"}[n.Type]
		if got := ptfile.TypeName(v); got != want {
			return fail("got %s", got)
		}
	default:
		o, ok := v.(*ptfile.Object)
		if !ok || !strings.HasSuffix(n.Type, " "+o.Class()) {
			return fail("got %s", ptfile.TypeName(v))
		}
	}
	return nil
}

// TestMatchesDeepSpeedLayout saves the harness's MLP setup at world 2 for
// each stage and precision and compares every file DeepSpeed wrote for the
// same run — names, keys, types, dtypes, shapes — with what Save wrote.
func TestMatchesDeepSpeedLayout(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	for _, run := range []string{"z0_fp32", "z1_fp32", "z2_fp32", "z3_fp32", "z0_bf16", "z1_bf16", "z2_bf16", "z3_bf16"} {
		raw, err := os.ReadFile(filepath.Join(referenceDir, "mlp_"+run, "checkpoint.json"))
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Tag   string `json:"described_tag"`
			Files []struct {
				Path    string   `json:"path"`
				Content *recNode `json:"content"`
			} `json:"files"`
		}
		if err := json.Unmarshal(raw, &rec); err != nil {
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
		checked := 0
		for _, f := range rec.Files {
			if f.Content == nil || !strings.HasPrefix(f.Path, rec.Tag+"/") {
				continue
			}
			name := strings.TrimPrefix(f.Path, rec.Tag+"/")
			v, err := ptfile.Read(filepath.Join(dir, "global_step1", name), ptfile.Options{DeepSpeed: true})
			if err != nil {
				t.Errorf("%s: %v", run, err)
				continue
			}
			if m, ok := v.(*ptfile.Dict); ok && strings.Contains(name, "model_states") {
				m.Set("harness_step", int64(0)) // the harness's client state
			}
			if err := matchStructure(f.Content, v, name); err != nil {
				t.Errorf("%s: %v", run, err)
			}
			checked++
		}
		if checked == 0 {
			t.Errorf("%s: no file compared", run)
		}
		t.Logf("%s: %d files match DeepSpeed's keys, dtypes and shapes", run, checked)
	}
}
