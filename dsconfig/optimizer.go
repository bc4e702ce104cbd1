package dsconfig

import (
	"fmt"
	"sort"
	"strings"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// deepspeedOptimizers are the names DeepSpeed builds itself; a type is
// lower-cased when it matches one (so "OneBitAdam" and "OnebitAdam" agree).
var deepspeedOptimizers = []string{"adam", "adamw", "lamb", "onebitadam", "zerooneadam", "onebitlamb", "adagrad", "lion", "muadam", "muadamw", "musgd", "muon"}

// torchOptimizers maps the torch.optim classes DeepSpeed falls back to
// (looked up case-sensitively) to the keyword arguments their constructors
// take (torch 2.x). A nil list means "not checked".
var torchOptimizers = map[string][]string{
	"SGD":        {"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize", "foreach", "differentiable", "fused"},
	"Adam":       adamTorchKwargs,
	"AdamW":      adamTorchKwargs,
	"Adagrad":    {"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps", "foreach", "maximize", "differentiable", "fused"},
	"RMSprop":    {"lr", "alpha", "eps", "weight_decay", "momentum", "centered", "capturable", "foreach", "maximize", "differentiable"},
	"Adadelta":   {"lr", "rho", "eps", "weight_decay", "foreach", "capturable", "maximize", "differentiable"},
	"Adamax":     {"lr", "betas", "eps", "weight_decay", "foreach", "maximize", "differentiable", "capturable"},
	"NAdam":      {"lr", "betas", "eps", "weight_decay", "momentum_decay", "decoupled_weight_decay", "foreach", "maximize", "capturable", "differentiable"},
	"RAdam":      {"lr", "betas", "eps", "weight_decay", "decoupled_weight_decay", "foreach", "maximize", "capturable", "differentiable"},
	"ASGD":       {"lr", "lambd", "alpha", "t0", "weight_decay", "foreach", "maximize", "differentiable", "capturable"},
	"Rprop":      {"lr", "etas", "step_sizes", "capturable", "foreach", "maximize", "differentiable"},
	"SparseAdam": {"lr", "betas", "eps", "maximize"},
	"LBFGS":      {"lr", "max_iter", "max_eval", "tolerance_grad", "tolerance_change", "history_size", "line_search_fn"},
	"Adafactor":  nil,
}

var adamTorchKwargs = []string{"lr", "betas", "eps", "weight_decay", "amsgrad", "foreach", "maximize", "capturable", "differentiable", "fused"}

// Keyword arguments of DeepSpeed's own optimizer classes (besides params).
var (
	fusedAdamKwargs = []string{"lr", "bias_correction", "betas", "eps", "weight_decay", "amsgrad", "set_grad_none"}
	cpuAdamKwargs   = []string{"lr", "bias_correction", "betas", "eps", "weight_decay", "amsgrad", "fp32_optimizer_states"}
	fusedLambKwargs = []string{"lr", "bias_correction", "betas", "eps", "eps_inside_sqrt", "weight_decay", "max_grad_norm", "max_coeff", "min_coeff", "amsgrad"}
	cpuAdagradKw    = []string{"lr", "eps", "weight_decay", "amsgrad", "fp32_optimizer_states"}
	lionKwargs      = []string{"lr", "betas", "weight_decay", "set_grad_none"}
)

// intDefaults are the keyword arguments whose default in the class's
// signature is the Python int 0 (torch 1.13.1's torch.optim, DeepSpeed
// 0.14.5's ops), so one the config does not write is an int in
// param_groups. FusedAdam, FusedLamb, FusedLion, torch.optim.AdamW and the
// 1-bit optimizers default to floats (weight_decay=0., 1e-2).
var intDefaults = map[string][]string{
	"torch.optim.Adam":     {"weight_decay"},
	"torch.optim.SGD":      {"momentum", "dampening", "weight_decay"},
	"torch.optim.Adagrad":  {"lr_decay", "weight_decay", "initial_accumulator_value"},
	"torch.optim.RMSprop":  {"weight_decay", "momentum"},
	"torch.optim.Adadelta": {"weight_decay"},
	"torch.optim.Adamax":   {"weight_decay"},
	"torch.optim.NAdam":    {"weight_decay"},
	"torch.optim.RAdam":    {"weight_decay"},
	"torch.optim.ASGD":     {"weight_decay"},
	"DeepSpeedCPUAdam":     {"weight_decay"},
	"DeepSpeedCPUAdagrad":  {"weight_decay"},
	"DeepSpeedCPULion":     {"weight_decay"},
}

// intParams lists the params impl holds as Python ints: the numbers
// params writes as integer literals, and impl's int defaults it does not
// write (Optimizer.IntParams).
func intParams(impl string, params *lenient.Value) map[string]bool {
	out := map[string]bool{}
	var members []lenient.Member
	if params != nil && params.Kind == lenient.Object {
		members = params.Members
	}
	for _, k := range intDefaults[impl] {
		out[k] = true
	}
	for _, m := range members {
		if v := m.Value; v.Kind == lenient.Number && !strings.ContainsAny(v.Num, ".eEnN") {
			out[m.Key] = true
		} else {
			delete(out, m.Key)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// zeroSupported are the optimizers DeepSpeed's ZeRO accepts without
// zero_allow_untested_optimizer (zero/utils.py is_zero_supported_optimizer).
var zeroSupported = map[string]bool{
	"torch.optim.Adam": true, "torch.optim.AdamW": true, "torch.optim.Adagrad": true, "FusedAdam": true,
	"DeepSpeedCPUAdam": true, "DeepSpeedCPUAdagrad": true, "DeepSpeedCPULion": true, "FusedLion": true,
}

// dszeroRuns are the implementations dszero's optimizer package runs.
var dszeroRuns = map[string]bool{
	"torch.optim.Adam": true, "torch.optim.AdamW": true, "FusedAdam": true, "DeepSpeedCPUAdam": true,
	"torch.optim.SGD": true, "FusedLamb": true, "OnebitAdam": true, "ZeroOneAdam": true, "OnebitLamb": true,
}

func (c *compiler) readOptimizer(top *block) {
	o := &c.plan.Optimizer
	b := top.get("optimizer").Object(scalarBlock)
	if !b.present() {
		return
	}
	tf, name, pb := c.typeAndParams(b, "optimizer", "AdamW")
	o.LegacyFusion = b.get("legacy_fusion").Bool(false)
	b.finish()
	if name == "" {
		return
	}
	if contains(deepspeedOptimizers, strings.ToLower(name)) {
		name = strings.ToLower(name)
	} else if _, ok := torchOptimizers[name]; !ok {
		cands := append([]string{"Adam", "AdamW", "Lamb", "OneBitAdam", "ZeroOneAdam", "OneBitLamb", "Lion", "MuAdam", "MuAdamW", "MuSGD", "Muon"},
			sortedKeys(torchOptimizers)...)
		fix := didYouMean(name, cands, "")
		if fix == "" {
			fix = "use one of " + strings.Join(cands, ", ")
		}
		if strings.EqualFold(name, "torch_adam") {
			fix = `write "type": "Adam" with "params": {"torch_adam": true}`
		}
		tf.errorf(fix, "%s is not a supported DeepSpeed optimizer nor a torch.optim class", quote(name))
		return
	}
	o.Type = name
	o.Params = map[string]any{}
	if pb.v != nil {
		for _, m := range pb.v.Members {
			o.Params[m.Key] = m.Value.Interface()
		}
	}
	if v, ok := pb.lookupQuiet("max_grad_norm"); ok {
		pb.used["max_grad_norm"] = true
		c.s.errorf(v, "optimizer.params.max_grad_norm", `remove it and set the top-level "gradient_clipping" instead`,
			"'max_grad_norm' is not supported as an optimizer parameter by DeepSpeed")
	}
	cpu := c.plan.Zero.Stage > 0 && c.plan.Zero.OffloadOptimizer.Device != OffloadNone
	switch name {
	case "adam", "adamw":
		o.TorchAdam = pb.get("torch_adam").Bool(false)
		wm := pb.get("adam_w_mode")
		o.AdamWMode = wm.Bool(true)
		if name == "adamw" {
			o.AdamWMode = true
		}
		defWD := 0.0
		var kw []string
		switch {
		case o.TorchAdam && !o.AdamWMode:
			o.Impl, kw = "torch.optim.Adam", adamTorchKwargs
		case o.TorchAdam:
			o.Impl, kw, defWD = "torch.optim.AdamW", adamTorchKwargs, 0.01
		case cpu:
			o.Impl, kw = "DeepSpeedCPUAdam", cpuAdamKwargs
		default:
			o.Impl, kw = "FusedAdam", fusedAdamKwargs
		}
		c.adamParams(pb, defWD, 1e-3, [2]float64{0.9, 0.999}, 1e-8)
		o.BiasCorrection = true
		if contains(kw, "bias_correction") {
			o.BiasCorrection = pb.get("bias_correction").Bool(true)
		}
		if contains(kw, "amsgrad") {
			af := pb.get("amsgrad")
			o.AMSGrad = af.Bool(false)
			if o.AMSGrad {
				af.errorf("remove amsgrad", "%s does not support the AMSGrad variant in dszero", o.Impl)
			}
		}
		c.checkKwargs(pb, o.Impl, kw, "torch_adam", "adam_w_mode", "max_grad_norm")
	case "lamb":
		o.Impl = "FusedLamb"
		c.adamParams(pb, 0, 1e-3, [2]float64{0.9, 0.999}, 1e-8)
		o.BiasCorrection = pb.get("bias_correction").Bool(true)
		o.MaxCoeff = pb.get("max_coeff").Float(10)
		o.MinCoeff = pb.get("min_coeff").Float(0.01)
		pb.get("eps_inside_sqrt").Bool(false)
		pb.get("amsgrad").Bool(false)
		c.checkKwargs(pb, o.Impl, fusedLambKwargs, "max_grad_norm")
		if c.plan.Precision.LossScale != 0 {
			c.s.errorf(c.at("fp16.loss_scale"), "fp16.loss_scale", "set fp16.loss_scale to 0 (dynamic)",
				"DeepSpeed's lamb optimizer requires dynamic loss scaling")
		}
	case "adagrad":
		kw := torchOptimizers["Adagrad"]
		o.Impl = "torch.optim.Adagrad"
		if cpu {
			o.Impl, kw = "DeepSpeedCPUAdagrad", cpuAdagradKw
		}
		o.LR = pb.get("lr").Float(1e-2)
		o.Eps = pb.get("eps").Float(1e-10)
		o.WeightDecay = pb.get("weight_decay").Float(0)
		if o.Impl == "torch.optim.Adagrad" {
			o.LRDecay = pb.get("lr_decay").Float(0)
			o.InitialAccumulatorVal = pb.get("initial_accumulator_value").Float(0)
		}
		c.checkKwargs(pb, o.Impl, kw, "max_grad_norm")
	case "lion":
		o.Impl = "FusedLion"
		if cpu {
			o.Impl = "DeepSpeedCPULion"
		}
		c.adamParams(pb, 0, 1e-3, [2]float64{0.9, 0.999}, 0)
		c.checkKwargs(pb, o.Impl, lionKwargs, "max_grad_norm")
	case "onebitadam", "zerooneadam", "onebitlamb":
		c.readOneBit(tf, pb, name)
	default:
		if kw, ok := torchOptimizers[name]; ok {
			o.Impl = "torch.optim." + name
			if name == "SGD" {
				o.LR = pb.get("lr").Float(1e-3)
				o.Momentum = pb.get("momentum").Float(0)
				o.Dampening = pb.get("dampening").Float(0)
				o.WeightDecay = pb.get("weight_decay").Float(0)
				o.Nesterov = pb.get("nesterov").Bool(false)
				if o.Nesterov && (o.Momentum <= 0 || o.Dampening != 0) {
					c.s.errorf(c.at("optimizer.params.nesterov"), "optimizer.params.nesterov", "set momentum > 0 and dampening 0",
						"Nesterov momentum requires a momentum and zero dampening (torch.optim.SGD raises ValueError)")
				}
			} else {
				c.adamParams(pb, 0, 1e-3, [2]float64{0.9, 0.999}, 1e-8)
			}
			if kw != nil {
				c.checkKwargs(pb, o.Impl, kw, "max_grad_norm")
			} else {
				c.markAllUsed(pb)
			}
		} else {
			o.Impl = name
			c.markAllUsed(pb)
		}
	}
	if c.plan.Zero.Stage > 0 && !c.plan.ZeroAllowUntestedOptimizer && !zeroSupported[o.Impl] {
		c.s.errorf(tf.v, "optimizer.type", `add "zero_allow_untested_optimizer": true at the top level, or use Adam/AdamW`,
			"%s is an untested ZeRO optimizer: DeepSpeed refuses it at ZeRO stage %d unless zero_allow_untested_optimizer is true", o.Impl, c.plan.Zero.Stage)
	}
	o.IntParams = intParams(o.Impl, pb.v)
	if !dszeroRuns[o.Impl] {
		c.s.unsupportedf(tf.v, "optimizer.type", "use Adam, AdamW, SGD or Lamb", "the %s optimizer (%s) is not implemented by dszero", name, o.Impl)
	}
	pb.finish()
}

// typeAndParams reads the "type" and "params" of an optimizer or scheduler
// block (both read key by key by DeepSpeed).
func (c *compiler) typeAndParams(b *block, what, example string) (tf *field, name string, params *block) {
	tf = b.get("type")
	if tf.v != nil && tf.v.Kind == lenient.String {
		name = tf.v.Str
	} else if tf.v != nil && tf.v.Kind != lenient.Null {
		tf.errorf(fmt.Sprintf("write a name such as %q", example), "%s type must be a string, got %s", what, describe(tf.v))
	}
	tf.record(name)
	return tf, name, b.get("params").Object(scalarBlock)
}

func sortedKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (c *compiler) markAllUsed(b *block) {
	if b.v == nil {
		return
	}
	for _, m := range b.v.Members {
		b.used[m.Key] = true
	}
}

// adamParams reads lr, betas, eps and weight_decay.
func (c *compiler) adamParams(pb *block, defWD, defLR float64, defBetas [2]float64, defEps float64) {
	o := &c.plan.Optimizer
	o.LR = pb.get("lr").Float(defLR)
	o.Betas = c.betas(pb, defBetas)
	o.BetasGiven = pb.get("betas").v != nil
	if defEps != 0 {
		o.Eps = pb.get("eps").Float(defEps)
	}
	o.WeightDecay = pb.get("weight_decay").Float(defWD)
}

func (c *compiler) betas(pb *block, def [2]float64) [2]float64 {
	f := pb.get("betas")
	if f.v == nil {
		f.record(def[:])
		return def
	}
	if f.v.Kind != lenient.Array || len(f.v.Elems) != 2 {
		f.errorf("write two numbers, e.g. [0.9, 0.999]", "betas must be a list of two numbers, got %s", describe(f.v))
		f.record(def[:])
		return def
	}
	var out [2]float64
	for i, e := range f.v.Elems {
		x, ok := e.Float64()
		if e.Kind != lenient.Number || !ok || x < 0 || x >= 1 {
			c.s.errorf(e, fmt.Sprintf("%s[%d]", f.path, i), "use a number in [0, 1)", "beta must be a number in [0, 1), got %s", describe(e))
			f.record(def[:])
			return def
		}
		out[i] = x
	}
	f.record(out[:])
	return out
}

// checkKwargs reports params the optimizer class would reject with
// "TypeError: __init__() got an unexpected keyword argument".
func (c *compiler) checkKwargs(pb *block, impl string, allowed []string, alsoAccepted ...string) {
	if pb.v == nil {
		return
	}
	for _, m := range pb.v.Members {
		if pb.used[m.Key] || contains(alsoAccepted, m.Key) {
			pb.used[m.Key] = true
			continue
		}
		if contains(allowed, m.Key) {
			pb.used[m.Key] = true
			pb.get(m.Key).Raw()
			continue
		}
		pb.used[m.Key] = true
		fix := didYouMean(m.Key, allowed, "remove it; "+impl+" takes "+strings.Join(allowed, ", "))
		c.s.errorf(m.Value, "optimizer.params."+m.Key, fix, "%s does not take the argument %s (DeepSpeed fails with TypeError: unexpected keyword argument)", impl, quote(m.Key))
	}
}
