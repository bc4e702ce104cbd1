package zero_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero"
	"github.com/dszero/dszero/zero/lrsched"
)

// TestCheckPlan: what the stages do not run and would change the numbers
// is refused by name; what they run differently without changing them is a
// warning that names the setting.
func TestCheckPlan(t *testing.T) {
	const opt = `"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"}`
	for _, tc := range []struct {
		js    string
		world int
		err   string // refused, naming this
		warn  string // accepted with a warning naming this
	}{
		{`{` + opt + `, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/x"}}}`, 1, "", ""},
		{`{` + opt + `, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}}}`, 2, "", ""},
		{`{` + opt + `, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}}`, 1, "", ""},
		{`{` + opt + `, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}}`, 1, "offload_optimizer", ""},
		{`{` + opt + `, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}`, 1, "", ""},
		{`{` + opt + `, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0}}}`, 2, "", ""},
		{`{` + opt + `, "scheduler": {"type": "WarmupLR"}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}`, 1, "", "offload_optimizer.ratio 0.5"},
		{`{` + opt + `, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/x", "ratio": 0.5}}}`, 1, "offload_optimizer.ratio 0.5 with device \"nvme\"", ""},
		{`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"torch_adam": true}}, "zero_force_ds_cpu_optimizer": false, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}`, 1, "Hybrid Optimizer Only Supports DeepSpeedCPUAdam", ""},
		{`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "zero_allow_untested_optimizer": true, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.25}}}`, 1, "offload_optimizer.ratio 0.25 with optimizer torch.optim.SGD", ""},
		{`{` + opt + `, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "none", "ratio": 0.5}}}`, 1, "", ""},
		{`{` + opt + `, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2}}`, 4, "", ""},
		{`{` + opt + `, "zero_optimization": {"stage": 3, "mics_shard_size": 2, "mics_hierarchical_params_gather": true}}`, 4, "", "mics_hierarchical_params_gather"},
		{`{` + opt + `, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2, "mics_shard_size": 2}}`, 4, "zero_hpz_partition_size", ""},
		{`{` + opt + `, "zero_optimization": {"stage": 2, "round_robin_gradients": true}}`, 2, "", ""},
		{`{` + opt + `, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}}`, 1, "", ""},
		{`{` + opt + `, "communication_data_type": "bf16"}`, 2, "", ""},
		{`{` + opt + `, "communication_data_type": "fp16", "zero_optimization": {"stage": 2}}`, 2, "", ""},
		{`{` + opt + `, "communication_data_type": "bf16", "zero_optimization": {"stage": 3}}`, 2, "", ""},
		{`{` + opt + `, "gradient_allreduce_op": "sum"}`, 2, "gradient_allreduce_op", ""},
		{`{` + opt + `, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2}}`, 2, "", ""},
		{`{` + opt + `, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3}}`, 2, "", ""},
		{`{` + opt + `, "zero_optimization": {"stage": 1, "overlap_comm": true}}`, 2, "", "overlap_comm"},
		{`{` + opt + `, "zero_optimization": {"stage": 2, "contiguous_gradients": false}}`, 2, "", "contiguous_gradients"},
		{`{` + opt + `, "gradient_predivide_factor": 2.0, "zero_optimization": {"stage": 1}}`, 2, "", "gradient_predivide_factor"},
		{`{` + opt + `, "zero_optimization": {"stage": 2, "overlap_comm": true}}`, 2, "", ""},
		{`{` + opt + `, "gradient_allreduce_op": "sum"}`, 1, "", ""},
		// ZeRO++ qwZ/qgZ: in every dtype (off fp16 on the values, where
		// DeepSpeed's kernels read the wrong bits: dsconfig warns); LoCo not run.
		{`{` + opt + `, "fp16": {"enabled": true}, "zero_optimization": {"stage": 3, "zero_quantized_weights": true, "zero_quantized_gradients": true}}`, 2, "", ""},
		{`{` + opt + `, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "zero_quantized_weights": true}}`, 2, "", ""},
		{`{` + opt + `, "zero_optimization": {"stage": 3, "zero_quantized_gradients": true}}`, 2, "", ""},
		{`{` + opt + `, "fp16": {"enabled": true}, "communication_data_type": "fp32", "zero_optimization": {"stage": 3, "zero_quantized_gradients": true}}`, 2, "communication_data_type", ""},
		{`{` + opt + `, "fp16": {"enabled": true}, "zero_optimization": {"stage": 3, "zero_quantized_gradients": true, "zeropp_loco_param": {"err_beta": 0.8, "reset_T": 1024}}}`, 2, "zeropp_loco_param", ""},
		{`{` + opt + `, "zero_optimization": {"stage": 2, "zero_quantized_weights": true}}`, 2, "", ""},
	} {
		plan, err := ztest.Plan(tc.js, tc.world)
		if err != nil {
			t.Fatalf("%s: %v", tc.js, err)
		}
		warns, err := zero.CheckPlan(plan)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s (world %d): %v, want an error naming %q", tc.js, tc.world, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s (world %d): refused: %v", tc.js, tc.world, err)
		case tc.warn == "" && len(warns) > 0 && tc.err == "":
			t.Errorf("%s (world %d): unexpected warnings %q", tc.js, tc.world, warns)
		case tc.warn != "" && !strings.Contains(strings.Join(warns, "\n"), tc.warn):
			t.Errorf("%s (world %d): warnings %q, want one naming %q", tc.js, tc.world, warns, tc.warn)
		}
	}
}

