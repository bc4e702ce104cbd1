package dsconfig

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// HFArgs are the HF TrainingArguments that transformers'
// HfTrainerDeepSpeedConfig uses to fill "auto", with HF's defaults.
type HFArgs struct {
	LearningRate              float64 // --learning_rate (5e-5)
	PerDeviceTrainBatchSize   int64   // --per_device_train_batch_size (8)
	GradientAccumulationSteps int64   // --gradient_accumulation_steps (1)
	MaxGradNorm               float64 // --max_grad_norm (1.0)
	WarmupSteps               int64   // --warmup_steps (0)
	MaxSteps                  int64   // --max_steps (-1: unknown; dszero has no epoch length to derive it from)
	WeightDecay               float64 // --weight_decay (0)
	AdamBeta1                 float64 // --adam_beta1 (0.9)
	AdamBeta2                 float64 // --adam_beta2 (0.999)
	AdamEpsilon               float64 // --adam_epsilon (1e-8)
	FP16                      bool    // --fp16
	BF16                      bool    // --bf16
	// HiddenSize is the model's hidden size (config.hidden_size), used for
	// the bucket sizes; 0 when unknown.
	HiddenSize int64
}

// DefaultHFArgs returns TrainingArguments' defaults.
func DefaultHFArgs() HFArgs {
	return HFArgs{LearningRate: 5e-5, PerDeviceTrainBatchSize: 8, GradientAccumulationSteps: 1, MaxGradNorm: 1.0,
		MaxSteps: -1, AdamBeta1: 0.9, AdamBeta2: 0.999, AdamEpsilon: 1e-8}
}

// hfFlagFor names the HF flag that fills each "auto" path.
var hfFlagFor = map[string]string{
	"train_micro_batch_size_per_gpu":                              "--per_device_train_batch_size",
	"gradient_accumulation_steps":                                 "--gradient_accumulation_steps",
	"train_batch_size":                                            "--per_device_train_batch_size × --gradient_accumulation_steps × world size",
	"gradient_clipping":                                           "--max_grad_norm",
	"optimizer.params.lr":                                         "--learning_rate",
	"optimizer.params.betas":                                      "--adam_beta1/--adam_beta2",
	"optimizer.params.eps":                                        "--adam_epsilon",
	"optimizer.params.weight_decay":                               "--weight_decay",
	"scheduler.params.warmup_min_lr":                              "(always 0)",
	"scheduler.params.warmup_max_lr":                              "--learning_rate",
	"scheduler.params.warmup_num_steps":                           "--warmup_steps",
	"scheduler.params.total_num_steps":                            "--max_steps",
	"fp16.enabled":                                                "--fp16",
	"bf16.enabled":                                                "--bf16",
	"zero_optimization.reduce_bucket_size":                        "the model's hidden size (h×h)",
	"zero_optimization.stage3_prefetch_bucket_size":               "the model's hidden size (0.9×h×h)",
	"zero_optimization.stage3_param_persistence_threshold":        "the model's hidden size (10×h)",
	"zero_optimization.prefetch_bucket_size":                      "the model's hidden size (0.9×h×h)",
	"zero_optimization.param_persistence_threshold":               "the model's hidden size (10×h)",
	"zero_optimization.stage3_gather_16bit_weights_on_model_save": "(not filled by the Trainer)",
}

// hfFill is one key HfTrainerDeepSpeedConfig fills.
type hfFill struct {
	path      string
	value     any // float64, int64, *big.Int, bool or []float64
	flag      string
	mustMatch bool
}

