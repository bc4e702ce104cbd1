package dsconfig

import (
	"fmt"
	"math"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// readZero reads zero_optimization, DeepSpeed's DeepSpeedZeroConfig.
func (c *compiler) readZero(top *block) {
	z := &c.plan.Zero
	f := top.get("zero_optimization")
	var b *block
	switch {
	case f.v == nil || f.v.Kind == lenient.Null:
		b = c.newBlock("zero_optimization", nil, pydanticBlock)
	case f.v.Kind == lenient.Bool:
		// The pre-2020 form: stage 1 if true, else 0, with the top-level
		// allgather_size as the bucket size.
		c.s.warnf(f.v, "zero_optimization", `write "zero_optimization": {"stage": `+fmt.Sprint(b2i(f.v.Bool))+`}`,
			"the boolean form of zero_optimization is deprecated: %v means stage %d", f.v.Bool, b2i(f.v.Bool))
		b = c.newBlock("zero_optimization", nil, pydanticBlock)
		z.Stage = int(b2i(f.v.Bool))
		c.rec.set(Setting{Path: "zero_optimization.stage", Value: z.Stage, Source: FromLegacy, Line: f.v.Pos.Line, Col: f.v.Pos.Col})
		top.markUsed("allgather_size")
		if z.Stage > 0 {
			ag := top.get("allgather_size")
			ag.path = "zero_optimization.allgather_bucket_size"
			if ag.source == FromFile {
				ag.source = FromLegacy
			}
			z.AllgatherBucketSize = ag.Int(500000000, 0)
		}
		c.readZeroFields(b, true)
		return
	case f.v.Kind != lenient.Object:
		f.errorf(`write "zero_optimization": {"stage": N} with N in 0..3`,
			"must be an object (or the legacy true/false), got %s: DeepSpeed fails with a TypeError", describe(f.v))
		b = c.newBlock("zero_optimization", nil, pydanticBlock)
	default:
		b = f.Object(pydanticBlock)
	}
	c.readZeroFields(b, false)
	b.finish()
}

func (c *compiler) readZeroFields(b *block, legacy bool) {
	z := &c.plan.Zero
	if !legacy {
		sf := b.get("stage")
		stage := int64(0)
		if sf.v != nil && sf.v.Kind == lenient.Number {
			if n, ok := sf.v.Int64(); ok && (n < 0 || n > 3) {
				sf.errorf("use 0, 1, 2 or 3", "ZeRO stage must be 0, 1, 2 or 3, got %d", n)
				sf.record(int64(0))
			} else {
				stage = sf.Int(0, 0)
			}
		} else if sf.v != nil && sf.v.Kind == lenient.Array {
			sf.errorf("pick one stage (a list is an autotuner search space, not a DeepSpeed value)", "ZeRO stage must be 0, 1, 2 or 3, got %s", describe(sf.v))
			sf.record(int64(0))
		} else {
			stage = sf.Int(0, 0)
			if stage > 3 {
				sf.errorf("use 0, 1, 2 or 3", "ZeRO stage must be 0, 1, 2 or 3, got %d", stage)
				stage = 0
			}
		}
		z.Stage = int(stage)
	}
	z.ContiguousGradients = b.get("contiguous_gradients").Bool(true)
	z.ReduceScatter = b.get("reduce_scatter").Bool(true)
	z.ReduceBucketSize = b.get("reduce_bucket_size").Int(500000000, 0)
	z.UseMultiRankBucketAllreduce = b.get("use_multi_rank_bucket_allreduce").Bool(true)
	z.AllgatherPartitions = b.get("allgather_partitions").Bool(true)
	if !legacy || z.Stage == 0 {
		z.AllgatherBucketSize = b.get("allgather_bucket_size").Int(500000000, 0)
	}
	oc := b.get("overlap_comm")
	if oc.v == nil || oc.v.Kind == lenient.Null {
		oc.v = nil
		z.OverlapComm = z.Stage == 3
		oc.source = FromDerived
		oc.record(z.OverlapComm)
	} else {
		z.OverlapComm = oc.Bool(false)
	}
	z.LoadFromFP32Weights = b.get("load_from_fp32_weights").Bool(true)
	z.ElasticCheckpoint = b.get("elastic_checkpoint").Bool(false)
	z.SubGroupSize = b.get("sub_group_size").Int(1000000000, 0)
	z.PrefetchBucketSize = b.get("prefetch_bucket_size", "stage3_prefetch_bucket_size").Int(50000000, 0)
	z.ParamPersistenceThreshold = b.get("param_persistence_threshold", "stage3_param_persistence_threshold").Int(100000, 0)
	z.ModelPersistenceThreshold = b.get("model_persistence_threshold", "stage3_model_persistence_threshold").Int(math.MaxInt64, 0)
	z.MaxLiveParameters = b.get("max_live_parameters", "stage3_max_live_parameters").Int(1000000000, 0)
	z.MaxReuseDistance = b.get("max_reuse_distance", "stage3_max_reuse_distance").Int(1000000000, 0)
	g16 := b.get("gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save")
	z.Gather16BitWeightsOnModelSave = g16.Bool(false)
	z.ModuleGranularityThreshold = b.get("module_granularity_threshold", "stage3_module_granularity_threshold").Int(0, math.MinInt64)
	z.UseAllReduceForFetchParams = b.get("use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params").Bool(false)
	z.AllgatherSequential = b.get("allgather_sequential", "stage3_allgather_sequential").Bool(false)
	z.IgnoreUnusedParameters = b.get("ignore_unused_parameters").Bool(true)
	if lf := b.get("legacy_stage1"); lf.Bool(false) {
		lf.errorf("remove legacy_stage1", "the deprecated version of ZeRO stage 1 is not supported in DeepSpeed ≥ 0.5.9")
	}
	z.RoundRobinGradients = b.get("round_robin_gradients").Bool(false)
	z.HPZPartitionSize = b.get("zero_hpz_partition_size").Int(1, 0)
	z.QuantizedWeights = b.get("zero_quantized_weights").Bool(false)
	z.QuantizedNontrainableWeights = b.get("zero_quantized_nontrainable_weights").Bool(false)
	z.QuantizedGradients = b.get("zero_quantized_gradients").Bool(false)
	if loco := b.get("zeropp_loco_param"); loco.Raw() != nil {
		z.LoCo = true
	}
	z.MiCSShardSize = b.get("mics_shard_size").Int(-1, math.MinInt64)
	z.MiCSHierarchicalParamsGather = b.get("mics_hierarchical_params_gather").Bool(false)
	z.MemoryEfficientLinear = b.get("memory_efficient_linear").Bool(true)
	z.PipelineLoadingCheckpoint = b.get("pipeline_loading_checkpoint").Bool(false)
	z.OverrideModuleApply = b.get("override_module_apply").Bool(true)
	z.LogTraceCacheWarnings = b.get("log_trace_cache_warnings").Bool(false)
	z.EnableSanityChecks = b.get("enable_sanity_checks").Bool(false)
	z.SaveMuonMomentumBufferInMem = b.get("save_muon_momentum_buffer_in_memory").Bool(false)
	lm := b.get("leaf_module").Object(pydanticBlock)
	for _, k := range []string{"classes", "names", "name_suffixes"} {
		lm.get(k).Raw()
	}
	lm.finish()
	zf := b.get("zenflow")
	if zf.v != nil && zf.v.Kind != lenient.Null {
		z.ZenFlow = true
		zf.Raw()
		c.s.unsupportedf(zf.v, zf.path, "remove the zenflow block to train with plain ZeRO-Offload (every parameter updated every step)",
			"ZenFlow (stall-free offload) is not supported by dszero: it updates the top-k most important gradient columns on the device each step "+
				"and the rest, accumulated, on the CPU every update_interval steps in parallel with the next steps; dszero's offload has no such split, "+
				"and running the file without it would silently change its numerics")
	}

	c.readOffload(b)
	c.migrateDeprecatedZero(b, g16)
	c.checkZero(b)
}

// migrateDeprecatedZero applies DeepSpeed's deprecated-field rules: a
// deprecated key is migrated with a warning, and giving it together with its
// replacement is an error.
func (c *compiler) migrateDeprecatedZero(b *block, g16 *field) {
	z := &c.plan.Zero
	b.markUsed("cpu_offload", "cpu_offload_param", "cpu_offload_params", "cpu_offload_use_pin_memory", "stage3_gather_fp16_weights_on_model_save")
	together := func(v *lenient.Value, dep, repl string) {
		c.s.errorf(v, joinPath(b.path, dep), "keep only "+quote(repl),
			"cannot give the deprecated %s and its replacement %s together", quote(dep), quote(repl))
	}
	if v, ok := b.lookupQuiet("cpu_offload"); ok {
		on := c.deprecatedBool(b, "cpu_offload", v)
		if c.at("zero_optimization.offload_optimizer") != nil {
			together(v, "cpu_offload", "offload_optimizer")
		} else {
			c.s.warnf(v, "zero_optimization.cpu_offload", `write "offload_optimizer": {"device": "cpu"}`, "cpu_offload is deprecated; use offload_optimizer instead")
			if on {
				z.OffloadOptimizer = defaultOffloadOptimizer()
				z.OffloadOptimizer.Device = OffloadCPU
				c.rec.set(Setting{Path: "zero_optimization.offload_optimizer.device", Value: "cpu", Source: FromMigrated, Written: "cpu_offload", Line: v.Pos.Line, Col: v.Pos.Col})
			}
		}
	}
	for _, key := range []string{"cpu_offload_param", "cpu_offload_params"} {
		v, ok := b.lookupQuiet(key)
		if !ok {
			continue
		}
		on := c.deprecatedBool(b, key, v)
		if c.at("zero_optimization.offload_param") != nil {
			together(v, key, "offload_param")
			continue
		}
		msg := "cpu_offload_param is deprecated; use offload_param instead"
		if key == "cpu_offload_params" {
			msg = "cpu_offload_params (the 2020–21 plural) was renamed cpu_offload_param and DeepSpeed 0.19.5 rejects it; dszero migrates it to offload_param"
		}
		c.s.warnf(v, joinPath(b.path, key), `write "offload_param": {"device": "cpu"}`, "%s", msg)
		if on {
			z.OffloadParam = defaultOffloadParam()
			z.OffloadParam.Device = OffloadCPU
			c.rec.set(Setting{Path: "zero_optimization.offload_param.device", Value: "cpu", Source: FromMigrated, Written: key, Line: v.Pos.Line, Col: v.Pos.Col})
		}
	}
	if v, ok := b.lookupQuiet("cpu_offload_use_pin_memory"); ok {
		c.deprecatedBool(b, "cpu_offload_use_pin_memory", v)
		c.s.warnf(v, "zero_optimization.cpu_offload_use_pin_memory", "set pin_memory inside offload_optimizer / offload_param",
			"cpu_offload_use_pin_memory is deprecated and ignored (DeepSpeed does not migrate it)")
	}
	if v, ok := b.lookupQuiet("stage3_gather_fp16_weights_on_model_save"); ok {
		val := c.deprecatedBool(b, "stage3_gather_fp16_weights_on_model_save", v)
		if g16.v != nil {
			together(v, "stage3_gather_fp16_weights_on_model_save", "gather_16bit_weights_on_model_save")
		} else {
			c.s.warnf(v, "zero_optimization.stage3_gather_fp16_weights_on_model_save", "rename it to stage3_gather_16bit_weights_on_model_save",
				"stage3_gather_fp16_weights_on_model_save is deprecated; use gather_16bit_weights_on_model_save instead")
			z.Gather16BitWeightsOnModelSave = val
			c.rec.set(Setting{Path: "zero_optimization.gather_16bit_weights_on_model_save", Value: val, Source: FromMigrated,
				Written: "stage3_gather_fp16_weights_on_model_save", Line: v.Pos.Line, Col: v.Pos.Col})
		}
	}
}

// deprecatedBool reads a deprecated boolean key with pydantic's coercion.
func (c *compiler) deprecatedBool(b *block, key string, v *lenient.Value) bool {
	f := &field{b: b, name: key, path: joinPath(b.path, key), v: v, written: key, source: FromFile}
	if v.Kind == lenient.Null {
		return false
	}
	if v.Kind == lenient.String && v.Str == "auto" {
		return false
	}
	return f.Bool(false)
}

func defaultOffloadParam() OffloadParam {
	return OffloadParam{Device: OffloadNone, BufferCount: 5, BufferSize: 100000000, MaxInCPU: 1000000000, PinMemory: true}
}

func defaultOffloadOptimizer() OffloadOptimizer {
	return OffloadOptimizer{Device: OffloadNone, BufferCount: 4, PinMemory: true, Ratio: 1.0, CPUAdamCoresPerc: 0.8}
}

func (c *compiler) readOffload(b *block) {
	z := &c.plan.Zero
	z.OffloadParam = defaultOffloadParam()
	z.OffloadOptimizer = defaultOffloadOptimizer()
	devices := []string{"none", "cpu", "nvme"}

	if op := b.get("offload_param").Object(pydanticBlock); op.present() {
		p := &z.OffloadParam
		p.Device = OffloadDevice(op.get("device").Enum("none", devices...))
		p.NVMePath = op.get("nvme_path").String("")
		p.BufferCount = op.get("buffer_count").Int(5, 0)
		p.BufferSize = op.get("buffer_size").Int(100000000, 0)
		p.MaxInCPU = op.get("max_in_cpu").Int(1000000000, 0)
		p.PinMemory = op.get("pin_memory").Bool(true)
		op.finish()
		c.checkNVMePath(op, string(p.Device), p.NVMePath)
	}
	if oo := b.get("offload_optimizer").Object(pydanticBlock); oo.present() {
		o := &z.OffloadOptimizer
		o.Device = OffloadDevice(oo.get("device").Enum("none", devices...))
		o.NVMePath = oo.get("nvme_path").String("")
		o.BufferCount = oo.get("buffer_count").Int(4, 0)
		o.PinMemory = oo.get("pin_memory").Bool(true)
		o.PipelineRead = oo.get("pipeline_read").Bool(false)
		o.PipelineWrite = oo.get("pipeline_write").Bool(false)
		o.FastInit = oo.get("fast_init").Bool(false)
		rf := oo.get("ratio")
		o.Ratio = rf.Float(1.0)
		if o.Ratio < 0 || o.Ratio > 1 {
			rf.errorf("use a fraction between 0 and 1", "ratio must be between 0 and 1, got %g", o.Ratio)
			o.Ratio = 1
		}
		o.SuperOffload = oo.get("super_offload").Bool(false)
		cf := oo.get("cpuadam_cores_perc")
		o.CPUAdamCoresPerc = cf.Float(0.8)
		if o.CPUAdamCoresPerc < 0 || o.CPUAdamCoresPerc > 1 {
			cf.errorf("use a fraction between 0 and 1", "cpuadam_cores_perc must be between 0 and 1, got %g", o.CPUAdamCoresPerc)
		}
		oo.finish()
		c.checkNVMePath(oo, string(o.Device), o.NVMePath)
		if o.SuperOffload {
			c.s.unsupportedf(c.at("zero_optimization.offload_optimizer.super_offload"), "zero_optimization.offload_optimizer.super_offload", "set it to false", "SuperOffload (Superchip offload) is not supported by dszero")
		}
	}
}

func (c *compiler) checkNVMePath(b *block, device, path string) {
	if device == "nvme" && path == "" {
		c.s.errorf(b.v, joinPath(b.path, "nvme_path"), `add "nvme_path": "/local_nvme" (a directory on a fast local disk)`,
			"device is nvme but nvme_path is not set")
	}
}

// checkZero applies the validators of DeepSpeedZeroConfig and the asserts
// of the ZeRO optimizers' constructors that depend on the config alone.
func (c *compiler) checkZero(b *block) {
	z := &c.plan.Zero
	if z.OffloadOptimizer.Ratio < 1 && z.Stage != 3 {
		c.s.errorf(c.at("zero_optimization.offload_optimizer.ratio"), "zero_optimization.offload_optimizer.ratio",
			"use ratio 1.0 or ZeRO stage 3", "partial offloading (ratio %g) is only supported for ZeRO stage 3", z.OffloadOptimizer.Ratio)
	}
	if z.ElasticCheckpoint && z.Stage == 3 {
		c.s.warnf(c.at("zero_optimization.elastic_checkpoint"), "zero_optimization.elastic_checkpoint", "remove it; dszero resumes at any world size without it",
			"ZeRO-3 elastic checkpointing is deprecated and no longer supported")
	}
	if z.OffloadParam.Device != OffloadNone && z.Stage < 3 {
		c.s.warnf(c.at("zero_optimization.offload_param"), "zero_optimization.offload_param", "remove offload_param or use stage 3",
			"offload_param only works with ZeRO stage 3; at stage %d DeepSpeed ignores it", z.Stage)
	}
	if z.OffloadOptimizer.Device != OffloadNone && z.Stage == 0 {
		c.s.warnf(c.at("zero_optimization.offload_optimizer"), "zero_optimization.offload_optimizer", "remove offload_optimizer or use stage ≥ 1",
			"offload_optimizer needs ZeRO stage 1, 2 or 3; at stage 0 DeepSpeed ignores it")
	}
	if z.OffloadOptimizer.Device != OffloadNone && z.Stage > 0 && !z.ContiguousGradients && z.Stage < 3 {
		c.s.infof(c.at("zero_optimization.contiguous_gradients"), "zero_optimization.contiguous_gradients",
			"contiguous_gradients is forced on by optimizer offload")
		z.ContiguousGradients = true
	}
	for _, q := range []struct {
		on   bool
		key  string
		what string
	}{
		{z.QuantizedNontrainableWeights, "zero_quantized_nontrainable_weights", "quantized frozen weights"},
		{z.QuantizedGradients && z.LoCo, "zeropp_loco_param", "LoCo's error-compensated qgZ (DeepSpeed's all_to_all_loco_quant_reduce, newer than 0.14.5)"},
	} {
		if q.on {
			c.s.unsupportedf(c.at("zero_optimization."+q.key), "zero_optimization."+q.key, "set it to false", "%s is not supported by dszero", q.what)
		}
	}
}