// TestWorldSizeMismatch: a plan's batch arithmetic must be for the
// communicator's world.
func TestWorldSizeMismatch(t *testing.T) {
	d := loadMLP(t)
	plan, err := ztest.Plan(harnessJSON(1, 2, 2, 1000, false), 1)
	if err != nil {
		t.Fatal(err)
	}
	err = inproc.New(2, inproc.Options{}).Run(func(c comm.Comm) error {
		_, err := zero.NewEngine(plan, zero.Options{Acct: mem.NewAccountant(c.Rank()), Layout: &d.Layout, Init: d.Init, Comm: c})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "WorldSize 2") {
		t.Errorf("got %v, want a world-size mismatch", err)
	}
}

// TestFP16OverflowAgreement: at stages 1 and 2 each rank checks only its
// own gradient partition for Inf/NaN, so the ranks must agree. An Inf put
// into rank 0's last gradient (which the last rank owns) at step 2 makes
// rank 0 skip that step too, at every stage and world size.
func TestFP16OverflowAgreement(t *testing.T) {
	d := loadMLP(t)
	for stage := 0; stage <= 3; stage++ {
		for _, world := range []int{2, 3} {
			t.Run(fmt.Sprintf("stage%d/world%d", stage, world), func(t *testing.T) {
				js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
				  "fp16": {"enabled": true, "initial_scale_power": 8},
				  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3}},
				  "zero_optimization": {"stage": %d, "reduce_bucket_size": 1000}}`, stage)
				plan, err := ztest.Plan(js, world)
				if err != nil {
					t.Fatal(err)
				}
				last := len(d.Layout.Units) - 1
				run, err := ztest.RunMLP(plan, 4, lrsched.DeepSpeed0195, d, func(rank, step, micro, unit int, g []float32) {
					if rank == 0 && step == 1 && micro == 1 && unit == last {
						g[len(g)-1] = float32(math.Inf(1))
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				for i, st := range run.Stats {
					if st.Skipped != (i == 1) || st.Skipped && st.GradNorm != -1 {
						t.Errorf("step %d: skipped %v, grad norm %g", st.Step, st.Skipped, st.GradNorm)
					}
				}
				for i, w := range run.Final {
					if math.IsNaN(float64(w)) || math.IsInf(float64(w), 0) {
						t.Fatalf("weight %d is %v after a skipped step", i, w)
					}
				}
			})
		}
	}
}

// TestStage2NeedsHooks: stage 2 reduces gradients in the unit hooks; a
// model that does not call them is an error at the step, not a silent
// step on zero gradients.
func TestStage2NeedsHooks(t *testing.T) {
	d := loadMLP(t)
	plan, err := ztest.Plan(harnessJSON(2, 2, 2, 1000, false), 1)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := zero.NewEngine(plan, zero.Options{Acct: mem.NewAccountant(0), Layout: &d.Layout, Init: d.Init})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if _, err := eng.Step(); err == nil || !strings.Contains(err.Error(), "hooks") {
		t.Errorf("step without backward: %v", err)
	}
}
