package zero_test

import (
	"testing"

	"github.com/dszero/dszero/conformance"
)

// TestOneBitDeepSpeedCases runs the cases of testdata/deepspeed_onebit —
// real DeepSpeed 0.14.5 runs of its 1-bit optimizers, made by
// conformance/reference/gen_case.py (DeepSpeed's engine, its OnebitAdam /
// ZeroOneAdam / OnebitLamb classes, FP16_Optimizer in fp16; only NcclBackend's
// compressed_allreduce is a port, onebit_backend.py, because cupy needs
// CUDA) — through the conformance runner, and holds the losses, every
// rank's micro-step losses, the lr and the final weights to the runner's
// tolerances (fp32 1e-5, fp16 1e-3).
//
// Not asserted, and logged: the checkpoint layout (OnebitAdam's,
// ZeroOneAdam's and OnebitLamb's match DeepSpeed's) and the runner's
// resume check (a resumed 1-bit optimizer starts with zero errors, and
// in fp32 with an initialization step, as DeepSpeed's load_state_dict
// makes it, so it does not continue the uninterrupted run bit for bit; these cases do not record DeepSpeed's
// resumed run, which conformance/testdata/deepspeed-0.14.5-cpu-onebit's
// do).
func TestOneBitDeepSpeedCases(t *testing.T) {
	cases, err := conformance.Find("testdata/deepspeed_onebit")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			rep := conformance.Run(c)
			t.Logf("%s (%s): loss max rel %.2e, micro %.2e, weights max |Δ| %.2e; checkpoint: %s; resume: %s",
				c.Name, rep.DType, rep.Loss.MaxRel, rep.Micro.MaxRel, rep.Weights.MaxAbs, rep.Checkpoint, rep.Resume)
			for _, m := range []struct {
				name string
				m    conformance.Metric
			}{{"loss", rep.Loss}, {"micro-step losses", rep.Micro}, {"lr", rep.LR}, {"final weights", rep.Weights}} {
				if m.m.N == 0 || !m.m.OK() {
					t.Errorf("%s: %+v (%s)", m.name, m.m, rep.Reason)
				}
			}
		})
	}
}
