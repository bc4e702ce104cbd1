package dsconfig

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/dszero/dszero/device"
	"github.com/google/go-cmp/cmp"
)

func compileString(t *testing.T, src string, opts Options) (Plan, Diagnostics) {
	t.Helper()
	return Compile("ds.json", []byte(src), opts)
}

// wantDiag says a diagnostic of this severity exists whose path is path
// and whose message (or fix) contains every fragment.
type wantDiag struct {
	sev   Severity
	path  string
	frags []string
}

func hasDiag(ds Diagnostics, w wantDiag) bool {
	for _, d := range ds {
		if d.Severity != w.sev || d.Path != w.path {
			continue
		}
		ok := true
		for _, f := range w.frags {
			if !strings.Contains(d.Msg+"; "+d.Fix, f) {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

const batchOK = `"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,`

func TestRules(t *testing.T) {
	cases := []struct {
		name   string
		src    string
		opts   Options
		reject bool
		diags  []wantDiag
		check  func(t *testing.T, p Plan)
	}{
		{name: "block comment, BOM, CRLF, trailing commas", src: "\uFEFF{\r\n /* a\r\n b */ " + batchOK + "\r\n \"zero_optimization\": {\"stage\": 2,},\r\n \"optimizer\": {\"type\": \"AdamW\"}, // c\r\n}\r\n",
			check: func(t *testing.T, p Plan) {
				if p.Zero.Stage != 2 {
					t.Errorf("stage %d", p.Zero.Stage)
				}
			}},
		{name: "duplicate key names both lines", src: "{\n" + batchOK + "\n\"steps_per_print\": 1,\n\"steps_per_print\": 2}", reject: true,
			diags: []wantDiag{{Error, "", []string{`duplicate key "steps_per_print"`, "line 3"}}}},
		{name: "template is an error with position", src: "{\n" + batchOK + "\n\"zero_optimization\": {\"stage\": ${zero_stage},}}", reject: true,
			diags: []wantDiag{{Error, "", []string{"${zero_stage}", "template"}}}},
		{name: "bare identifier", src: `{` + batchOK + ` "fp16": {"enabled": auto}}`, reject: true},
		{name: "stage3 aliases and bare names are one field", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e8, "max_live_parameters": 1e9, "stage3_param_persistence_threshold": 1e4}}`,
			check: func(t *testing.T, p Plan) {
				want := [3]int64{500000000, 1000000000, 10000}
				if got := [3]int64{p.Zero.PrefetchBucketSize, p.Zero.MaxLiveParameters, p.Zero.ParamPersistenceThreshold}; got != want {
					t.Errorf("got %v want %v", got, want)
				}
				s, _ := settingOf(p, "zero_optimization.prefetch_bucket_size")
				if s.Source != FromAlias || s.Written != "stage3_prefetch_bucket_size" {
					t.Errorf("provenance %+v", s)
				}
			}},
		{name: "cpu_offload migrates", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 2, "cpu_offload": true}}`,
			diags: []wantDiag{{Warning, "zero_optimization.cpu_offload", []string{"deprecated", "offload_optimizer"}}},
			check: func(t *testing.T, p Plan) {
				if p.Zero.OffloadOptimizer.Device != OffloadCPU || !p.Zero.OffloadOptimizer.PinMemory {
					t.Errorf("offload %+v", p.Zero.OffloadOptimizer)
				}
				if s, _ := settingOf(p, "zero_optimization.offload_optimizer.device"); s.Source != FromMigrated {
					t.Errorf("source %v", s.Source)
				}
			}},
		{name: "deprecated key with its replacement", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 2, "cpu_offload": false, "offload_optimizer": {"device": "cpu"}}}`, reject: true,
			diags: []wantDiag{{Error, "zero_optimization.cpu_offload", []string{"together"}}}},
		{name: "cpu_offload_param and the legacy plural", src: `{` + batchOK + ` "zero_optimization": {"stage": 3, "cpu_offload_params": true, "cpu_offload_use_pin_memory": true}}`,
			diags: []wantDiag{{Warning, "zero_optimization.cpu_offload_params", []string{"plural"}}, {Warning, "zero_optimization.cpu_offload_use_pin_memory", []string{"ignored"}}},
			check: func(t *testing.T, p Plan) {
				if p.Zero.OffloadParam.Device != OffloadCPU {
					t.Errorf("offload_param %+v", p.Zero.OffloadParam)
				}
			}},
		{name: "stage3_gather_fp16_weights_on_model_save", src: `{` + batchOK + ` "zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": true}}`,
			check: func(t *testing.T, p Plan) {
				if !p.Zero.Gather16BitWeightsOnModelSave {
					t.Error("not migrated")
				}
			}},
		{name: "bool zero_optimization is stage 1 with allgather_size", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "zero_optimization": true, "allgather_size": 2e8}`,
			diags: []wantDiag{{Warning, "zero_optimization", []string{"deprecated"}}},
			check: func(t *testing.T, p Plan) {
				if p.Zero.Stage != 1 || p.Zero.AllgatherBucketSize != 200000000 {
					t.Errorf("stage %d bucket %d", p.Zero.Stage, p.Zero.AllgatherBucketSize)
				}
			}},
		{name: "int zero_optimization", src: `{` + batchOK + ` "zero_optimization": 1}`, reject: true,
			diags: []wantDiag{{Error, "zero_optimization", []string{"TypeError"}}}},
		{name: "legacy bfloat16 block", src: `{` + batchOK + ` "bfloat16": {"enabled": true}}`,
			check: func(t *testing.T, p Plan) {
				if p.Precision.DType != device.BF16 {
					t.Errorf("dtype %s", p.Precision.DType)
				}
			}},
		{name: "bf16 wins over bfloat16", src: `{` + batchOK + ` "bf16": {"enabled": false}, "bfloat16": {"enabled": true}}`,
			check: func(t *testing.T, p Plan) {
				if p.Precision.DType != device.F32 {
					t.Errorf("dtype %s", p.Precision.DType)
				}
			}},
		{name: "integral floats and int64", src: `{` + batchOK + ` "steps_per_print": 2e16, "zero_optimization": {"sub_group_size": 1e14}}`,
			check: func(t *testing.T, p Plan) {
				if p.StepsPerPrint != 2e16 || p.Zero.SubGroupSize != 1e14 {
					t.Errorf("%d %d", p.StepsPerPrint, p.Zero.SubGroupSize)
				}
			}},
		{name: "fraction for an int field", src: `{` + batchOK + ` "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 15099494.4}}`, reject: true,
			diags: []wantDiag{{Error, "zero_optimization.stage3_prefetch_bucket_size", []string{"integer", "15099494"}}}},
		{name: "beyond int64", src: `{` + batchOK + ` "zero_optimization": {"sub_group_size": 1e19}}`, reject: true},
		{name: "lax bools in pydantic blocks", src: `{` + batchOK + ` "fp16": {"enabled": "true"}, "zero_optimization": {"overlap_comm": 1}}`,
			check: func(t *testing.T, p Plan) {
				if p.Precision.DType != device.F16 || !p.Zero.OverlapComm {
					t.Errorf("%s %v", p.Precision.DType, p.Zero.OverlapComm)
				}
			}},
		{name: "truthy string at the top level", src: `{` + batchOK + ` "prescale_gradients": "false"}`,
			diags: []wantDiag{{Warning, "prescale_gradients", []string{"true"}}},
			check: func(t *testing.T, p Plan) {
				if !p.PrescaleGradients {
					t.Error("DeepSpeed reads a non-empty string as true")
				}
			}},
		{name: "stage as a string", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": "1"}}`,
			check: func(t *testing.T, p Plan) {
				if p.Zero.Stage != 1 {
					t.Errorf("stage %d", p.Zero.Stage)
				}
			}},
		{name: "stage out of range", src: `{` + batchOK + ` "zero_optimization": {"stage": 4}}`, reject: true},
		{name: "offload device is case-sensitive", src: `{` + batchOK + ` "zero_optimization": {"stage": 3, "offload_param": {"device": "None"}}}`, reject: true,
			diags: []wantDiag{{Error, "zero_optimization.offload_param.device", []string{`"none"`}}}},
		{name: "nvme without a path", src: `{` + batchOK + ` "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}`, reject: true},
		{name: "unknown key in a strict block suggests", src: `{` + batchOK + ` "zero_optimization": {"stage": 3, "stage3_param_persitence_threshold": 1e5}}`, reject: true,
			diags: []wantDiag{{Error, "zero_optimization.stage3_param_persitence_threshold", []string{`did you mean "stage3_param_persistence_threshold"?`}}}},
		{name: "bp16 says the run is fp32", src: `{` + batchOK + ` "bp16": {"enabled": true}}`,
			diags: []wantDiag{{Warning, "bp16", []string{"fp32", `"bf16"`}}}},
		{name: "misplaced zero key", src: `{` + batchOK + ` "reduce_bucket_size": 5e8}`,
			diags: []wantDiag{{Warning, "reduce_bucket_size", []string{"zero_optimization"}}}},
		{name: "optimizer names: DeepSpeed names are case-insensitive", src: `{` + batchOK + ` "optimizer": {"type": "OneBitLamb"}}`,
			check: func(t *testing.T, p Plan) {
				if p.Optimizer.Type != "onebitlamb" {
					t.Errorf("type %q", p.Optimizer.Type)
				}
			}},
		{name: "torch names are case-sensitive", src: `{` + batchOK + ` "optimizer": {"type": "sgd"}}`, reject: true,
			diags: []wantDiag{{Error, "optimizer.type", []string{`"SGD"`}}}},
		{name: "unknown optimizer", src: `{` + batchOK + ` "optimizer": {"type": "DeepSpeed_AdamW"}}`, reject: true,
			diags: []wantDiag{{Error, "optimizer.type", []string{`did you mean "AdamW"?`}}}},
		{name: "1-bit with ZeRO", src: `{` + batchOK + ` "optimizer": {"type": "OneBitAdam"}, "zero_optimization": {"stage": 2}}`, reject: true,
			diags: []wantDiag{{Error, "optimizer.type", []string{"1bit-Adam is not compatible with ZeRO"}}}},
		{name: "max_grad_norm in optimizer params", src: `{` + batchOK + ` "optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}}}`, reject: true,
			diags: []wantDiag{{Error, "optimizer.params.max_grad_norm", []string{"gradient_clipping"}}}},
		{name: "SGD rejects Adam kwargs", src: `{` + batchOK + ` "optimizer": {"type": "SGD", "params": {"lr": 0.1, "betas": [0.9, 0.99]}}}`, reject: true,
			diags: []wantDiag{{Error, "optimizer.params.betas", []string{"torch.optim.SGD"}}}},
		{name: "adam means AdamW unless adam_w_mode is false", src: `{` + batchOK + ` "optimizer": {"type": "Adam", "params": {"torch_adam": true, "lr": 2e-4}}}`,
			check: func(t *testing.T, p Plan) {
				want := Optimizer{Type: "adam", Impl: "torch.optim.AdamW", LR: 2e-4, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, WeightDecay: 0.01,
					BiasCorrection: true, AdamWMode: true, TorchAdam: true, Params: map[string]any{"torch_adam": true, "lr": 2e-4}}
				if d := cmp.Diff(want, p.Optimizer); d != "" {
					t.Error(d)
				}
			}},
		{name: "Adam with adam_w_mode false is L2 Adam", src: `{` + batchOK + ` "optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}}`,
			check: func(t *testing.T, p Plan) {
				if p.Optimizer.AdamWMode || p.Optimizer.Impl != "FusedAdam" {
					t.Errorf("%+v", p.Optimizer)
				}
			}},
		{name: "untested ZeRO optimizer", src: `{` + batchOK + ` "optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "zero_optimization": {"stage": 1}}`, reject: true,
			diags: []wantDiag{{Error, "optimizer.type", []string{"zero_allow_untested_optimizer"}}}},
		{name: "stage 2 needs an optimizer", src: `{` + batchOK + ` "zero_optimization": {"stage": 2}}`, reject: true,
			diags: []wantDiag{{Error, "optimizer", []string{"requires an optimizer"}}}},
		{name: "fp16 and bf16 together", src: `{` + batchOK + ` "fp16": {"enabled": true}, "bf16": {"enabled": true}}`, reject: true},
		{name: "communication_data_type", src: `{` + batchOK + ` "communication_data_type": "bfp16"}`, reject: true,
			diags: []wantDiag{{Error, "communication_data_type", []string{`did you mean "bf16"?`}}}},
		{name: "reduce_scatter with prescale at stage 2", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "prescale_gradients": true, "zero_optimization": {"stage": 2}}`, reject: true},
		{name: "odd allgather bucket", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 1, "allgather_bucket_size": 5}}`, reject: true},
		{name: "partial offload below stage 3", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}`, reject: true,
			diags: []wantDiag{{Error, "zero_optimization.offload_optimizer.ratio", []string{"ratio 0.5", "stage 3"}}}},
		{name: "partial offload ratio above 1", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 1.5}}}`, reject: true,
			diags: []wantDiag{{Error, "zero_optimization.offload_optimizer.ratio", []string{"between 0 and 1", "1.5"}}}},
		{name: "partial offload ratio below 0", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": -0.1}}}`, reject: true,
			diags: []wantDiag{{Error, "zero_optimization.offload_optimizer.ratio", []string{"between 0 and 1"}}}},
		{name: "partial offload ratio not a number", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": "half"}}}`, reject: true,
			diags: []wantDiag{{Error, "zero_optimization.offload_optimizer.ratio", nil}}},
		{name: "partial offload at stage 3", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}`,
			check: func(t *testing.T, p Plan) {
				if o := p.Zero.OffloadOptimizer; o.Ratio != 0.5 || o.Device != OffloadCPU || p.Optimizer.Impl != "DeepSpeedCPUAdam" {
					t.Errorf("offload_optimizer %+v, optimizer %s", o, p.Optimizer.Impl)
				}
			}},
		{name: "overlap_comm defaults to stage 3", src: `{` + batchOK + ` "zero_optimization": {"stage": 3}}`,
			check: func(t *testing.T, p Plan) {
				if !p.Zero.OverlapComm {
					t.Error("overlap_comm should be true at stage 3")
				}
			}},
		{name: "fp16 defaults", src: `{` + batchOK + ` "fp16": {"enabled": true}}`,
			check: func(t *testing.T, p Plan) {
				got := [5]int64{p.Precision.InitialScalePower, p.Precision.LossScaleWindow, p.Precision.Hysteresis, p.Precision.MinLossScale, int64(p.Precision.LossScale)}
				if got != [5]int64{16, 1000, 2, 1, 0} || !p.Precision.DynamicLossScale() {
					t.Errorf("%v", got)
				}
			}},
		{name: "min_loss_scale fraction", src: `{` + batchOK + ` "fp16": {"enabled": true, "min_loss_scale": 0.1}}`, reject: true},
		{name: "defaults of 0.19.5", src: `{` + batchOK + `}`,
			check: func(t *testing.T, p Plan) {
				if p.GradientClipping != 1.0 || p.StepsPerPrint != 0 || p.Zero.ReduceBucketSize != 500000000 || !p.Zero.OffloadParam.PinMemory {
					t.Errorf("clip %g steps %d bucket %d", p.GradientClipping, p.StepsPerPrint, p.Zero.ReduceBucketSize)
				}
			}},
		{name: "gradient_clipping absent under 0.14.5 is 0", src: `{` + batchOK + `}`, opts: Options{DeepSpeedVersion: "0.14.5+eb07d41f"},
			check: func(t *testing.T, p Plan) {
				if p.GradientClipping != 0 {
					t.Errorf("clip %g, want DeepSpeed 0.14.5's default 0", p.GradientClipping)
				}
			}},
		{name: "gradient_clipping absent under 0.19.3 is 1", src: `{` + batchOK + `}`, opts: Options{DeepSpeedVersion: "0.19.3"},
			check: func(t *testing.T, p Plan) {
				if p.GradientClipping != 1 {
					t.Errorf("clip %g, want 1.0 (PR #8068)", p.GradientClipping)
				}
			}},
		{name: "gradient_clipping given under 0.14.5 is kept", src: `{` + batchOK + ` "gradient_clipping": 0.5}`, opts: Options{DeepSpeedVersion: "0.14.5"},
			check: func(t *testing.T, p Plan) {
				if p.GradientClipping != 0.5 {
					t.Errorf("clip %g", p.GradientClipping)
				}
			}},
		{name: "LRRangeTest", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "scheduler": {"type": "LRRangeTest", "params": {"lr_range_test_min_lr": 1e-4, "lr_range_test_step_size": 100, "lr_range_test_staircase": true}}}`,
			check: func(t *testing.T, p Plan) {
				s := p.Scheduler
				if s.LRRangeTestMinLR != 1e-4 || s.LRRangeTestStepSize != 100 || s.LRRangeTestStepRate != 1.0 || !s.LRRangeTestStaircase {
					t.Errorf("%+v", s)
				}
			}},
		{name: "WarmupLR integer steps", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 1e3}}}`, reject: true,
			diags: []wantDiag{{Error, "scheduler.params.warmup_num_steps", []string{"isinstance"}}}},
		{name: "WarmupDecayLR needs total_num_steps", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "scheduler": {"type": "WarmupDecayLR", "params": {}}}`, reject: true},
		{name: "scheduler kwargs", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "scheduler": {"type": "WarmupLR", "params": {"warmup_steps": 10}}}`, reject: true,
			diags: []wantDiag{{Error, "scheduler.params.warmup_steps", []string{`did you mean "warmup_num_steps"?`}}}},
		{name: "OneCycle defaults", src: `{` + batchOK + ` "optimizer": {"type": "Adam"}, "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3}}}`,
			check: func(t *testing.T, p Plan) {
				s := p.Scheduler
				if s.CycleFirstStepSize != 2000 || s.CycleSecondStepSize != 2000 || !s.CycleMomentum || s.CycleMinMom != 0.8 || s.CycleMaxMom != 0.9 {
					t.Errorf("%+v", s)
				}
			}},
		{name: "csv_monitor", src: `{` + batchOK + ` "csv_monitor": {"enabled": true, "output_path": "logs/", "job_name": "run1"}}`,
			check: func(t *testing.T, p Plan) {
				if !p.Monitors.CSV || p.Monitors.CSVDir != "logs/" {
					t.Errorf("%+v", p.Monitors)
				}
			}},
		{name: "csv_monitor is strict", src: `{` + batchOK + ` "csv_monitor": {"enabled": true, "path": "logs/"}}`, reject: true,
			diags: []wantDiag{{Error, "csv_monitor.path", []string{"output_path"}}}},
		{name: "elasticity takes the batch", src: `{"train_batch_size": 8, "elasticity": {"enabled": true, "max_train_batch_size": 64, "micro_batch_sizes": [2, 4]}}`, reject: true,
			diags: []wantDiag{{Error, "train_batch_size", []string{"ignore_non_elastic_batch_info"}}}},
		{name: "elasticity ignoring batch info", src: `{"train_batch_size": 8, "elasticity": {"enabled": true, "ignore_non_elastic_batch_info": true}}`,
			diags: []wantDiag{{Unsupported, "elasticity", nil}}},
		{name: "aio thread_count", src: `{` + batchOK + ` "aio": {"thread_count": 4}}`,
			diags: []wantDiag{{Warning, "aio.thread_count", []string{"intra_op_parallelism"}}}},
		{name: "auto in a strict block falls back (DeepSpeed mode)", src: `{` + batchOK + ` "fp16": {"enabled": "auto"}}`,
			diags: []wantDiag{{Warning, "fp16.enabled", []string{"--fp16"}}},
			check: func(t *testing.T, p Plan) {
				if p.Precision.DType != device.F32 {
					t.Errorf("dtype %s", p.Precision.DType)
				}
			}},
		{name: "auto at the top level is an error (DeepSpeed mode)", src: `{"train_micro_batch_size_per_gpu": "auto"}`, reject: true,
			diags: []wantDiag{{Error, "train_micro_batch_size_per_gpu", []string{"--per_device_train_batch_size"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.opts.WorldSize == 0 {
				tc.opts.WorldSize = 1
			}
			p, diags := compileString(t, tc.src, tc.opts)
			if got := diags.HasErrors(); got != tc.reject {
				t.Fatalf("reject=%v, want %v\n%s", got, tc.reject, diagText(diags))
			}
			for _, w := range tc.diags {
				if !hasDiag(diags, w) {
					t.Errorf("missing %v at %q with %q in\n%s", w.sev, w.path, w.frags, diagText(diags))
				}
			}
			if tc.check != nil && !tc.reject {
				tc.check(t, p)
			}
			for _, d := range diags {
				if d.Severity == Error && d.Line == 0 && d.Path == "" {
					t.Errorf("error with neither position nor path: %s", d)
				}
			}
		})
	}
}