// fillHF replaces "auto" with values from the HF arguments, and reports
// values that disagree with them the way the Trainer does.
func (c *compiler) fillHF() {
	a := c.opts.HF
	world := int64(c.opts.WorldSize)
	if sp := c.at("sequence_parallel_size"); sp != nil {
		if n, ok := sp.Int64(); ok && n > 1 && world%n == 0 {
			world /= n
		}
	}
	fills := []hfFill{
		{"train_micro_batch_size_per_gpu", a.PerDeviceTrainBatchSize, "per_device_train_batch_size", true},
		{"gradient_accumulation_steps", a.GradientAccumulationSteps, "gradient_accumulation_steps", true},
		{"train_batch_size", mul(big.NewInt(world), big.NewInt(a.PerDeviceTrainBatchSize), big.NewInt(a.GradientAccumulationSteps)), "train_batch_size (world_size × per_device_train_batch_size × gradient_accumulation_steps)", true},
		{"gradient_clipping", a.MaxGradNorm, "max_grad_norm", true},
		{"optimizer.params.lr", a.LearningRate, "learning_rate", true},
		{"optimizer.params.betas", []float64{a.AdamBeta1, a.AdamBeta2}, "adam_beta1+adam_beta2", true},
		{"optimizer.params.eps", a.AdamEpsilon, "adam_epsilon", true},
		{"optimizer.params.weight_decay", a.WeightDecay, "weight_decay", true},
		{"scheduler.params.warmup_min_lr", 0.0, "", false},
		{"scheduler.params.warmup_max_lr", a.LearningRate, "learning_rate", true},
		{"fp16.enabled", a.FP16, "fp16|fp16_full_eval", true},
		{"bf16.enabled", a.BF16, "bf16|bf16_full_eval", true},
	}
	h := a.HiddenSize
	stage3 := false
	if s := c.at("zero_optimization.stage"); s != nil {
		n, _ := s.Int64()
		stage3 = n == 3
	}
	hiddenKeys := []string{"zero_optimization.reduce_bucket_size"}
	if stage3 {
		hiddenKeys = append(hiddenKeys, "zero_optimization.stage3_prefetch_bucket_size", "zero_optimization.stage3_param_persistence_threshold")
	}
	for _, k := range hiddenKeys {
		v := c.at(k)
		if v == nil || !isAuto(v) {
			continue
		}
		if h <= 0 {
			c.s.errorf(v, k, "pass --hidden_size N (or --model) so dszero can fill it like the Trainer, or write a number",
				"\"auto\" needs the model's hidden size: the model's config has neither hidden_size nor hidden_sizes")
			continue
		}
		// Python's integers: exact, so a huge hidden size cannot wrap
		// around to a negative bucket.
		hb := big.NewInt(h)
		var x *big.Int
		switch k {
		case "zero_optimization.reduce_bucket_size":
			x = mul(hb, hb)
		case "zero_optimization.stage3_prefetch_bucket_size":
			x, _ = big.NewFloat(0.9 * float64(h) * float64(h)).Int(nil) // int(0.9 * h * h), in floats
		default:
			x = mul(big.NewInt(10), hb)
		}
		fills = append(fills, hfFill{k, x, "", false})
	}
	if v := c.at("scheduler.params.total_num_steps"); v != nil {
		if a.MaxSteps > 0 {
			fills = append(fills, hfFill{"scheduler.params.total_num_steps", a.MaxSteps, "max_steps", true})
		} else if isAuto(v) {
			c.s.errorf(v, "scheduler.params.total_num_steps", "pass --max_steps N",
				"\"auto\" is filled from the number of training steps, and dszero needs --max_steps to know it")
		}
	}
	if v := c.at("scheduler.params.warmup_num_steps"); v != nil {
		fills = append(fills, hfFill{"scheduler.params.warmup_num_steps", a.WarmupSteps, "warmup_steps", true})
	}
	for _, f := range fills {
		v := c.at(f.path)
		if v == nil {
			continue
		}
		if isAuto(v) {
			setValue(v, f.value)
			c.hfFilled[f.path] = true
			continue
		}
		if !f.mustMatch || v.Kind == lenient.Null {
			continue
		}
		if !hfEqual(v, f.value) {
			c.s.errorf(v, f.path, hfMismatchFix(f.flag, v),
				"DeepSpeed config value mismatches TrainingArguments: ds %s=%s vs hf %s=%s", f.path, describe(v), f.flag, hfString(f.value))
		}
	}
}

// hfMismatchFix says how to make a config value and the HF arguments agree.
func hfMismatchFix(flag string, v *lenient.Value) string {
	fix := `set it to "auto" (the easiest)`
	switch {
	case flag == "adam_beta1+adam_beta2" && v.Kind == lenient.Array && len(v.Elems) == 2:
		fix += fmt.Sprintf(", or pass --adam_beta1 %s --adam_beta2 %s", clip(v.Elems[0].Num), clip(v.Elems[1].Num))
	case strings.HasPrefix(flag, "fp16") || strings.HasPrefix(flag, "bf16"):
		fix += ", or pass --" + strings.SplitN(flag, "|", 2)[0] + " to match"
	case !strings.ContainsAny(flag, " |+") && v.Kind == lenient.Number:
		fix += fmt.Sprintf(", or pass --%s %s", flag, clip(v.Num))
	}
	return fix
}

func isAuto(v *lenient.Value) bool { return v.Kind == lenient.String && v.Str == "auto" }

// setValue overwrites a parsed value in place with a filled one.
func setValue(v *lenient.Value, x any) {
	switch t := x.(type) {
	case int64:
		v.Kind, v.Num = lenient.Number, strconv.FormatInt(t, 10)
	case *big.Int:
		v.Kind, v.Num = lenient.Number, t.String()
	case float64:
		// A Python float, as HF's TrainingArguments hold them: "0.0", not
		// the int literal "0" (Optimizer.IntParams reads the literal).
		v.Kind, v.Num = lenient.Number, strconv.FormatFloat(t, 'g', -1, 64)
		if !strings.ContainsAny(v.Num, ".eEnN") {
			v.Num += ".0"
		}
	case bool:
		v.Kind, v.Bool = lenient.Bool, t
	case []float64:
		v.Kind = lenient.Array
		v.Elems = nil
		for _, e := range t {
			v.Elems = append(v.Elems, &lenient.Value{Kind: lenient.Number, Num: strconv.FormatFloat(e, 'g', -1, 64), Pos: v.Pos})
		}
	}
	v.Str = ""
}

