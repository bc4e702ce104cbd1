package checkpoint_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/dszero/dszero/internal/fdiff"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/lrsched"
)

// TestResumeDeepSpeedCheckpoint loads the checkpoints real DeepSpeed
// 0.14.5 wrote at step 5 of the harness's 2-rank MLP runs (stages 0–3,
// testdata/ds_mlp_*: no manifest, DeepSpeed's own loss scaler and
// scheduler state) and trains steps 6–10: the losses are DeepSpeed's
// (result.json, within 1e-5 relative) and the final weights its final
// weights (within 1e-5) — DeepSpeed's own resumed run is identical to its
// uninterrupted one (resume_from_step5).
func TestResumeDeepSpeedCheckpoint(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	finals := map[int]string{0: mlpRef + "plain_dsclip_final_fp32.safetensors", 1: mlpRef + "plain_dsclip_final_fp32.safetensors",
		2: "../zero/testdata/mlp_z2_fp32_final_fp32.safetensors", 3: "../zero/testdata/mlp_z2_fp32_final_fp32.safetensors"}
	for stage := 0; stage <= 3; stage++ {
		t.Run(fmt.Sprintf("z%d_fp32", stage), func(t *testing.T) {
			ref, err := ztest.ReadDSResult(fmt.Sprintf("../zero/testdata/mlp_z%d_fp32_result.json", stage))
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float32, d.Layout.Numel)
			if err := model.ReadLayout(finals[stage], &d.Layout, want); err != nil {
				t.Fatal(err)
			}
			plan, err := ztest.Plan(fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 10, "warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3, "warmup_num_steps": 3, "warmup_type": "linear"}},
  "zero_optimization": {"stage": %d}}`, stage), 2)
			if err != nil {
				t.Fatal(err)
			}
			got := runMLPVersion(t, lrsched.DeepSpeed0145, plan, d, 5, 10, fmt.Sprintf("testdata/ds_mlp_z%d_fp32", stage), true, false)
			worst := 0.0
			for i, l := range got.losses {
				worst = math.Max(worst, math.Abs(l-ref.Steps[5+i].Loss)/ref.Steps[5+i].Loss)
			}
			wabs, _ := fdiff.Weights(got.final, want)
			t.Logf("steps 6-10 after DeepSpeed's step-5 checkpoint: losses max rel Δ %.2e, final weights max |Δ| %.2e", worst, wabs)
			if worst > 1e-5 || wabs > 1e-5 {
				t.Errorf("resumed from DeepSpeed's checkpoint: losses %.2e relative, weights %.2e from DeepSpeed's", worst, wabs)
			}
		})
	}
}
