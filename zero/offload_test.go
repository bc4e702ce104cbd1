package zero_test

import (
	"strings"
	"testing"

	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/zero"
	"github.com/dszero/dszero/zero/lrsched"
)

// TestDeepSpeedParityMLPOffload reproduces DeepSpeed 0.14.5's 2-rank
// ZeRO-1/2/3 runs with the optimizer (and at stage 3 the parameters)
// offloaded to the CPU or NVMe:
// with zero_force_ds_cpu_optimizer false they keep torch's AdamW and end
// on stage 2's weights; without it DeepSpeed builds DeepSpeedCPUAdam (its
// own fp32 arithmetic), and dszero does too; with NVMe it swaps the
// sub-group's state through files and ends where DeepSpeedCPUAdam does.
// Same tolerances as TestDeepSpeedParityMLP.
func TestDeepSpeedParityMLPOffload(t *testing.T) {
	d := loadMLP(t)
	for _, tc := range []struct {
		run, zero, top, final string
	}{
		{"z3_offcpu_fp32", `"offload_optimizer": {"device": "cpu"}`, `"zero_force_ds_cpu_optimizer": false,`, "testdata/mlp_z2_fp32_final_fp32.safetensors"},
		{"z3_offcpu_param_fp32", `"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}`, `"zero_force_ds_cpu_optimizer": false,`, "testdata/mlp_z2_fp32_final_fp32.safetensors"},
		{"z3_offcpu_fp32_dscpuadam", `"offload_optimizer": {"device": "cpu"}`, ``, "testdata/mlp_z3_offcpu_fp32_dscpuadam_final_fp32.safetensors"},
		{"z3_offnvme_fp32", `"offload_optimizer": {"device": "nvme", "nvme_path": "/"}`, ``, "testdata/mlp_z3_offcpu_fp32_dscpuadam_final_fp32.safetensors"},
		{"z3_offnvme_param_fp32", `"offload_optimizer": {"device": "nvme", "nvme_path": "/"}, "offload_param": {"device": "nvme", "nvme_path": "/"}, "stage3_param_persistence_threshold": 0`, ``, "testdata/mlp_z3_offcpu_fp32_dscpuadam_final_fp32.safetensors"},
		{"z1_offcpu_fp32", `"offload_optimizer": {"device": "cpu"}`, `"zero_force_ds_cpu_optimizer": false,`, mlpRef + "plain_dsclip_final_fp32.safetensors"},
		{"z2_offcpu_fp32", `"offload_optimizer": {"device": "cpu"}`, `"zero_force_ds_cpu_optimizer": false,`, "testdata/mlp_z2_fp32_final_fp32.safetensors"},
		{"z2_offcpu_fp32_dscpuadam", `"offload_optimizer": {"device": "cpu"}`, ``, "testdata/mlp_z2_fp32_dsfusedadam_final_fp32.safetensors"},
	} {
		t.Run(tc.run, func(t *testing.T) {
			ref, err := ztest.ReadDSResult("testdata/mlp_" + tc.run + "_result.json")
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float32, d.Layout.Numel)
			if err := model.ReadLayout(tc.final, &d.Layout, want); err != nil {
				t.Fatal(err)
			}
			stage := int(tc.run[1] - '0')
			js := harnessJSON(stage, 4, 2, 500000000, false)
			js = strings.Replace(js, `"overlap_comm": false`, `"overlap_comm": false, `+tc.zero, 1)
			js = strings.Replace(js, `"gradient_clipping": 1,`, `"gradient_clipping": 1, `+tc.top, 1)
			if tc.top == "" {
				js = strings.Replace(js, `"torch_adam": true, `, ``, 1)
			}
			plan, err := ztest.Plan(js, 2)
			if err != nil {
				t.Fatal(err)
			}
			wantImpl := "torch.optim.AdamW"
			if tc.top == "" {
				wantImpl = "DeepSpeedCPUAdam"
			}
			if plan.Optimizer.Impl != wantImpl || plan.Zero.OffloadOptimizer.Device == "none" || plan.Zero.Stage != stage {
				t.Fatalf("the config compiled to %s, stage %d, offload %q", plan.Optimizer.Impl, plan.Zero.Stage, plan.Zero.OffloadOptimizer.Device)
			}
			// NVMe swap files go to an in-memory filesystem here.
			got, err := ztest.RunMLPWith(plan, 10, lrsched.DeepSpeed0145, d, nil, func(o *zero.Options) { o.SwapFS = nvme.NewMemFS(0) })
			if err != nil {
				t.Fatal(err)
			}
			checkDeepSpeed(t, ref, got, want)
			snap := got.Accts[0].Snapshot()
			for _, c := range []mem.Category{mem.MasterParams, mem.OptimState} {
				if snap.PeakBytes(mem.Device, c) != 0 || snap.PeakBytes(mem.PinnedHost, c) == 0 {
					t.Errorf("%v: %d bytes on the device, %d on the host: want it offloaded", c, snap.PeakBytes(mem.Device, c), snap.PeakBytes(mem.PinnedHost, c))
				}
			}
		})
	}
}