func hfEqual(v *lenient.Value, x any) bool {
	switch t := x.(type) {
	case int64:
		return hfEqual(v, big.NewInt(t))
	case *big.Int:
		n, ok := v.BigInt()
		return ok && n.Cmp(t) == 0
	case float64:
		f, ok := v.Float64()
		return v.Kind == lenient.Number && ok && f == t
	case bool:
		if v.Kind == lenient.Bool {
			return v.Bool == t
		}
		if v.Kind == lenient.Number {
			f, _ := v.Float64()
			return (f != 0) == t
		}
		return false
	case []float64:
		if v.Kind != lenient.Array || len(v.Elems) != len(t) {
			return false
		}
		for i, e := range v.Elems {
			f, ok := e.Float64()
			if !ok || f != t[i] {
				return false
			}
		}
		return true
	}
	return false
}

func hfString(x any) string {
	switch t := x.(type) {
	case []float64:
		parts := make([]string, len(t))
		for i, e := range t {
			parts[i] = strconv.FormatFloat(e, 'g', -1, 64)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case float64:
		return strconv.FormatFloat(t, 'g', -1, 64)
	}
	return fmt.Sprint(x)
}

// hfDefaultOptimizer is what the Trainer builds when the config has no
// optimizer block: torch.optim.AdamW from the training arguments, with
// zero_allow_untested_optimizer set.
func (c *compiler) hfDefaultOptimizer() {
	a := c.opts.HF
	o := &c.plan.Optimizer
	*o = Optimizer{Type: "adamw", Impl: "torch.optim.AdamW", LR: a.LearningRate, Betas: [2]float64{a.AdamBeta1, a.AdamBeta2},
		Eps: a.AdamEpsilon, WeightDecay: a.WeightDecay, BiasCorrection: true, AdamWMode: true, TorchAdam: true}
	c.plan.ZeroAllowUntestedOptimizer = true
	for path, val := range map[string]any{"optimizer.type": "AdamW", "optimizer.params.lr": o.LR, "optimizer.params.betas": o.Betas[:],
		"optimizer.params.eps": o.Eps, "optimizer.params.weight_decay": o.WeightDecay} {
		c.rec.set(Setting{Path: path, Value: val, Source: FromHF, Note: "the Trainer's own AdamW (no optimizer block)"})
	}
	if a.WeightDecay != 0 {
		// Trainer.create_optimizer builds two groups: weight_decay for the
		// decay parameters, 0.0 for biases and LayerNorm weights
		// (get_decay_parameter_names); dszero's optimizer has one.
		c.s.unsupportedf(nil, "optimizer.params.weight_decay",
			`pass --weight_decay 0, or add an "optimizer" block with the weight_decay (DeepSpeed's optimizer then decays every parameter, as the Trainer hands it one group)`,
			"--weight_decay %g with no optimizer block: the Trainer's AdamW decays all parameters but the biases and LayerNorm weights (two param groups); dszero runs one group and does not split them", a.WeightDecay)
	}
}

// SchedulerHFLinear is Scheduler.Type for the Trainer's own schedule:
// transformers' get_linear_schedule_with_warmup (lr_scheduler_type
// "linear", the default), which HF mode runs when the config has no
// scheduler block. WarmupNumSteps and TotalNumSteps hold --warmup_steps and
// --max_steps.
const SchedulerHFLinear = "get_linear_schedule_with_warmup"

// hfDefaultScheduler is what the Trainer schedules when the config has no
// scheduler block (deepspeed_optim_sched): trainer.create_scheduler on its
// own AdamW, which the Trainer steps after every optimizer step DeepSpeed
// did not skip, or — with an optimizer block — the same schedule as a
// callable that DeepSpeed's engine builds on its optimizer and steps after
// every applied step. Either way the lr follows the linear schedule.
func (c *compiler) hfDefaultScheduler() {
	a := c.opts.HF
	if a.MaxSteps <= 0 {
		c.s.warnf(nil, "scheduler", "pass --max_steps N (the Trainer derives it from --num_train_epochs and the dataset length, which dszero does not know)",
			"no scheduler block: HF's Trainer would run its linear schedule (warm-up %d steps, then decay to 0 at the last step), but without --max_steps dszero does not know the last step and keeps the lr constant", a.WarmupSteps)
		return
	}
	s := &c.plan.Scheduler
	*s = Scheduler{Type: SchedulerHFLinear, WarmupNumSteps: a.WarmupSteps, TotalNumSteps: a.MaxSteps}
	note := "the Trainer's own schedule (no scheduler block)"
	c.rec.set(Setting{Path: "scheduler.type", Value: "linear", Source: FromHF, Note: note})
	c.rec.set(Setting{Path: "scheduler.params.warmup_num_steps", Value: a.WarmupSteps, Source: FromHF, Note: note})
	c.rec.set(Setting{Path: "scheduler.params.total_num_steps", Value: a.MaxSteps, Source: FromHF, Note: note})
	c.s.infof(nil, "scheduler", "no scheduler block: HF's Trainer schedules the lr linearly (get_linear_schedule_with_warmup: warm-up from 0 over %d steps, then decay to 0 at step %d)", a.WarmupSteps, a.MaxSteps)
}
