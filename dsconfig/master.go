package dsconfig

// masterWeightsChecks applies DeepSpeed 0.19.5's rules for
// bf16.bf16_master_weights_and_grads and bf16.bf16_optimizer_states, in
// the order DeepSpeed raises them:
//
//  1. DeepSpeedConfig._do_error_check: both need ZeRO stage 1, 2 or 3, and
//     bf16_optimizer_states needs bf16_master_weights_and_grads.
//  2. ZeROOptimizer._configure_master_weights (base_optimizer.py), called
//     by stage_1_and_2.py and stage3.py: unless the optimizer states are
//     bf16 too and stay on the device, the master weights need optimizer
//     offload (device cpu or nvme) with exactly DeepSpeedCPUAdam
//     ("Master weights feature requires ZeRO-2 Offload with
//     DeepSpeedCPUAdam"); offloaded bf16 states need a DeepSpeedCPUAdam
//     built with fp32_optimizer_states=False — the engine forces that for
//     the optimizer block's, but the Trainer's (Accelerate's
//     DeepSpeedCPUAdam(param_groups, lr, weight_decay)) keeps the default
//     True and fails the assertion.
//
// A config that passes runs in DeepSpeed with the master weight and
// gradient partitions in bf16 (the partition is cloned from the bf16
// working copy; gradients are copied in without the fp32 up-cast and
// accumulated, unscaled and clipped in bf16; DeepSpeedCPUAdam reads and
// writes bf16 parameters) and, with bf16_optimizer_states, the moments in
// bf16. dszero keeps fp32 master weights and gradients, so it refuses
// the key by name rather than train with other numbers.
func (c *compiler) masterWeightsChecks() {
	p := &c.plan
	pr, z := p.Precision, p.Zero
	if pr.FP16MasterWeightsAndGrads {
		c.fp16MasterChecks()
		return
	}
	if !pr.BF16MasterWeightsAndGrads && !pr.BF16OptimizerStates {
		return
	}
	const masterPath, statesPath = "bf16.bf16_master_weights_and_grads", "bf16.bf16_optimizer_states"
	at := func(path string) string {
		if c.at(path) == nil && c.at("bfloat16") != nil {
			return "bfloat16" + path[len("bf16"):]
		}
		return path
	}
	stageOK := z.Stage >= 1 && z.Stage <= 3
	if pr.BF16MasterWeightsAndGrads && !stageOK {
		c.s.errorf(c.at(at(masterPath)), masterPath, "use ZeRO stage 1, 2 or 3 (zero_optimization.stage), or remove it",
			"Bf16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, or 3.")
		return
	}
	if pr.BF16OptimizerStates {
		switch {
		case !stageOK:
			c.s.errorf(c.at(at(statesPath)), statesPath, "use ZeRO stage 1, 2 or 3 (zero_optimization.stage), or remove it",
				"bf16_optimizer_states is only supported with ZeRO Stage 1, 2, or 3.")
			return
		case !pr.BF16MasterWeightsAndGrads:
			c.s.errorf(c.at(at(statesPath)), statesPath, "also set bf16_master_weights_and_grads: true, or remove it",
				"bf16_optimizer_states requires bf16_master_weights_and_grads to be enabled.")
			return
		}
	}
	if p.Optimizer.Type == "" {
		return // no optimizer: the no-optimizer diagnostic stands
	}
	offload := z.OffloadOptimizer.Device != OffloadNone
	if !pr.BF16OptimizerStates || offload {
		if !offload || p.Optimizer.Impl != "DeepSpeedCPUAdam" {
			// stage_1_and_2.py and stage3.py word it slightly differently.
			cur := "ZeRO-Offload"
			if z.Stage == 3 {
				cur = "ZeRO-3 Offload"
			}
			fix := `add "offload_optimizer": {"device": "cpu"} with an Adam/AdamW optimizer block (DeepSpeedCPUAdam), or set bf16_optimizer_states: true to keep bf16 states on the device, or remove it`
			c.s.errorf(c.at(at(masterPath)), masterPath, fix,
				"Master weights feature requires ZeRO-%d Offload with DeepSpeedCPUAdam. Current %s:%s optimizer type %s (DeepSpeed's AssertionError)",
				z.Stage, cur, pyBool(offload), p.Optimizer.Impl)
			return
		}
		if pr.BF16OptimizerStates && p.Mode == HFMode && c.at("optimizer") == nil {
			c.s.errorf(c.at(at(statesPath)), statesPath, `add an Adam/AdamW "optimizer" block (DeepSpeed then builds DeepSpeedCPUAdam with fp32_optimizer_states=False), or remove it`,
				"bf16_optimizer_states with ZeRO-Offload requires DeepSpeedCPUAdam constructed with fp32_optimizer_states=False so optimizer moments are stored in bf16 (the Trainer's DeepSpeedCPUAdam keeps the default True: DeepSpeed's AssertionError)")
			return
		}
	}
	what := "the master weight and gradient partitions"
	if pr.BF16OptimizerStates {
		what += " and the optimizer states"
	}
	c.s.unsupportedf(c.at(at(masterPath)), masterPath, "remove bf16_master_weights_and_grads (and bf16_optimizer_states): dszero then keeps them in fp32, as DeepSpeed does without the keys",
		"DeepSpeed keeps %s in bf16 (cloned from the bf16 working copy, gradients accumulated, unscaled and clipped in bf16, %s reading and writing bf16); dszero keeps fp32 master weights and gradients and does not reproduce that rounding (`dszero estimate` shows the bytes DeepSpeed saves)",
		what, p.Optimizer.Impl)
}

