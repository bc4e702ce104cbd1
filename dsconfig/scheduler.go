package dsconfig

import (
	"fmt"
	"strings"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// deepspeedSchedulers are lr_schedules.VALID_LR_SCHEDULES.
var deepspeedSchedulers = []string{"LRRangeTest", "OneCycle", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"}

// torchSchedulers are torch.optim.lr_scheduler classes DeepSpeed falls back to.
var torchSchedulers = []string{"LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR", "ExponentialLR",
	"SequentialLR", "CosineAnnealingLR", "ChainedScheduler", "ReduceLROnPlateau", "CyclicLR", "CosineAnnealingWarmRestarts", "OneCycleLR", "PolynomialLR"}

// schedulerKwargs are the constructor arguments of each DeepSpeed scheduler.
var schedulerKwargs = map[string][]string{
	"LRRangeTest": {"lr_range_test_min_lr", "lr_range_test_step_size", "lr_range_test_step_rate", "lr_range_test_staircase", "last_batch_iteration"},
	"OneCycle": {"cycle_min_lr", "cycle_max_lr", "decay_lr_rate", "cycle_first_step_size", "cycle_second_step_size", "cycle_first_stair_count",
		"cycle_second_stair_count", "decay_step_size", "cycle_momentum", "cycle_min_mom", "cycle_max_mom", "decay_mom_rate", "last_batch_iteration"},
	"WarmupLR":       {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "last_batch_iteration"},
	"WarmupDecayLR":  {"total_num_steps", "warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "last_batch_iteration"},
	"WarmupCosineLR": {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type", "last_batch_iteration"},
}

func (c *compiler) readScheduler(top *block) {
	s := &c.plan.Scheduler
	b := top.get("scheduler").Object(scalarBlock)
	if !b.present() {
		return
	}
	tf, name, pb := c.typeAndParams(b, "scheduler", "WarmupLR")
	b.finish()
	if name == "" {
		return
	}
	s.Type = name
	s.Params = map[string]any{}
	if pb.v != nil {
		for _, m := range pb.v.Members {
			s.Params[m.Key] = m.Value.Interface()
		}
	}
	kw, isDS := schedulerKwargs[name]
	if !isDS {
		if contains(torchSchedulers, name) {
			c.s.unsupportedf(tf.v, "scheduler.type", "use one of "+strings.Join(deepspeedSchedulers, ", "),
				"the torch scheduler %s is not implemented by dszero", name)
			c.markAllUsed(pb)
			return
		}
		cands := append(append([]string(nil), deepspeedSchedulers...), torchSchedulers...)
		tf.errorf(didYouMean(name, cands, "use one of "+strings.Join(deepspeedSchedulers, ", ")),
			"%s is neither a DeepSpeed scheduler nor a torch.optim.lr_scheduler class", quote(name))
		return
	}
	switch name {
	case "LRRangeTest":
		s.LRRangeTestMinLR = pb.get("lr_range_test_min_lr").Float(1e-3)
		s.LRRangeTestStepSize = pb.get("lr_range_test_step_size").Int(2000, 1)
		s.LRRangeTestStepRate = pb.get("lr_range_test_step_rate").Float(1.0)
		s.LRRangeTestStaircase = pb.get("lr_range_test_staircase").Bool(false)
	case "OneCycle":
		s.CycleMinLR = c.required(pb, "cycle_min_lr", name)
		s.CycleMaxLR = c.required(pb, "cycle_max_lr", name)
		s.DecayLRRate = pb.get("decay_lr_rate").Float(0)
		s.CycleFirstStepSize = pb.get("cycle_first_step_size").Float(2000)
		if s.CycleFirstStepSize <= 0 {
			c.s.errorf(c.at("scheduler.params.cycle_first_step_size"), "scheduler.params.cycle_first_step_size", "use a positive number of steps",
				"cycle_first_step_size must be positive, got %g", s.CycleFirstStepSize)
		}
		s.CycleSecondStepSize = s.CycleFirstStepSize
		if f := pb.get("cycle_second_step_size"); f.v != nil && f.v.Kind != lenient.Null {
			s.CycleSecondStepSize = f.Float(s.CycleFirstStepSize)
			if s.CycleSecondStepSize < 0 {
				f.errorf("use a non-negative number of steps", "cycle_second_step_size must be non-negative, got %g", s.CycleSecondStepSize)
			}
		} else {
			f.record(nil)
		}
		s.CycleFirstStairCount = pb.get("cycle_first_stair_count").Int(0, 0)
		s.CycleSecondStairCount = s.CycleFirstStairCount
		if f := pb.get("cycle_second_stair_count"); f.v != nil && f.v.Kind != lenient.Null {
			s.CycleSecondStairCount = f.Int(s.CycleFirstStairCount, 0)
		} else {
			f.record(nil)
		}
		s.DecayStepSize = pb.get("decay_step_size").Int(0, 0)
		s.CycleMomentum = pb.get("cycle_momentum").Bool(true)
		s.CycleMinMom = pb.get("cycle_min_mom").Float(0.8)
		s.CycleMaxMom = pb.get("cycle_max_mom").Float(0.9)
		s.DecayMomRate = pb.get("decay_mom_rate").Float(0)
	case "WarmupLR", "WarmupDecayLR", "WarmupCosineLR":
		if name == "WarmupCosineLR" {
			s.WarmupMinRatio = pb.get("warmup_min_ratio").Float(0)
			s.CosMinRatio = pb.get("cos_min_ratio").Float(0.0001)
		} else {
			s.WarmupMinLR = pb.get("warmup_min_lr").Float(0)
			mf := pb.get("warmup_max_lr")
			switch {
			case mf.v != nil && mf.v.Kind != lenient.Null:
				s.WarmupMaxLR, s.WarmupMaxLRSet = mf.Float(0), true
			case name == "WarmupDecayLR":
				s.WarmupMaxLR, s.WarmupMaxLRSet = mf.Float(0.001), true
			default:
				mf.record(nil) // the optimizer's lr
			}
		}
		s.WarmupNumSteps = c.warmupSteps(pb)
		wt := pb.get("warmup_type")
		s.WarmupType = "log"
		if wt.v != nil && wt.v.Kind == lenient.String && (wt.v.Str == "log" || wt.v.Str == "linear") {
			s.WarmupType = wt.v.Str
		} else if wt.v != nil {
			c.s.warnf(wt.v, wt.path, `use "log" or "linear"`, "unknown warmup_type %s: DeepSpeed falls back to log", describe(wt.v))
		}
		wt.record(s.WarmupType)
		if name != "WarmupLR" {
			s.TotalNumSteps = c.requiredInt(pb, "total_num_steps", name)
			c.warmupLongerThanRun(name, s.WarmupNumSteps, s.TotalNumSteps)
		}
	}
	if f := pb.get("last_batch_iteration"); f.v != nil {
		f.Int(-1, -1)
		c.s.warnf(f.v, f.path, "remove it; dszero restores the scheduler position from checkpoints",
			"last_batch_iteration in the config starts the schedule mid-way")
	}
	if pb.v != nil {
		for _, m := range pb.v.Members {
			if pb.used[m.Key] {
				continue
			}
			pb.used[m.Key] = true
			c.s.errorf(m.Value, "scheduler.params."+m.Key, didYouMean(m.Key, kw, "remove it; "+name+" takes "+strings.Join(kw, ", ")),
				"%s does not take the argument %s (DeepSpeed fails with TypeError: unexpected keyword argument)", name, quote(m.Key))
		}
	}
}

// warmupSteps reads warmup_num_steps, which WarmupLR and WarmupCosineLR
// check with isinstance(x, int): 1000 passes, 1e3 and 1000.0 do not.
func (c *compiler) warmupSteps(pb *block) int64 {
	f := pb.get("warmup_num_steps")
	if f.v != nil && f.v.Kind == lenient.Number && !isIntLiteral(f.v.Num) {
		f.errorf("write it as a whole number without a decimal point or exponent",
			"warmup_num_steps must be a positive integer, got %s (DeepSpeed checks isinstance(x, int))", clip(f.v.Num))
		f.record(int64(1000))
		return 1000
	}
	n := f.Int(1000, 1)
	return n
}

// warmupLongerThanRun warns when the warm-up of WarmupDecayLR or
// WarmupCosineLR outlasts the schedule: DeepSpeed only logs "total_num_steps
// T is less than warmup_num_steps W" (both check T < max(2, W)), and the
// learning rate never reaches its peak. WarmupDecayLR's rate then drops to
// warmup_min_lr at step W; WarmupCosineLR's decays from wherever it is.
func (c *compiler) warmupLongerThanRun(name string, warmup, total int64) {
	// Only the values as written (or warm-up's default of 1000): a value
	// that was refused, and replaced by its default, is reported already.
	v, w := c.at("scheduler.params.total_num_steps"), c.at("scheduler.params.warmup_num_steps")
	if n, ok := v.Int64(); !ok || n != total {
		return
	}
	if n, ok := w.Int64(); w != nil && (!ok || n != warmup) {
		return
	}
	if total >= max(2, warmup) {
		return
	}
	peak := "warmup_max_lr"
	if name == "WarmupCosineLR" {
		peak = "the optimizer's lr"
	}
	c.s.warnf(v, "scheduler.params.total_num_steps", fmt.Sprintf("make warmup_num_steps smaller than total_num_steps %d, or raise total_num_steps", total),
		"total_num_steps %d is less than warmup_num_steps %d: a %d-step run ends during the warm-up, so the learning rate never reaches %s (DeepSpeed only logs this)",
		total, max(2, warmup), total, peak)
}

func isIntLiteral(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func (c *compiler) required(pb *block, key, sched string) float64 {
	f := pb.get(key)
	if f.v == nil && f.source != FromAutoDefault {
		c.s.errorf(pb.v, joinPath(pb.path, key), "add "+quote(key), "%s requires %s", sched, key)
	}
	return f.Float(0)
}

func (c *compiler) requiredInt(pb *block, key, sched string) int64 {
	f := pb.get(key)
	if f.v == nil && f.source != FromAutoDefault {
		c.s.errorf(pb.v, joinPath(pb.path, key), "add "+quote(key), "%s requires %s", sched, key)
	}
	return f.Int(0, 0)
}
