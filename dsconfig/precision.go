package dsconfig

import (
	"strconv"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig/lenient"
)

// readPrecision reads fp16, bf16 (or the legacy bfloat16), amp and
// torch_autocast.
func (c *compiler) readPrecision(top *block) {
	p := &c.plan.Precision
	fp := top.get("fp16").Object(pydanticBlock)
	fp16 := fp.get("enabled").Bool(false)
	p.FP16AutoCast = fp.get("auto_cast").Bool(false)
	ls := fp.get("loss_scale")
	if ls.v != nil && ls.v.Kind == lenient.Bool {
		ls.errorf("write 0 for dynamic loss scaling or a positive static scale", "fp16.loss_scale must be a number, not bool")
		ls.record(0.0)
	} else {
		p.LossScale = ls.Float(0)
		if p.LossScale < 0 {
			ls.errorf("write 0 for dynamic loss scaling or a positive static scale", "fp16.loss_scale must be ≥ 0 (0 enables dynamic loss scaling), got %g", p.LossScale)
			p.LossScale = 0
		}
	}
	for _, k := range []string{"initial_scale_power", "loss_scale_window", "min_loss_scale", "hysteresis", "consecutive_hysteresis"} {
		p.DynamicArgsGiven = p.DynamicArgsGiven || c.at("fp16."+k) != nil
	}
	p.InitialScalePower = fp.get("initial_scale_power").Int(16, -1<<62)
	p.LossScaleWindow = c.scaleInt(fp, "loss_scale_window", 1000)
	p.Hysteresis = fp.get("hysteresis").Int(2, -1<<62)
	p.ConsecutiveHysteresis = fp.get("consecutive_hysteresis").Bool(false)
	p.MinLossScale = c.scaleInt(fp, "min_loss_scale", 1)
	p.FP16MasterWeightsAndGrads = fp.get("fp16_master_weights_and_grads").Bool(false)
	fp.finish()
	if fp16 && p.LossScale == 0 {
		if p.LossScaleWindow <= 0 {
			c.s.errorf(c.at("fp16.loss_scale_window"), "fp16.loss_scale_window", "use a positive window such as 1000",
				"must be > 0 when dynamic loss scaling is enabled (loss_scale=0)")
		}
		if p.MinLossScale <= 0 {
			c.s.errorf(c.at("fp16.min_loss_scale"), "fp16.min_loss_scale", "use a positive minimum such as 1",
				"must be > 0 when dynamic loss scaling is enabled (loss_scale=0)")
		}
	}
	if fp16 && p.LossScale != 0 {
		for _, k := range []string{"loss_scale_window", "hysteresis", "min_loss_scale", "initial_scale_power", "consecutive_hysteresis"} {
			if v := c.at("fp16." + k); v != nil {
				c.s.infof(v, "fp16."+k, "ignored: loss_scale %g is static (only dynamic scaling, loss_scale 0, uses it)", p.LossScale)
			}
		}
	}

	key := "bf16"
	bv := c.at("bf16")
	if bv == nil {
		if old := c.at("bfloat16"); old != nil {
			key = "bfloat16"
			c.s.warnf(old, "bfloat16", `rename the block to "bf16"`, "bfloat16 is the legacy name of the bf16 block")
		}
	} else if old := c.at("bfloat16"); old != nil {
		top.markUsed("bfloat16")
		c.s.warnf(old, "bfloat16", "remove the bfloat16 block", "ignored: DeepSpeed reads the legacy bfloat16 block only when bf16 is absent")
	}
	top.markUsed("bf16", "bfloat16")
	bf := top.get(key).Object(pydanticBlock)
	bf.path = "bf16"
	bf16 := bf.get("enabled").Bool(false)
	p.BF16ImmediateGradUpdate = bf.get("immediate_grad_update").Bool(false)
	p.BF16CheckGradOverflow = bf.get("check_grad_overflow").Bool(true)
	p.BF16MasterWeightsAndGrads = bf.get("bf16_master_weights_and_grads").Bool(false)
	p.BF16OptimizerStates = bf.get("bf16_optimizer_states").Bool(false)
	if key == "bfloat16" {
		bf.path = "bfloat16"
	}
	bf.finish()

	switch {
	case fp16 && bf16:
		c.s.errorf(c.at("fp16.enabled"), "fp16.enabled", "enable only one of fp16 and bf16", "bfloat16 and fp16 modes cannot be simultaneously enabled")
		p.DType = device.F16
	case bf16:
		p.DType = device.BF16
	case fp16:
		p.DType = device.F16
	default:
		p.DType = device.F32
	}
	c.rec.set(Setting{Path: "precision", Value: p.DType.String(), Source: FromDerived})

	// Apex AMP: DeepSpeed imports apex.amp, which current NVIDIA Apex no
	// longer ships; dszero has no AMP. Both make the config unusable.
	if amp := c.at("amp"); amp != nil && amp.Kind == lenient.Object {
		if e, ok := amp.Get("enabled"); ok && truthy(e) {
			p.AMP = true
			c.s.errorf(e, "amp.enabled", `remove the amp block and use "fp16": {"enabled": true} or "bf16": {"enabled": true}`,
				"Apex AMP needs NVIDIA Apex's apex.amp, which current Apex no longer ships (DeepSpeed: \"Unable to import apex/amp\"); dszero does not implement it")
		}
	}
	c.readTorchAutocast()
}

// scaleInt reads loss_scale_window / min_loss_scale, which DeepSpeed's
// validator refuses as bool before the int conversion.
func (c *compiler) scaleInt(b *block, key string, def int64) int64 {
	f := b.get(key)
	if f.v != nil && f.v.Kind == lenient.Bool {
		f.errorf("write a whole number", "fp16.%s must be an integer, not bool", key)
		f.record(def)
		return def
	}
	if f.v != nil && f.v.Kind == lenient.Number {
		if _, ok := f.v.Int64(); !ok {
			x, _ := f.v.Float64()
			f.errorf("write a whole number (DeepSpeed's loss scales are powers of two ≥ 1)",
				"fp16.%s must be an integer, got %s", key, strconv.FormatFloat(x, 'g', -1, 64))
			f.record(def)
			return def
		}
	}
	return f.Int(def, -1<<62)
}
