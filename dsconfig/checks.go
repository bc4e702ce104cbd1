package dsconfig

import (
	"fmt"

	"github.com/dszero/dszero/device"
)

// crossChecks applies the checks of DeepSpeedEngine.__init__ that depend
// on the config alone and span several blocks.
func (c *compiler) crossChecks() {
	p := &c.plan
	z := p.Zero
	hasOpt := p.Optimizer.Type != ""
	if !hasOpt && p.Mode == HFMode {
		c.hfDefaultOptimizer()
		hasOpt = true
	}
	if p.Mode == HFMode && c.at("scheduler") == nil {
		c.hfDefaultScheduler()
	}
	if !hasOpt {
		switch {
		case z.Stage == 1 || z.Stage == 2:
			c.s.errorf(c.at("zero_optimization"), "optimizer", c.noOptimizerFix(),
				"zero stage %d requires an optimizer, and the config has none (DeepSpeed accepts it only from a client passing its own optimizer)", z.Stage)
		default:
			c.s.unsupportedf(nil, "optimizer", c.noOptimizerFix(),
				"no optimizer: DeepSpeed would build none (stage %d without an optimizer only partitions/serves parameters); dszero trains only with an optimizer", z.Stage)
		}
	}
	if hasOpt && (z.Stage == 2 || z.Stage == 3) && z.ReduceScatter {
		if p.PrescaleGradients {
			c.s.errorf(c.at("prescale_gradients"), "prescale_gradients", "set prescale_gradients to false, or zero_optimization.reduce_scatter to false",
				"ZeRO stage %d with reduce_scatter does not support prescale_gradients", z.Stage)
		}
		if p.GradientPredivideFactor != 1 {
			c.s.errorf(c.at("gradient_predivide_factor"), "gradient_predivide_factor", "set it to 1.0, or zero_optimization.reduce_scatter to false",
				"ZeRO stage %d with reduce_scatter requires gradient_predivide_factor 1.0, got %g", z.Stage, p.GradientPredivideFactor)
		}
	}
	c.seqParZeRO3() // seqpar.go
	if hasOpt && (z.Stage == 1 || z.Stage == 2) && z.AllgatherBucketSize%2 != 0 {
		c.s.errorf(c.at("zero_optimization.allgather_bucket_size"), "zero_optimization.allgather_bucket_size", "use an even number",
			"allgather_bucket_size must be a multiple of 2, got %d", z.AllgatherBucketSize)
	}
	if p.GradientAllreduceOp == "sum" && z.Stage == 3 {
		c.s.errorf(c.at("gradient_allreduce_op"), "gradient_allreduce_op", `use "mean" or a lower stage`, `gradient_allreduce_op "sum" is not supported with ZeRO stage 3`)
	}
	if z.MiCSShardSize > 0 && z.Stage == 3 && hasOpt {
		if world := int64(c.opts.WorldSize); world%z.MiCSShardSize != 0 {
			c.s.errorf(c.at("zero_optimization.mics_shard_size"), "zero_optimization.mics_shard_size",
				fmt.Sprintf("use a mics_shard_size that divides the world size %d, or run on a multiple of %d ranks", world, z.MiCSShardSize),
				"mics_shard_size %d does not divide the world size %d into shard groups: DeepSpeed's MiCS fails with AssertionError (dp group size is not dividable by dp_shard_size)",
				z.MiCSShardSize, world)
		}
	}
	if z.MiCSShardSize > 0 && z.Stage != 3 {
		c.s.warnf(c.at("zero_optimization.mics_shard_size"), "zero_optimization.mics_shard_size", "use stage 3 or remove it",
			"mics_shard_size only applies to ZeRO stage 3; ignored at stage %d", z.Stage)
	}
	if z.HPZPartitionSize > 1 && z.Stage != 3 {
		c.s.warnf(c.at("zero_optimization.zero_hpz_partition_size"), "zero_optimization.zero_hpz_partition_size", "use stage 3 or remove it",
			"zero_hpz_partition_size only applies to ZeRO stage 3; ignored at stage %d", z.Stage)
	}
	for _, q := range []struct {
		on       bool
		key, tag string
	}{{z.QuantizedWeights, "zero_quantized_weights", "qwZ"}, {z.QuantizedGradients, "zero_quantized_gradients", "qgZ"}} {
		path := "zero_optimization." + q.key
		switch {
		case !q.on:
		case z.Stage != 3:
			c.s.warnf(c.at(path), path, "use stage 3 or remove it",
				"%s (ZeRO++) only applies to ZeRO stage 3; ignored at stage %d", q.key, z.Stage)
		case q.tag == "qgZ" && p.CommunicationDataType != "" && p.CommunicationDataType != p.Precision.DType.String():
			c.s.unsupportedf(c.at("communication_data_type"), path, "remove communication_data_type, or set zero_quantized_gradients false",
				"ZeRO++ qgZ with communication_data_type %q: qgZ reduces the gradients in the model's dtype (%s), quantized, not in another", p.CommunicationDataType, p.Precision.DType)
		case p.Precision.DType != device.F16:
			// DeepSpeed runs it on the wrong bits; dszero on the values.
			c.s.warnf(c.at(path), path, "enable fp16 to compare with DeepSpeed's numbers",
				"ZeRO++ %s with %s: DeepSpeed's quantizer kernels read the tensors as fp16 whatever their dtype (pt_binding.cpp casts them to __half*, 0.14.5 to 0.19.6; DeepSpeed issue #7775), so they quantize the wrong bits; dszero quantizes the %s values themselves with the same algorithm, which DeepSpeed cannot reproduce", q.tag, p.Precision.DType, p.Precision.DType)
		}
	}
	if z.LoCo && !z.QuantizedGradients {
		c.s.warnf(c.at("zero_optimization.zeropp_loco_param"), "zero_optimization.zeropp_loco_param", "set zero_quantized_gradients true or remove it",
			"zeropp_loco_param is LoCo's setting for qgZ; without zero_quantized_gradients DeepSpeed ignores it")
	}
	if hasOpt && p.Mode == HFMode && c.at("optimizer") == nil && z.Stage > 0 && z.OffloadOptimizer.Device != OffloadNone && p.ZeroForceDSCPUOptimizer {
		// DeepSpeed refuses a client torch optimizer with ZeRO-Offload
		// (ZeRORuntimeException), so Accelerate, which the Trainer
		// prepares through, swaps the Trainer's AdamW for
		// DeepSpeedCPUAdam(param_groups, lr, weight_decay): its step reads
		// betas and eps from the AdamW's groups, so the update is the same
		// AdamW.
		p.Optimizer.Impl, p.Optimizer.TorchAdam = "DeepSpeedCPUAdam", false
		c.s.infof(c.at("zero_optimization.offload_optimizer"), "optimizer",
			"ZeRO-Offload with the Trainer's own AdamW: Accelerate hands DeepSpeed a DeepSpeedCPUAdam over the AdamW's parameter groups (same lr, betas, eps, weight decay), as DeepSpeed requires")
	}
	c.masterWeightsChecks()
}

// noOptimizerFix is the one-line fix for a config without an optimizer
// block in DeepSpeed mode: an optimizer block, or the HF flags that run
// the file as the Trainer would (its AdamW) without a mismatch error.
func (c *compiler) noOptimizerFix() string {
	p := &c.plan
	fix := `add an "optimizer" block (e.g. {"type": "AdamW", "params": {"lr": 1e-4}})`
	flags := "--learning_rate 5e-5"
	if b := p.Batch; b.TrainMicroBatchSizePerGPU > 0 {
		flags += fmt.Sprintf(" --per_device_train_batch_size %d --gradient_accumulation_steps %d", b.TrainMicroBatchSizePerGPU, b.GradientAccumulationSteps)
	}
	if d := p.Precision.DType; d == device.F16 || d == device.BF16 {
		flags += " --" + d.String()
	}
	return fix + ", or run it as HF's Trainer would (its AdamW, linear decay): add " + flags
}