func settingOf(p Plan, path string) (Setting, bool) {
	for _, s := range p.Settings() {
		if s.Path == path {
			return s, true
		}
	}
	return Setting{}, false
}

func TestBatchDerivation(t *testing.T) {
	cases := []struct {
		keys  string
		world int
		want  Batch
		err   string
	}{
		{`"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2`, 8, Batch{32, 2, 2}, ""},
		{`"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2`, 8, Batch{32, 2, 2}, ""},
		{`"train_batch_size": 32, "gradient_accumulation_steps": 2`, 8, Batch{32, 2, 2}, ""},
		{`"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2`, 8, Batch{32, 2, 2}, ""},
		{`"train_batch_size": 32`, 8, Batch{32, 4, 1}, ""},
		{`"train_micro_batch_size_per_gpu": 4`, 3, Batch{12, 4, 1}, ""},
		{`"gradient_accumulation_steps": 2`, 8, Batch{}, "either train_batch_size or train_micro_batch_size_per_gpu"},
		{`"train_batch_size": 4`, 8, Batch{}, "Micro batch size per gpu: 0 has to be greater than 0"},
		{`"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1`, 8, Batch{}, "Gradient accumulation steps: 0 has to be greater than 0"},
		{`"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3`, 2, Batch{}, "10 != 3 * 1 * 2"},
		{`"train_batch_size": 2, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1`, 8, Batch{}, "2 != 1 * 1 * 8"},
		{`"train_batch_size": 0, "train_micro_batch_size_per_gpu": 1`, 1, Batch{}, "Train batch size: 0 has to be greater than 0"},
		{`"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "sequence_parallel_size": 2`, 8, Batch{}, "16 != 1 * 1 * 4"},
		{`"train_batch_size": "8"`, 8, Batch{}, "TypeError"},
	}
	for _, tc := range cases {
		p, diags := compileString(t, "{"+tc.keys+"}", Options{WorldSize: tc.world})
		if tc.err == "" {
			if diags.HasErrors() {
				t.Errorf("%s: %s", tc.keys, diagText(diags))
			} else if p.Batch != tc.want {
				t.Errorf("%s at world %d: %+v, want %+v", tc.keys, tc.world, p.Batch, tc.want)
			}
			continue
		}
		found := false
		for _, d := range diags.Filter(Error) {
			if strings.Contains(d.Msg, tc.err) && d.Fix != "" {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: want an error with %q and a fix, got\n%s", tc.keys, tc.err, diagText(diags))
		}
	}
}

func TestHFModeFillsAuto(t *testing.T) {
	src := `{"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
	"gradient_clipping": "auto", "bf16": {"enabled": "auto"},
	"optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
	"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto", "total_num_steps": "auto"}},
	"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}}`
	hf := DefaultHFArgs()
	hf.LearningRate, hf.PerDeviceTrainBatchSize, hf.GradientAccumulationSteps = 3e-4, 4, 2
	hf.BF16, hf.MaxSteps, hf.WarmupSteps, hf.HiddenSize, hf.WeightDecay = true, 100, 10, 768, 0.1
	p, diags := compileString(t, src, Options{WorldSize: 4, HF: &hf})
	if diags.HasErrors() {
		t.Fatal(diagText(diags))
	}
	if p.Batch != (Batch{32, 4, 2}) {
		t.Errorf("batch %+v", p.Batch)
	}
	if p.Precision.DType != device.BF16 || p.GradientClipping != 1.0 {
		t.Errorf("dtype %s clip %g", p.Precision.DType, p.GradientClipping)
	}
	if o := p.Optimizer; o.LR != 3e-4 || o.Betas != [2]float64{0.9, 0.999} || o.Eps != 1e-8 || o.WeightDecay != 0.1 {
		t.Errorf("optimizer %+v", o)
	}
	if s := p.Scheduler; s.WarmupMinLR != 0 || s.WarmupMaxLR != 3e-4 || s.WarmupNumSteps != 10 || s.TotalNumSteps != 100 {
		t.Errorf("scheduler %+v", s)
	}
	z := p.Zero
	if z.ReduceBucketSize != 768*768 || z.PrefetchBucketSize != 530841 || z.ParamPersistenceThreshold != 7680 {
		t.Errorf("zero buckets %d %d %d", z.ReduceBucketSize, z.PrefetchBucketSize, z.ParamPersistenceThreshold)
	}
	for _, path := range []string{"optimizer.params.lr", "zero_optimization.prefetch_bucket_size", "train_batch_size"} {
		if s, _ := settingOf(p, path); s.Source != FromHF {
			t.Errorf("%s: source %v, want auto→hf", path, s.Source)
		}
	}
}

func TestHFModeMismatch(t *testing.T) {
	hf := DefaultHFArgs()
	hf.LearningRate = 1e-4
	_, diags := compileString(t, `{"train_micro_batch_size_per_gpu": 8, "optimizer": {"type": "AdamW", "params": {"lr": 3e-5}}}`, Options{WorldSize: 1, HF: &hf})
	if !hasDiag(diags, wantDiag{Error, "optimizer.params.lr", []string{"ds optimizer.params.lr=3e-5 vs hf learning_rate=0.0001", `"auto"`}}) {
		t.Errorf("want the Trainer's mismatch error:\n%s", diagText(diags))
	}
}

func TestHFModeNeedsHiddenSize(t *testing.T) {
	hf := DefaultHFArgs()
	_, diags := compileString(t, `{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}, "optimizer": {"type": "AdamW"}}`, Options{WorldSize: 1, HF: &hf})
	if !hasDiag(diags, wantDiag{Error, "zero_optimization.reduce_bucket_size", []string{"hidden size"}}) {
		t.Errorf("%s", diagText(diags))
	}
}

func TestHFModeCreatesTrainerAdamW(t *testing.T) {
	hf := DefaultHFArgs()
	p, diags := compileString(t, `{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}`, Options{WorldSize: 2, HF: &hf})
	if diags.HasErrors() {
		t.Fatal(diagText(diags))
	}
	if p.Optimizer.Impl != "torch.optim.AdamW" || p.Optimizer.LR != 5e-5 || !p.ZeroAllowUntestedOptimizer {
		t.Errorf("%+v", p.Optimizer)
	}
	// With optimizer offload, Accelerate swaps the Trainer's AdamW for
	// DeepSpeedCPUAdam over its parameter groups (DeepSpeed would raise
	// ZeRORuntimeException for the torch optimizer); zero_force_ds_cpu_optimizer
	// false keeps the torch AdamW.
	p, diags = compileString(t, `{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}`, Options{WorldSize: 2, HF: &hf})
	if diags.HasErrors() || p.Optimizer.Impl != "DeepSpeedCPUAdam" || p.Optimizer.LR != 5e-5 || !p.Optimizer.AdamWMode {
		t.Errorf("%+v\n%s", p.Optimizer, diagText(diags))
	}
	p, _ = compileString(t, `{"train_micro_batch_size_per_gpu": "auto", "zero_force_ds_cpu_optimizer": false, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}`, Options{WorldSize: 2, HF: &hf})
	if p.Optimizer.Impl != "torch.optim.AdamW" {
		t.Errorf("zero_force_ds_cpu_optimizer false: %+v", p.Optimizer)
	}
}

func TestInputs(t *testing.T) {
	// Longer than a file name may be (255 bytes): still a JSON string.
	js := `{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}, "steps_per_print": 10` + strings.Repeat(" ", 300) + `}`
	for name, in := range map[string]string{"json": js, "base64": base64.URLEncoding.EncodeToString([]byte(js))} {
		p, err := Load(in, Options{WorldSize: 2})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Zero.Stage != 3 || p.Batch.TrainBatchSize != 4 {
			t.Errorf("%s: %+v", name, p.Batch)
		}
	}
	if _, err := Load("no/such/file.json", Options{}); err == nil || !strings.Contains(err.Error(), "ds_config.json") {
		t.Errorf("missing file: %v", err)
	}
	_, err := Load(`{"zero_optimization": {"stage": 7}}`, Options{})
	var ce *ConfigError
	if err == nil || !strings.Contains(err.Error(), "stage") {
		t.Fatalf("want a config error, got %v", err)
	}
	if !asConfigError(err, &ce) || len(ce.Diags.Filter(Error)) < 2 {
		t.Errorf("want every error collected: %v", err)
	}
}

func asConfigError(err error, target **ConfigError) bool {
	ce, ok := err.(*ConfigError)
	if ok {
		*target = ce
	}
	return ok
}

func TestSuggest(t *testing.T) {
	for in, want := range map[string]string{"bp16": "bf16", "stage3_param_persitence_threshold": "stage3_param_persistence_threshold", "warmup": "", "zzz": ""} {
		got := suggest(in, []string{"bf16", "fp16", "amp", "stage3_param_persistence_threshold"})
		if got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}
