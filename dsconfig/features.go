package dsconfig

import "github.com/dszero/dszero/dsconfig/lenient"

// readFeatureBlocks reads the blocks of features outside the ZeRO engine:
// validated as DeepSpeed validates them, and reported as unsupported when
// they are turned on.
func (c *compiler) readFeatureBlocks(top *block) {
	c.readKnobs(top)

	cp := top.get("compile").Object(pydanticBlock)
	if cp.present() {
		deep := cp.get("deepcompile").Bool(false)
		for _, k := range []string{"free_activation", "offload_activation", "offload_opt_states", "symmetric_memory", "debug_log",
			"offload_parameters", "sync_before_reduce", "sync_after_reduce", "sync_before_allgather", "sync_after_allgather", "keep_all_input_tensors"} {
			cp.get(k).Bool(false)
		}
		cp.get("double_buffer").Bool(true)
		cp.get("keep_int_input_tensors").Bool(true)
		cp.get("free_activation_threshold").Int(10*1024*1024, -1<<62)
		cp.get("passes").Raw()
		cp.finish()
		if deep {
			c.s.warnf(c.at("compile.deepcompile"), "compile.deepcompile", "set it to false to silence this",
				"DeepCompile is not run: dszero trains with the same ZeRO schedule (gathers, releases, reductions per unit) without a graph compiler, so the numerics are the same and only DeepCompile's speedups are missing")
		}
	}

	if tm := top.get("timers").Object(scalarBlock); tm.present() {
		tp := tm.get("throughput").Object(pydanticBlock)
		tp.get("enabled").Bool(true)
		tp.get("synchronized").Bool(true)
		tp.finish()
		tm.finish()
	}

	if he := top.get("hybrid_engine").Object(pydanticBlock); he.present() {
		on := he.get("enabled").Bool(false)
		he.get("max_out_tokens").Int(512, -1<<62)
		he.get("inference_tp_size").Int(1, -1<<62)
		he.get("release_inference_cache").Bool(false)
		he.get("pin_parameters").Bool(true)
		he.get("tp_gather_partition_size").Int(8, -1<<62)
		he.finish()
		if on {
			c.s.unsupportedf(c.at("hybrid_engine.enabled"), "hybrid_engine.enabled", "set it to false", "the RLHF hybrid engine is not supported by dszero")
		}
	}

	c.readElasticity(top)

	// DeepSpeed reads the autotuning block only under `deepspeed
	// --autotuning`; a training run ignores it.
	if at := c.at("autotuning"); at != nil && enabledIn(at) {
		top.markUsed("autotuning")
		c.s.warnf(at, "autotuning", "run `dszero autotune --deepspeed FILE` to tune, or remove the block",
			"ignored: DeepSpeed's autotuner runs only under `deepspeed --autotuning`, and a training run ignores the block")
	}

	// Blocks DeepSpeed parses for features outside ZeRO training. dszero
	// keeps them as written and says so when they are switched on.
	for _, fb := range []struct{ key, name, why string }{
		{"compression_training", "compression training", ""},
		{"sparse_attention", "sparse attention",
			": it replaces the model's attention with DeepSpeed's SparseSelfAttention modules and their block-sparse Triton kernels, and dszero's models compute dense attention"},
		{"quantize_training", "quantization-aware training (MoQ)",
			": MoQ quantizes the weights to ever fewer bits on a schedule during training with DeepSpeed's quantizer kernels, and dszero trains in fp32, bf16 or fp16 only"},
		{"eigenvalue", "eigenvalue computation",
			": it estimates each layer's top Hessian eigenvalue by power iteration through a second (double) backward, and dszero's models have first-order backward passes only"},
		{"pipeline", "pipeline parallelism", ""},
		{"nebula", "Nebula checkpointing", ""},
		{"datastates", "DataStates checkpointing", ""},
		{"weight_quantization", "weight quantization", ""},
		{"expert_parallel", "expert parallelism (MoE)", ""},
		{"torch_autocast", "", ""},
		{"amp", "", ""},
	} {
		f := top.get(fb.key)
		raw := f.Raw()
		if fb.name == "" || raw == nil {
			continue
		}
		if on := enabledIn(f.v); on {
			c.s.unsupportedf(f.v, fb.key, "remove the block or set enabled to false", "%s is not supported by dszero%s", fb.name, fb.why)
		} else if fb.key == "sparse_attention" || fb.key == "weight_quantization" {
			// These have no enabled switch: their presence turns them on.
			c.s.unsupportedf(f.v, fb.key, "remove the block", "%s is not supported by dszero%s", fb.name, fb.why)
		}
	}
}

// enabledIn reports whether an object has "enabled": true (or a truthy
// value) at its top or in a direct child block.
func enabledIn(v *lenient.Value) bool {
	if v == nil || v.Kind != lenient.Object {
		return false
	}
	if e, ok := v.Get("enabled"); ok {
		return truthy(e)
	}
	for _, m := range v.Members {
		if m.Value.Kind == lenient.Object {
			if e, ok := m.Value.Get("enabled"); ok && truthy(e) {
				return true
			}
		}
	}
	return false
}

func truthy(v *lenient.Value) bool {
	switch v.Kind {
	case lenient.Bool:
		return v.Bool
	case lenient.Number:
		x, _ := v.Float64()
		return x != 0
	case lenient.String:
		return v.Str != ""
	case lenient.Array:
		return len(v.Elems) > 0
	case lenient.Object:
		return len(v.Members) > 0
	}
	return false
}

// readElasticity reads the elasticity block. dszero does not compute
// elastic batch sizes; DeepSpeed's rule that batch keys must be absent
// (unless ignore_non_elastic_batch_info) is enforced.
func (c *compiler) readElasticity(top *block) {
	b := top.get("elasticity").Object(scalarBlock)
	if !b.present() {
		return
	}
	on := b.get("enabled").Bool(false)
	b.get("max_train_batch_size").Int(2000, 1)
	b.get("micro_batch_sizes").Raw()
	b.get("min_gpus").Int(1, 1)
	b.get("max_gpus").Int(10000, 1)
	b.get("min_time").Int(0, 0)
	b.get("prefer_larger_batch").Bool(true)
	ignore := b.get("ignore_non_elastic_batch_info").Bool(false)
	b.get("version").Float(0.2)
	b.get("model_parallel_size").Int(1, 1)
	b.get("num_gpus_per_node").Int(1, 1)
	b.finish()
	if !on {
		return
	}
	c.plan.elastic = true
	if !ignore {
		for _, k := range []string{"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"} {
			if v := c.at(k); v != nil {
				c.s.errorf(v, k, "remove the batch keys or set elasticity.ignore_non_elastic_batch_info: true",
					"elastic training is enabled and takes control of the batch size, so %s would not be used (DeepSpeed raises ElasticityConfigError)", k)
			}
		}
	}
	c.s.unsupportedf(c.at("elasticity"), "elasticity", "set elasticity.enabled to false and give the batch sizes",
		"elastic training (batch size chosen by DeepSpeed's elasticity solver) is not supported by dszero")
}
