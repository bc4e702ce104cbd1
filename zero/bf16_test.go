package zero_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/internal/fdiff"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/lrsched"
)

// withKeys puts extra top-level keys into a harness config.
func withKeys(js, keys string) string {
	out := strings.Replace(js, `"gradient_clipping": `, keys+`, "gradient_clipping": `, 1)
	if out == js {
		panic("withKeys: no gradient_clipping in the config")
	}
	return out
}

// TestDeepSpeedParityMLPBF16Enabled reproduces DeepSpeed 0.14.5's 2-rank
// bf16 runs of the MLP at stages 0, 1 and 2 with bf16 really enabled
// (losses 1e-3 relative, final fp32 weights 5e-3). The gradients are kept,
// accumulated and reduced in DeepSpeed's dtypes; the MLP rounds each op
// once and sums its products in the Gemmer's order, not in torch's bf16
// kernel's, so it is not bit for bit (the GPT is: package train).
func TestDeepSpeedParityMLPBF16Enabled(t *testing.T) {
	d := loadMLP(t)
	results := []string{mlpRef + "z0_bf16_result.json", "testdata/mlp_z1_bf16_result.json", "testdata/mlp_z2_bf16_result.json"}
	finals := map[string]string{
		"z0_bf16": "testdata/mlp_z0_bf16_final_fp32.safetensors",
		"z2_bf16": "testdata/mlp_z2_bf16_final_fp32.safetensors",
	}
	for stage := 0; stage <= 2; stage++ {
		t.Run(fmt.Sprintf("z%d_bf16", stage), func(t *testing.T) {
			ref, err := ztest.ReadDSResult(results[stage])
			if err != nil {
				t.Fatal(err)
			}
			own := ref.FinalIdenticalTo
			if own == "" {
				own = fmt.Sprintf("z%d_bf16", stage)
			}
			want := make([]float32, d.Layout.Numel)
			if err := model.ReadLayout(finals[own], &d.Layout, want); err != nil {
				t.Fatal(err)
			}
			plan, err := ztest.Plan(withKeys(harnessJSON(stage, 4, 2, 500000000, false), `"bf16": {"enabled": true}`), 2)
			if err != nil {
				t.Fatal(err)
			}
			if plan.Precision.DType != device.BF16 {
				t.Fatalf("the plan trains in %s", plan.Precision.DType)
			}
			got, err := ztest.RunMLP(plan, 10, lrsched.DeepSpeed0145, d, nil)
			if err != nil {
				t.Fatal(err)
			}
			var loss float64
			for s, rs := range ref.Steps {
				loss = math.Max(loss, relErr(got.Losses[s], rs.Loss))
			}
			wabs, _ := fdiff.Weights(got.Final, want)
			t.Logf("vs DeepSpeed bf16: step losses max rel Δ %.2e; final weights max |Δ| %.2e", loss, wabs)
			if loss > 1e-3 || wabs > 5e-3 {
				t.Errorf("outside the bf16 tolerances (losses 1e-3 relative, weights 5e-3)")
			}
		})
	}
}

// TestCommunicationDataType16 trains the fp32 MLP on 3 ranks with
// communication_data_type fp16 and bf16 at stages 0, 1 and 2: the
// gradients go over the wire in 16 bits (half the bytes of the fp32
// run's gradient collective), the rounding changes the weights, and only
// at 16-bit precision.
func TestCommunicationDataType16(t *testing.T) {
	d := loadMLP(t)
	const world = 3
	kinds := []comm.Kind{comm.KindAllReduce, comm.KindReduceScatter, comm.KindAllReduce} // the gradients' collective by stage
	for stage := 0; stage <= 2; stage++ {
		run := func(keys string) ztest.Run {
			t.Helper()
			js := harnessJSON(stage, 4, 2, 1000, false)
			if keys != "" {
				js = withKeys(js, keys)
			}
			plan, err := ztest.Plan(js, world)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ztest.RunMLP(plan, 3, lrsched.DeepSpeed0145, d, nil)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		base := run("")
		for _, dt := range []string{"fp16", "bf16"} {
			got := run(fmt.Sprintf(`"communication_data_type": %q`, dt))
			k := kinds[stage]
			b32, b16 := base.Traffic[0].Of(k).Bytes, got.Traffic[0].Of(k).Bytes
			if k == comm.KindAllReduce {
				// The gradient norm's all-reduce: one fp32 a step.
				b32, b16 = b32-3*4, b16-3*4
			}
			if 2*b16 != b32 {
				t.Errorf("stage %d, %s: %v moved %d bytes, fp32 %d: want half", stage, dt, k, b16, b32)
			}
			abs, rel := fdiff.Weights(got.Final, base.Final)
			t.Logf("stage %d, communication_data_type %s: weights max |Δ| %.2e, ‖Δ‖/‖w‖ %.2e from the fp32 reduction", stage, dt, abs, rel)
			if abs == 0 || rel > 1e-2 {
				t.Errorf("stage %d, %s: weights ‖Δ‖/‖w‖ %.2e from the fp32 reduction, want nonzero and < 1e-2", stage, dt, rel)
			}
		}
	}
}