// pyBool is Python's repr of a bool.
func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// fp16MasterChecks is masterWeightsChecks for fp16.fp16_master_weights_and_grads
// (DeepSpeed 0.19.5): ZeRO stage 1, 2 or 3 (config.py), not together with
// bf16_master_weights_and_grads, and always optimizer offload with
// DeepSpeedCPUAdam (base_optimizer.py: the fp16 validator has no on-device
// case); then refused by name, as the bf16 key is.
func (c *compiler) fp16MasterChecks() {
	p := &c.plan
	pr, z := p.Precision, p.Zero
	const path = "fp16.fp16_master_weights_and_grads"
	v := c.at(path)
	switch {
	case z.Stage < 1 || z.Stage > 3:
		c.s.errorf(v, path, "use ZeRO stage 1, 2 or 3 (zero_optimization.stage), or remove it",
			"Fp16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, or 3.")
		return
	case pr.BF16MasterWeightsAndGrads:
		c.s.errorf(v, path, "keep one of fp16_master_weights_and_grads and bf16.bf16_master_weights_and_grads",
			"fp16_master_weights_and_gradients and bf16_master_weights_and_gradients are mutually exclusive.")
		return
	case p.Optimizer.Type == "":
		return
	}
	if offload := z.OffloadOptimizer.Device != OffloadNone; !offload || p.Optimizer.Impl != "DeepSpeedCPUAdam" {
		cur := "ZeRO-Offload"
		if z.Stage == 3 {
			cur = "ZeRO-3 Offload"
		}
		c.s.errorf(v, path, `add "offload_optimizer": {"device": "cpu"} with an Adam/AdamW optimizer block (DeepSpeedCPUAdam), or remove it`,
			"Master weights feature requires ZeRO-%d Offload with DeepSpeedCPUAdam. Current %s:%s optimizer type %s (DeepSpeed's AssertionError)",
			z.Stage, cur, pyBool(offload), p.Optimizer.Impl)
		return
	}
	c.s.unsupportedf(v, path, "remove fp16_master_weights_and_grads: dszero then keeps fp32 master weights, as DeepSpeed does without the key",
		"DeepSpeed keeps the master weight and gradient partitions in fp16 (DeepSpeedCPUAdam reading and writing fp16); dszero keeps fp32 master weights and gradients and does not reproduce that rounding (`dszero estimate` shows the bytes DeepSpeed saves)")
}
