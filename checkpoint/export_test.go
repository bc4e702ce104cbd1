package checkpoint_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/lrsched"
)

// TestExport: the consolidated fp32 weights Export streams out of a
// checkpoint — dszero's at stages 0–3 on 1–3 ranks (several stage-3
// sub-groups too, and trained in fp16 and bf16), and DeepSpeed's own — are the trained model's bit for
// bit, under the parameter names; with DType BF16 each is rounded to
// nearest even.
func TestExport(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	check := func(t *testing.T, file string, want []float32, bf16 bool) {
		t.Helper()
		f, err := model.OpenSafetensors(file)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if len(f.Tensors) != len(d.Layout.Specs) {
			t.Fatalf("%d tensors, the model has %d", len(f.Tensors), len(d.Layout.Specs))
		}
		for _, sp := range d.Layout.Specs {
			got := make([]float32, sp.Numel)
			if err := f.ReadFloat32(sp.Name, got); err != nil {
				t.Fatal(err)
			}
			w := append([]float32(nil), want[sp.Offset:sp.Offset+sp.Numel]...)
			if bf16 {
				half.RoundBF16(w)
			}
			if i := bitsEqual(got, w); i >= 0 {
				t.Fatalf("%s element %d: %v, want %v", sp.Name, i, got[i], w[i])
			}
		}
	}
	for _, tc := range []struct {
		stage, world, subGroup int
		dtype                  string
		fused                  bool // FusedAdam: at stage 0 in fp16, FP16_Optimizer's flat master (else FP16_UnfusedOptimizer's copies)
	}{{0, 1, 0, "fp32", false}, {1, 2, 0, "fp32", false}, {2, 3, 0, "fp32", false}, {3, 2, 1000, "fp32", false}, {3, 3, 0, "fp32", false},
		{2, 2, 0, "fp16", false}, {3, 2, 0, "bf16", false}, {0, 2, 0, "fp16", false}, {0, 2, 0, "fp16", true}} {
		name := fmt.Sprintf("z%d_w%d_%s", tc.stage, tc.world, tc.dtype)
		js := stageJSON(tc.stage, tc.dtype, tc.subGroup)
		if tc.fused {
			name += "_fusedadam"
			js = strings.Replace(js, `"torch_adam": true`, `"torch_adam": false`, 1)
		}
		t.Run(name, func(t *testing.T) {
			plan, err := ztest.Plan(js, tc.world)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			trained := runMLP(t, plan, d, 0, 2, dir, false, true)
			out := filepath.Join(dir, "model.safetensors")
			st, err := checkpoint.Export(dir, out, checkpoint.ExportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !st.ManifestCheck || st.Params != len(d.Layout.Specs) || st.Elements != int64(d.Layout.Numel) {
				t.Errorf("stats %+v", st)
			}
			check(t, out, trained.final, false)
			if _, err := checkpoint.Export(dir, out+".bf16", checkpoint.ExportOptions{DType: "BF16"}); err != nil {
				t.Fatal(err)
			}
			check(t, out+".bf16", trained.final, true)
		})
	}
	t.Run("deepspeed_z3", func(t *testing.T) {
		dir := "testdata/ds_mlp_z3_fp32"
		plan, err := ztest.Plan(stageJSON(3, "fp32", 0), 2)
		if err != nil {
			t.Fatal(err)
		}
		// The weights the checkpoint holds, as dszero loads them.
		loaded := runMLPVersion(t, lrsched.DeepSpeed0145, plan, d, 5, 5, dir, true, false)
		out := filepath.Join(t.TempDir(), "model.safetensors")
		st, err := checkpoint.Export(dir, out, checkpoint.ExportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st.ManifestCheck || st.Stage != 3 || st.World != 2 {
			t.Errorf("stats %+v", st)
		}
		check(t, out, loaded.final, false)
	})
}
