package dsconfig

import (
	"strings"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// topLevelKeys are the top-level keys DeepSpeed 0.19.5 reads. Anything else
// is ignored by DeepSpeed and reported by dszero as a warning.
var topLevelKeys = []string{
	"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
	"managed_gradient_accumulation", "steps_per_print", "dump_state", "disable_allgather",
	"communication_data_type", "seq_parallel_communication_data_type", "prescale_gradients",
	"gradient_predivide_factor", "sparse_gradients", "zero_optimization", "activation_checkpointing",
	"comms_logger", "tensorboard", "wandb", "csv_monitor", "comet", "gradient_clipping", "fp16", "bf16",
	"bfloat16", "amp", "torch_autocast", "compression_training", "graph_harvesting", "optimizer",
	"scheduler", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "flops_profiler",
	"wall_clock_breakdown", "memory_breakdown", "autotuning", "quantize_training", "eigenvalue",
	"use_data_before_expert_parallelism", "hybrid_engine", "sparse_attention", "pipeline",
	"progressive_layer_drop", "curriculum_learning", "data_efficiency", "checkpoint", "data_types",
	"aio", "dataloader_drop_last", "log_level", "nebula", "datastates", "weight_quantization", "compile",
	"timers", "tensor_parallel", "expert_parallel", "elasticity", "sequence_parallel_size", "seq_parallel_comm_data_type",
	"gradient_allreduce_op", "vocabulary_size",
}

// misplacedZeroKeys are zero_optimization keys people put at the top level.
var misplacedZeroKeys = map[string]bool{
	"reduce_scatter": true, "reduce_bucket_size": true, "allgather_bucket_size": true,
	"allgather_partitions": true, "overlap_comm": true, "contiguous_gradients": true, "stage": true,
	"offload_optimizer": true, "offload_param": true, "sub_group_size": true, "cpu_offload": true,
	"stage3_prefetch_bucket_size": true, "stage3_param_persistence_threshold": true,
	"stage3_max_live_parameters": true, "stage3_max_reuse_distance": true,
}

// wrapperKeys are blocks that look like DeepSpeed's but are not read.
var wrapperKeys = map[string]string{
	"monitor_config": "DeepSpeed reads tensorboard, wandb, csv_monitor and comet only at the top level; move them out of monitor_config",
	"comms_config":   "DeepSpeed reads comms_logger only at the top level; move it out of comms_config",
}

func (c *compiler) readTop(top *block) {
	p := &c.plan
	c.readTensorParallel(top)
	p.CommunicationDataType = c.commDType(top, "communication_data_type", "")
	c.commDType(top, "seq_parallel_communication_data_type", "fp32")

	c.readZero(top)
	c.readPrecision(top)

	p.GradientClipping = top.get("gradient_clipping").Float(c.opts.clippingDefault())
	if p.GradientClipping < 0 {
		c.s.errorf(c.at("gradient_clipping"), "gradient_clipping", "use 0 to disable clipping or a positive max norm", "must be ≥ 0, got %g", p.GradientClipping)
	}
	p.PrescaleGradients = top.get("prescale_gradients").Bool(false)
	p.GradientPredivideFactor = top.get("gradient_predivide_factor").Float(1.0)
	if p.GradientPredivideFactor <= 0 {
		c.s.errorf(c.at("gradient_predivide_factor"), "gradient_predivide_factor", "use a positive factor (1.0 is the default)", "must be > 0, got %g", p.GradientPredivideFactor)
	}
	p.GradientAllreduceOp = top.get("gradient_allreduce_op").Enum("mean", "mean", "sum")
	steps := top.get("steps_per_print")
	if steps.v != nil && steps.v.Kind == lenient.Null {
		steps.v = nil
	}
	p.StepsPerPrint = steps.Int(0, 0)
	p.WallClockBreakdown = top.get("wall_clock_breakdown").Bool(false)
	p.MemoryBreakdown = top.get("memory_breakdown").Bool(false)
	p.DumpState = top.get("dump_state").Bool(false)
	if top.get("disable_allgather").Bool(false) {
		c.s.unsupportedf(c.at("disable_allgather"), "disable_allgather", "remove it", "disable_allgather is not supported by dszero")
	}
	if top.get("sparse_gradients").Bool(false) {
		c.s.unsupportedf(c.at("sparse_gradients"), "sparse_gradients", "remove it", "sparse (embedding) gradients are not supported by dszero")
	}
	if !top.get("managed_gradient_accumulation").Bool(true) {
		c.s.unsupportedf(c.at("managed_gradient_accumulation"), "managed_gradient_accumulation", "remove it",
			"managed_gradient_accumulation: false (every step() updates) is not supported by dszero")
	}
	p.ZeroAllowUntestedOptimizer = top.get("zero_allow_untested_optimizer").Bool(false)
	p.ZeroForceDSCPUOptimizer = top.get("zero_force_ds_cpu_optimizer").Bool(true)
	p.DataloaderDropLast = top.get("dataloader_drop_last").Bool(false)
	top.get("graph_harvesting").Bool(false)
	top.get("use_data_before_expert_parallelism").Bool(false)
	top.get("log_level").Raw()
	if vs := top.get("vocabulary_size"); vs.v != nil && vs.v.Kind != lenient.Null {
		if n := vs.Int(0, 0); n%8 != 0 {
			c.s.warnf(vs.v, vs.path, "pad the vocabulary to a multiple of 8", "vocabulary_size %d is not a multiple of 8 (DeepSpeed warns: slower on tensor cores)", n)
		}
	}
	c.readSeqParallel(top) // seqpar.go

	c.readOptimizer(top)
	c.readScheduler(top)
	c.readActivationCheckpointing(top)
	c.readAIO(top)
	c.readCheckpoint(top)
	c.readDataTypes(top)
	c.readMonitors(top)
	c.readFeatureBlocks(top)
	c.readBatch(top)

	// Say what the ignored top-level keys would have done.
	if c.root.Kind == lenient.Object {
		for _, m := range c.root.Members {
			if top.used[m.Key] || contains(topLevelKeys, m.Key) {
				continue
			}
			top.used[m.Key] = true
			c.unknownTopLevel(m)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// at returns the value node of a top-level key (nil when absent).
func (c *compiler) at(path string) *lenient.Value {
	v := c.root
	for _, k := range strings.Split(path, ".") {
		if v == nil || v.Kind != lenient.Object {
			return nil
		}
		nv, ok := v.Get(k)
		if !ok {
			return nil
		}
		v = nv
	}
	return v
}

func (c *compiler) unknownTopLevel(m lenient.Member) {
	switch {
	case m.Key == "bp16" || m.Key == "bfp16" || m.Key == "bf_16":
		c.s.warnf(m.Value, m.Key, `did you mean "bf16"?`, "unknown top-level key %s: DeepSpeed ignores it, so this run is not bf16 (it is %s)", quote(m.Key), c.plan.Precision.DType)
	case misplacedZeroKeys[m.Key]:
		c.s.warnf(m.Value, m.Key, "move it into zero_optimization", "%s belongs inside zero_optimization: at the top level DeepSpeed ignores it and uses the default", quote(m.Key))
	case wrapperKeys[m.Key] != "":
		c.s.warnf(m.Value, m.Key, wrapperKeys[m.Key], "unknown top-level key %s: DeepSpeed ignores it and everything inside it", quote(m.Key))
	case strings.HasPrefix(m.Key, "_") || strings.HasPrefix(m.Key, "//") || strings.EqualFold(m.Key, "comment"):
		c.s.infof(m.Value, m.Key, "key %s ignored (looks like a comment)", quote(m.Key))
	default:
		fix := didYouMean(m.Key, topLevelKeys, "remove it if it is not meant for another tool")
		c.s.warnf(m.Value, m.Key, fix, "unknown top-level key %s: DeepSpeed ignores it", quote(m.Key))
	}
}

// commDType reads communication_data_type: fp16, bf16 or fp32 in any case,
// or null for the model's dtype.
func (c *compiler) commDType(top *block, key, def string) string {
	f := top.get(key)
	if f.v == nil || f.v.Kind == lenient.Null {
		f.record(def)
		return def
	}
	if f.v.Kind == lenient.String {
		switch s := strings.ToLower(f.v.Str); s {
		case "fp16", "bf16", "fp32":
			f.record(s)
			return s
		}
	}
	fix := "use \"fp16\", \"bf16\" or \"fp32\""
	if f.v.Kind == lenient.String {
		if s := suggest(strings.ToLower(f.v.Str), []string{"fp16", "bf16", "fp32"}); s != "" {
			fix = "did you mean " + quote(s) + "?"
		}
	}
	f.errorf(fix, "invalid %s %s: DeepSpeed supports fp16, bf16 and fp32", key, describe(f.v))
	f.record(def)
	return def
}

func (c *compiler) readTensorParallel(top *block) {
	b := top.get("tensor_parallel").Object(pydanticBlock)
	if !b.present() {
		return
	}
	b.get("dtype").Raw()
	size := b.get("autotp_size")
	if size.v != nil && size.v.Kind == lenient.String {
		size.errorf("write a number (0 disables automatic tensor parallelism)",
			"autotp_size is the string %s: deepspeed.initialize compares it with 0 and fails with a TypeError", quoteStr(size.v.Str))
		size.record(int64(0))
	} else if n := size.Int(0, 0); n > 0 {
		c.s.unsupportedf(size.v, size.path, "remove tensor_parallel", "automatic tensor parallelism (autotp_size %d) is not supported by dszero", n)
	}
	b.get("tp_overlap_comm").Bool(false)
	b.get("tensor_parallel", "tp").Raw()
	b.get("injection_policy_tuple").Raw()
	b.get("partition_config").Raw()
	b.get("preset_model").Raw()
	b.get("keep_module_on_host").Bool(false)
	b.get("replace_with_kernel_inject", "kernel_inject").Bool(false)
	b.finish()
}

func (c *compiler) readActivationCheckpointing(top *block) {
	f := top.get("activation_checkpointing")
	b := f.Object(scalarBlock)
	ac := &c.plan.ActivationCheckpointing
	ac.Present = b.present()
	ac.PartitionActivations = b.get("partition_activations").Bool(false)
	nc := b.get("number_checkpoints")
	if nc.v != nil && nc.v.Kind == lenient.Null {
		nc.v = nil
	}
	ac.NumberCheckpoints = nc.Int(0, 0)
	ac.ContiguousMemoryOptimization = b.get("contiguous_memory_optimization").Bool(false)
	ac.SynchronizeCheckpointBoundary = b.get("synchronize_checkpoint_boundary").Bool(false)
	ac.Profile = b.get("profile").Bool(false)
	ac.CPUCheckpointing = b.get("cpu_checkpointing").Bool(false)
	b.finish()
}

func (c *compiler) readAIO(top *block) {
	b := top.get("aio").Object(scalarBlock)
	a := &c.plan.AIO
	a.BlockSize = b.get("block_size").Int(1048576, 1)
	a.QueueDepth = b.get("queue_depth").Int(8, 1)
	a.IntraOpParallelism = b.get("intra_op_parallelism").Int(1, 1)
	a.SingleSubmit = b.get("single_submit").Bool(false)
	a.OverlapEvents = b.get("overlap_events").Bool(true)
	a.UseGDS = b.get("use_gds").Bool(false)
	if v, ok := b.lookupQuiet("thread_count"); ok {
		b.used["thread_count"] = true
		c.s.warnf(v, "aio.thread_count", "rename it to intra_op_parallelism",
			"thread_count was renamed intra_op_parallelism in DeepSpeed 0.16.5; DeepSpeed 0.19.5 ignores it, so %d worker(s) are used", a.IntraOpParallelism)
	}
	if a.UseGDS {
		c.s.unsupportedf(c.at("aio.use_gds"), "aio.use_gds", "set it to false", "GPUDirect Storage is not supported by dszero: it reads NVMe straight into GPU memory through cuFile (DeepSpeed requires a CUDA accelerator for it), and dszero's NVMe offload goes through host memory")
	}
	b.finish()
}

// lookupQuiet finds a key without adding it to the did-you-mean candidates.
func (b *block) lookupQuiet(key string) (*lenient.Value, bool) {
	if b.v == nil {
		return nil, false
	}
	return b.v.Get(key)
}

func (c *compiler) readCheckpoint(top *block) {
	b := top.get("checkpoint").Object(scalarBlock)
	ck := &c.plan.Checkpoint
	tv := b.get("tag_validation")
	ck.TagValidation = "WARN"
	if tv.v != nil && tv.v.Kind == lenient.String {
		switch s := strings.ToUpper(tv.v.Str); s {
		case "WARN", "IGNORE", "FAIL":
			ck.TagValidation = s
		default:
			tv.errorf(`use "Warn", "Ignore" or "Fail"`, "invalid tag_validation value %s", quoteStr(tv.v.Str))
		}
	} else if tv.v != nil {
		tv.errorf(`use "Warn", "Ignore" or "Fail"`, "tag_validation must be a string, got %s", describe(tv.v))
	}
	tv.record(ck.TagValidation)
	ck.LoadUniversal = b.get("load_universal").Bool(false)
	ck.UseNodeLocalStorage = b.get("use_node_local_storage").Bool(false)
	b.get("parallel_write").Raw()
	b.get("checkpoint_serialization").Bool(true)
	b.get("writer").Raw()
	b.finish()
}

func (c *compiler) readDataTypes(top *block) {
	b := top.get("data_types").Object(scalarBlock)
	dt := &c.plan.DataTypes
	for _, key := range []string{"grad_accum_dtype", "param_dtype", "buffer_dtype"} {
		f := b.get(key)
		if f.v == nil || f.v.Kind == lenient.Null {
			f.record(nil)
			continue
		}
		v := f.Enum("", "fp32", "fp16", "bf16")
		if key == "grad_accum_dtype" {
			dt.GradAccumDType = v
		}
	}
	b.finish()
}

func (c *compiler) readMonitors(top *block) {
	m := &c.plan.Monitors
	tb := top.get("tensorboard").Object(pydanticBlock)
	m.TensorBoard = tb.get("enabled").Bool(false)
	m.TensorBoardDir = tb.get("output_path").String("")
	m.JobName = tb.get("job_name").String("DeepSpeedJobName")
	tb.finish()
	wb := top.get("wandb").Object(pydanticBlock)
	m.WandB = wb.get("enabled").Bool(false)
	wb.get("group").String("")
	wb.get("team").String("")
	wb.get("project").String("deepspeed")
	wb.finish()
	csv := top.get("csv_monitor").Object(pydanticBlock)
	m.CSV = csv.get("enabled").Bool(false)
	m.CSVDir = csv.get("output_path").String("")
	m.CSVJobName = csv.get("job_name").String("DeepSpeedJobName")
	csv.finish()
	cm := top.get("comet").Object(pydanticBlock)
	m.Comet = cm.get("enabled").Bool(false)
	cm.get("samples_log_interval").Int(100, -1<<62)
	for _, k := range []string{"project", "workspace", "api_key", "experiment_name", "experiment_key", "mode"} {
		cm.get(k).String("")
	}
	if f := cm.get("online"); f.v != nil && f.v.Kind != lenient.Null {
		f.Bool(false)
	}
	cm.finish()
	for _, mon := range []struct {
		on   bool
		path string
		name string
	}{{m.WandB, "wandb.enabled", "the Weights & Biases monitor"}, {m.Comet, "comet.enabled", "the Comet monitor"}} {
		if mon.on {
			c.s.unsupportedf(c.at(mon.path), mon.path, "set it to false and use tensorboard or csv_monitor (same curves, local files)",
				"%s is not supported by dszero: it logs through its Python client to its service, and its offline format is private to that client", mon.name)
		}
	}
}
