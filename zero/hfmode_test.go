package zero_test

import (
	"strings"
	"testing"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/zero/lrsched"
)

// TestHFOffloadRunsDeepSpeedCPUAdam: HF mode, a config with optimizer
// offload and no optimizer block. The Trainer creates its torch AdamW
// (deepspeed_optim_sched → trainer.create_optimizer); Accelerate's
// _prepare_deepspeed, seeing offload_optimizer.device != "none" and
// zero_force_ds_cpu_optimizer true, replaces it with
// DeepSpeedCPUAdam(optimizer.param_groups, lr, weight_decay) before
// deepspeed.initialize, whose _configure_optimizer would otherwise raise
// ZeRORuntimeException. The run must therefore equal, bit for bit, the
// DeepSpeed-mode run of an AdamW block without torch_adam (DeepSpeed's
// own DeepSpeedCPUAdam, checked against DeepSpeed 0.14.5 by
// TestDeepSpeedParityMLPOffload), and differ from the torch AdamW that
// zero_force_ds_cpu_optimizer false keeps.
func TestHFOffloadRunsDeepSpeedCPUAdam(t *testing.T) {
	d := loadMLP(t)
	const off = `"overlap_comm": false, "offload_optimizer": {"device": "cpu"}`
	base := strings.Replace(harnessJSON(2, 4, 2, 500000000, false), `"overlap_comm": false`, off, 1)
	// DeepSpeed mode: DeepSpeedCPUAdam from the config, weight decay 0 (the
	// Trainer's default --weight_decay).
	ds := strings.Replace(base, `"torch_adam": true, `, ``, 1)
	ds = strings.Replace(ds, `"weight_decay": 0.01`, `"weight_decay": 0`, 1)
	// HF mode: the same file without its optimizer block; the Trainer's
	// arguments carry the block's lr, betas and eps.
	i, j := strings.Index(base, `"optimizer"`), strings.Index(base, `"scheduler"`)
	noOpt := base[:i] + base[j:]
	hf := dsconfig.DefaultHFArgs()
	hf.LearningRate, hf.PerDeviceTrainBatchSize, hf.GradientAccumulationSteps = 1e-3, 4, 2
	hf.WarmupSteps, hf.MaxSteps = 3, 10 // the scheduler block's, or the Trainer refuses the mismatch
	run := func(js string, hf *dsconfig.HFArgs, wantImpl string) ztest.Run {
		t.Helper()
		plan, err := dsconfig.Load(js, dsconfig.Options{WorldSize: 2, HF: hf})
		if err != nil {
			t.Fatal(err)
		}
		if plan.Optimizer.Impl != wantImpl {
			t.Fatalf("optimizer %s, want %s", plan.Optimizer.Impl, wantImpl)
		}
		r, err := ztest.RunMLP(plan, 6, lrsched.DeepSpeed0145, d, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	want := run(ds, nil, "DeepSpeedCPUAdam")
	got := run(noOpt, &hf, "DeepSpeedCPUAdam")
	for k := range want.Final {
		if got.Final[k] != want.Final[k] {
			t.Fatalf("parameter %d: HF mode %v, DeepSpeed's DeepSpeedCPUAdam %v", k, got.Final[k], want.Final[k])
		}
	}
	torch := run(strings.Replace(noOpt, `"gradient_clipping": 1,`, `"gradient_clipping": 1, "zero_force_ds_cpu_optimizer": false,`, 1), &hf, "torch.optim.AdamW")
	same := true
	for k := range want.Final {
		same = same && torch.Final[k] == want.Final[k]
	}
	if same {
		t.Error("torch AdamW ends on DeepSpeedCPUAdam's weights: the comparison cannot tell the optimizers apart")
	}
}

// TestHFModeSchedulesLinearly: with no scheduler block the Trainer's own
// get_linear_schedule_with_warmup drives the lr: --warmup_steps 2,
// --max_steps 4 and lr 1e-3 give steps 1..4 the lrs 0, 5e-4, 1e-3, 5e-4
// (λ = 0, 1/2, then (4 − s)/2).
func TestHFModeSchedulesLinearly(t *testing.T) {
	d := loadMLP(t)
	js := harnessJSON(1, 4, 2, 500000000, false)
	js = js[:strings.Index(js, `"scheduler"`)] + js[strings.Index(js, `"zero_optimization"`):]
	hf := dsconfig.DefaultHFArgs()
	hf.PerDeviceTrainBatchSize, hf.GradientAccumulationSteps, hf.WarmupSteps, hf.MaxSteps = 4, 2, 2, 4
	hf.LearningRate, hf.WeightDecay = 1e-3, 0.01 // the optimizer block's
	plan, err := dsconfig.Load(js, dsconfig.Options{WorldSize: 2, HF: &hf})
	if err != nil {
		t.Fatal(err)
	}
	r, err := ztest.RunMLP(plan, 4, lrsched.DeepSpeed0195, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range []float64{0, 5e-4, 1e-3, 5e-4} {
		if got := r.Stats[s].LR; got != want {
			t.Errorf("step %d: lr %v, want %v", s+1, got, want)
		}
	}
}
