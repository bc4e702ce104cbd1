package conformance

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/model"
)

// TestExportDeepSpeedFP16Stage0: dszero export of DeepSpeed's own stage-0
// fp16 checkpoints — FP16_UnfusedOptimizer's (fp32 copies per parameter)
// and FP16_Optimizer's (one flat fp32 master) — writes the fp32 master
// the file holds, bit for bit, as torch reads it
// (ckpt_master_step5.safetensors, conformance/reference/ckpt_master.py);
// not the fp16 module weights beside it.
func TestExportDeepSpeedFP16Stage0(t *testing.T) {
	for _, c := range []string{"z0_fp16_p20", "z0_fp16_p8_fusedadam"} {
		t.Run(c, func(t *testing.T) {
			dir := filepath.Join("testdata/deepspeed-0.14.5-cpu-gpt/gpt", c)
			out := filepath.Join(t.TempDir(), "model.safetensors")
			st, err := checkpoint.Export(filepath.Join(dir, DeepSpeedCheckpoint), out, checkpoint.ExportOptions{Tag: "global_step5"})
			if err != nil {
				t.Fatal(err)
			}
			if st.Stage != 0 || st.Params != 29 {
				t.Errorf("stats %+v: want stage 0, 29 parameters", st)
			}
			got, err := model.OpenSafetensors(out)
			if err != nil {
				t.Fatal(err)
			}
			defer got.Close()
			want, err := model.OpenSafetensors(filepath.Join(dir, "ckpt_master_step5.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer want.Close()
			if len(got.Tensors) != len(want.Tensors) {
				t.Fatalf("%d tensors, torch reads %d", len(got.Tensors), len(want.Tensors))
			}
			var rounded int // elements an fp16 value would not represent: the master is not the module
			for _, ti := range want.Tensors {
				w := make([]float32, ti.Numel())
				g := make([]float32, ti.Numel())
				if err := want.ReadFloat32(ti.Name, w); err != nil {
					t.Fatal(err)
				}
				if err := got.ReadFloat32(ti.Name, g); err != nil {
					t.Fatal(err)
				}
				for i := range w {
					if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
						t.Fatalf("%s element %d: exported %v, the checkpoint's master %v", ti.Name, i, g[i], w[i])
					}
					if math.Float32bits(w[i])&0x1fff != 0 {
						rounded++
					}
				}
			}
			if rounded == 0 {
				t.Errorf("every master value is an fp16 value: the reference looks like the fp16 module")
			}
		})
	}
}
