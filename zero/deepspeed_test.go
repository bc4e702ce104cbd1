package zero_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/dszero/dszero/internal/fdiff"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/lrsched"
)

// TestDeepSpeedParityMLP reproduces DeepSpeed 0.14.5's 2-rank fp32 runs of
// the harness's MLP at stages 0, 1 and 2 (micro 4, GAS 2, 10 steps; files
// in testdata, see its README): every rank's micro-step losses and the
// step losses within 1e-5 relative, the gradient norms within 1e-5
// relative, the final weights within 1e-5 absolute. Stage 0 and 1 end
// where plain PyTorch ends (result.json's final_fp32_identical_to); stage
// 2 reduces every micro-step and has its own final weights.
func TestDeepSpeedParityMLP(t *testing.T) {
	d := loadMLP(t)
	finals := map[string]string{
		"plain_dsclip": mlpRef + "plain_dsclip_final_fp32.safetensors",
		"":             "testdata/mlp_z2_fp32_final_fp32.safetensors",
		"z2_fp32":      "testdata/mlp_z2_fp32_final_fp32.safetensors",
	}
	for stage := 0; stage <= 3; stage++ {
		t.Run(fmt.Sprintf("z%d_fp32", stage), func(t *testing.T) {
			ref, err := ztest.ReadDSResult(fmt.Sprintf("testdata/mlp_z%d_fp32_result.json", stage))
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float32, d.Layout.Numel)
			if err := model.ReadLayout(finals[ref.FinalIdenticalTo], &d.Layout, want); err != nil {
				t.Fatal(err)
			}
			plan, err := ztest.Plan(harnessJSON(stage, 4, 2, 500000000, false), 2)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ztest.RunMLP(plan, 10, lrsched.DeepSpeed0145, d, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkDeepSpeed(t, ref, got, want)
		})
	}
}

// checkDeepSpeed compares a 2-rank run with DeepSpeed's record.
func checkDeepSpeed(t *testing.T, ref ztest.DSResult, got ztest.Run, want []float32) {
	t.Helper()
	var micro, loss, norm float64
	for s, rs := range ref.Steps {
		for r := 0; r < 2; r++ {
			for m, w := range rs.MicroLosses[fmt.Sprintf("rank%d", r)] {
				micro = math.Max(micro, relErr(float64(got.Micro[s][r][m]), w))
			}
		}
		loss = math.Max(loss, relErr(got.Losses[s], rs.Loss))
		norm = math.Max(norm, relErr(got.Stats[s].GradNorm, rs.GradNorm))
		if got.Stats[s].LR != rs.LRUsed {
			t.Errorf("step %d: lr %g, DeepSpeed %g", s+1, got.Stats[s].LR, rs.LRUsed)
		}
	}
	wabs, _ := fdiff.Weights(got.Final, want)
	t.Logf("vs DeepSpeed: micro-step losses max rel Δ %.2e, step losses %.2e, grad norms %.2e; final weights max |Δ| %.2e", micro, loss, norm, wabs)
	if micro > 1e-5 || loss > 1e-5 || norm > 1e-5 {
		t.Errorf("losses or gradient norms differ from DeepSpeed by more than 1e-5 relative")
	}
	if wabs > 1e-5 {
		t.Errorf("final weights differ from DeepSpeed's by %.2e", wabs)
	}
}

func relErr(got, want float64) float64 { return math.Abs(got-want) / math.Abs(want) }
