package dsconfig

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestOneBitRules: the 1-bit optimizers' params and DeepSpeed's refusals,
// each at its JSON path.
func TestOneBitRules(t *testing.T) {
	cases := []struct {
		name   string
		src    string
		reject bool
		diags  []wantDiag
		want   *OneBit
	}{
		{name: "OnebitAdam in fp32 runs, with its defaults",
			src:  `{` + batchOK + ` "optimizer": {"type": "OnebitAdam", "params": {"lr": 1e-3}}}`,
			want: &OneBit{FreezeStep: 100000, CommBackendName: "nccl"}},
		{name: "freeze_step and the comm backend",
			src:  `{` + batchOK + ` "optimizer": {"type": "OneBitAdam", "params": {"freeze_step": 23, "comm_backend_name": "mpi", "cuda_aware": true}}}`,
			want: &OneBit{FreezeStep: 23, CommBackendName: "mpi", CudaAware: true}},
		{name: "unknown comm backend", reject: true,
			src:   `{` + batchOK + ` "optimizer": {"type": "OneBitAdam", "params": {"comm_backend_name": "gloo"}}}`,
			diags: []wantDiag{{Error, "optimizer.params.comm_backend_name", []string{`"nccl"`}}}},
		{name: "amsgrad", reject: true,
			src:   `{` + batchOK + ` "optimizer": {"type": "OneBitAdam", "params": {"amsgrad": true}}}`,
			diags: []wantDiag{{Error, "optimizer.params.amsgrad", []string{"AMSGrad"}}}},
		{name: "a keyword OnebitAdam does not take", reject: true,
			src:   `{` + batchOK + ` "optimizer": {"type": "OneBitAdam", "params": {"var_freeze_step": 10}}}`,
			diags: []wantDiag{{Error, "optimizer.params.var_freeze_step", []string{"OnebitAdam"}}}},
		{name: "negative freeze_step", reject: true,
			src:   `{` + batchOK + ` "optimizer": {"type": "OneBitAdam", "params": {"freeze_step": -1}}}`,
			diags: []wantDiag{{Error, "optimizer.params.freeze_step", nil}}},
		{name: "ZeRO", reject: true,
			src:   `{` + batchOK + ` "optimizer": {"type": "OneBitAdam"}, "zero_optimization": {"stage": 1}}`,
			diags: []wantDiag{{Error, "optimizer.type", []string{"1bit-Adam is not compatible with ZeRO (stage 1)"}}}},
		{name: "fp16 runs (FP16_Optimizer's flat master)",
			src:  `{` + batchOK + ` "optimizer": {"type": "OneBitAdam", "params": {"freeze_step": 7}}, "fp16": {"enabled": true}}`,
			want: &OneBit{FreezeStep: 7, CommBackendName: "nccl"}},
		{name: "bf16 is not run by dszero",
			src:   `{` + batchOK + ` "optimizer": {"type": "OneBitAdam"}, "bf16": {"enabled": true}}`,
			diags: []wantDiag{{Unsupported, "bf16", []string{"1bit-Adam under bf16"}}}},
		{name: "0/1 Adam with its defaults",
			src:  `{` + batchOK + ` "optimizer": {"type": "ZeroOneAdam", "params": {"var_freeze_step": 10}}}`,
			want: &OneBit{VarFreezeStep: 10, VarUpdateScaler: 16, LocalStepScaler: 32678, LocalStepClipper: 16, CommBackendName: "nccl"}},
		{name: "0/1 Adam with local_step_clipper 0", reject: true,
			src:   `{` + batchOK + ` "optimizer": {"type": "ZeroOneAdam", "params": {"local_step_clipper": 0}}}`,
			diags: []wantDiag{{Error, "optimizer.params.local_step_clipper", nil}}},
		{name: "0/1 Adam does not take freeze_step", reject: true,
			src:   `{` + batchOK + ` "optimizer": {"type": "ZeroOneAdam", "params": {"freeze_step": 10}}}`,
			diags: []wantDiag{{Error, "optimizer.params.freeze_step", []string{"ZeroOneAdam"}}}},
		{name: "1-bit Lamb with its defaults",
			src:  `{` + batchOK + ` "optimizer": {"type": "OneBitLamb", "params": {"freeze_step": 10, "coeff_beta": 0.8}}}`,
			want: &OneBit{FreezeStep: 10, CoeffBeta: 0.8, FactorMax: 4, FactorMin: 0.5, FactorThreshold: 0.1, CommBackendName: "nccl"}},
		{name: "1-bit Lamb with a static loss scale", reject: true,
			src:   `{` + batchOK + ` "optimizer": {"type": "OneBitLamb"}, "fp16": {"enabled": true, "loss_scale": 128}}`,
			diags: []wantDiag{{Error, "fp16.loss_scale", []string{"requires dynamic loss scaling"}}}},
		{name: "1-bit Lamb in fp16 is not run by dszero",
			src:   `{` + batchOK + ` "optimizer": {"type": "OneBitLamb"}, "fp16": {"enabled": true}}`,
			diags: []wantDiag{{Unsupported, "fp16", []string{"FP16_UnfusedOptimizer"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, diags := compileString(t, tc.src, Options{WorldSize: 2})
			if got := diags.HasErrors(); got != tc.reject {
				t.Fatalf("reject=%v, want %v\n%s", got, tc.reject, diagText(diags))
			}
			for _, w := range tc.diags {
				if !hasDiag(diags, w) {
					t.Errorf("missing %v at %q with %q in\n%s", w.sev, w.path, w.frags, diagText(diags))
				}
			}
			if tc.want != nil {
				if d := cmp.Diff(*tc.want, p.Optimizer.OneBit); d != "" {
					t.Error(d)
				}
				if len(p.Unsupported()) != 0 {
					t.Errorf("unsupported: %v", p.Unsupported())
				}
			}
		})
	}
}
