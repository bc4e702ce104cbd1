package fsdpconfig

import (
	"fmt"
	"strings"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// The Accelerate dialect follows accelerate HEAD 16cb6eb8 (after v1.14.0):
// commands/config/config_args.py reads the file into ClusterConfig,
// commands/launch.py copies fsdp_config onto its arguments (prefixing keys
// that lack "fsdp") and utils/launch.py exports them as FSDP_* variables,
// which FullyShardedDataParallelPlugin.__post_init__ parses. So a value
// goes through Python's str() (True → "True") before the plugin sees it,
// and launch's argument defaults, not the plugin's, fill absent keys.

// clusterKeys are ClusterConfig's fields; any other top-level key makes
// accelerate fail ("had unknown keys"). fp16 and dynamo_backend are old
// keys that process_config converts.
var clusterKeys = []string{"compute_environment", "distributed_type", "mixed_precision", "use_cpu", "debug",
	"num_processes", "machine_rank", "num_machines", "gpu_ids", "main_process_ip", "main_process_port",
	"rdzv_backend", "same_network", "main_training_function", "enable_cpu_affinity", "fp8_config",
	"deepspeed_config", "fsdp_config", "parallelism_config", "megatron_lm_config", "mpirun_config",
	"downcast_bf16", "tpu_name", "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "command_file", "commands",
	"tpu_vm", "tpu_env", "dynamo_config", "fp16", "dynamo_backend"}

var distributedTypes = []string{"NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA",
	"MULTI_XPU", "DEEPSPEED", "FSDP", "XLA", "MEGATRON_LM", "MULTI_HPU", "MULTI_NEURON"}

// launchKeys are the fsdp_config keys accelerate launch has arguments for
// (fsdp_ignored_modules is read with getattr); any other key is copied
// onto the arguments and never read.
var launchKeys = []string{"fsdp_version", "fsdp_sharding_strategy", "fsdp_reshard_after_forward", "fsdp_offload_params",
	"fsdp_auto_wrap_policy", "fsdp_transformer_layer_cls_to_wrap", "fsdp_min_num_params", "fsdp_backward_prefetch",
	"fsdp_state_dict_type", "fsdp_forward_prefetch", "fsdp_use_orig_params", "fsdp_cpu_ram_efficient_loading",
	"fsdp_sync_module_states", "fsdp_activation_checkpointing", "fsdp_ignored_modules"}

// oldPrefetchKey is the spelling `accelerate config` wrote before v0.26;
// accelerate 1.0 stopped reading it.
const oldPrefetchKey = "fsdp_backward_prefetch_policy"

var parallelismKeys = []string{"parallelism_config_dp_replicate_size", "parallelism_config_dp_shard_size",
	"parallelism_config_tp_size", "parallelism_config_cp_size", "parallelism_config_sp_size",
	"parallelism_config_cp_backend", "parallelism_config_cp_comm_strategy", "parallelism_config_sp_backend",
	"parallelism_config_sp_seq_length"}

func (r *reader) readAccelerate(root *node) {
	top := map[string]field{}
	for _, m := range root.keys {
		if !contains(clusterKeys, m.key) {
			r.s.errorf(m.keyPos, m.key, didYouMean(m.key, clusterKeys, "remove it: accelerate launch refuses the whole file"),
				"unknown top-level key %q: accelerate's ClusterConfig refuses files with unknown keys", m.key)
			continue
		}
		top[m.key] = field{n: m.val, written: m.key, pos: m.keyPos, src: FromFile}
	}
	if r.s.diags.HasErrors() {
		return
	}
	r.readEnvironment(root, top)
	if r.s.diags.HasErrors() {
		return
	}
	fc := r.fsdpBlock(root, top["fsdp_config"])
	r.plan.Version = r.accVersion(fc["fsdp_version"])
	if r.plan.Version == 0 {
		return
	}
	r.accStrategy(fc)
	r.accWrap(fc)
	r.accRest(fc)
	r.readParallelism(top["parallelism_config"])
	r.readProcesses(top)
}

// readEnvironment checks compute_environment, distributed_type and the
// precision.
func (r *reader) readEnvironment(root *node, top map[string]field) {
	if f := top["compute_environment"]; f.ok() {
		switch v := f.n.pyStr(); v {
		case "LOCAL_MACHINE":
		case "AMAZON_SAGEMAKER":
			r.s.errorf(f.n.pos, f.written, "use compute_environment: LOCAL_MACHINE", "an Amazon SageMaker config: accelerate launches it on SageMaker, and dszero runs on this machine")
		default:
			r.s.errorf(f.n.pos, f.written, didYouMean(v, []string{"LOCAL_MACHINE", "AMAZON_SAGEMAKER"}, `write "LOCAL_MACHINE"`),
				"%s is not a valid ComputeEnvironment", f.n.describe())
		}
	}
	f := top["distributed_type"]
	if !f.ok() {
		r.s.errorf(root.pos, "distributed_type", "add `distributed_type: FSDP`",
			"no distributed_type: accelerate refuses the file (A `distributed_type` must be specified in the config file.)")
		return
	}
	switch v := f.n.pyStr(); {
	case v == "FSDP":
	case v == "DEEPSPEED":
		r.s.errorf(f.n.pos, f.written, "give dszero its deepspeed_config as a ds_config (--deepspeed), or set distributed_type: FSDP",
			"distributed_type is DEEPSPEED: this is an accelerate DeepSpeed config, not an FSDP one")
	case contains(distributedTypes, v):
		r.s.errorf(f.n.pos, f.written, "set distributed_type: FSDP and add an fsdp_config block",
			"distributed_type is %s, so accelerate launch would not use FSDP", v)
	default:
		r.s.errorf(f.n.pos, f.written, didYouMean(v, distributedTypes, `write "FSDP"`), "%s is not a valid DistributedType", f.n.describe())
	}
	if ds := top["deepspeed_config"]; ds.ok() && ds.n.truthy() {
		r.s.warnf(ds.pos, ds.written, "remove the deepspeed_config block", "ignored: accelerate reads deepspeed_config only with distributed_type: DEEPSPEED")
	}
	r.accPrecision(top)
}

// accPrecision reads mixed_precision (or the old fp16: true).
func (r *reader) accPrecision(top map[string]field) {
	f := top["mixed_precision"]
	if !f.ok() {
		mp, note := "no", "absent: accelerate launch uses 'no'"
		if old := top["fp16"]; old.ok() && old.n.truthy() {
			mp, note = "fp16", "from the old key fp16: true (accelerate's process_config converts it)"
			old.src = FromOldSpelling
			r.s.warnf(old.pos, old.written, "write `mixed_precision: fp16`", "old key fp16: true, read as mixed_precision: fp16")
			r.plan.MixedPrecision = mp
			r.record("mixed_precision", mp, old, FromOldSpelling, note)
			return
		}
		r.plan.MixedPrecision = mp
		r.record("mixed_precision", mp, field{}, FromLaunchDefault, note)
		return
	}
	switch {
	case f.n.kind == kNull:
		r.plan.MixedPrecision = "no"
	case f.n.kind == kBool && !f.n.b:
		r.s.errorf(f.n.pos, f.written, "quote it: mixed_precision: 'no'",
			"unquoted %s is YAML's boolean false, and accelerate launch fails on it (it calls .lower() on the value)", f.n.text)
		return
	case f.n.kind != kStr:
		r.s.errorf(f.n.pos, f.written, "write 'no', 'fp16' or 'bf16'", "mixed_precision is %s; accelerate wants a string", f.n.describe())
		return
	default:
		mp := strings.ToLower(f.n.s)
		switch mp {
		case "no", "fp16", "bf16", "fp8":
			r.plan.MixedPrecision = mp
		default:
			r.s.errorf(f.n.pos, f.written, enumFix(f.n.s, []string{"no", "fp16", "bf16", "fp8"}),
				"Unknown mixed_precision mode: %s. Choose between ['no', 'fp8', 'fp16', 'bf16']", mp)
			return
		}
	}
	r.record("mixed_precision", r.plan.MixedPrecision, f, FromFile, "")
}

// fsdpBlock collects fsdp_config under the names accelerate launch gives
// its keys.
func (r *reader) fsdpBlock(root *node, f field) map[string]field {
	out := map[string]field{}
	r.blockPos = root.pos
	if f.ok() {
		r.blockPos = f.pos
	}
	if !f.ok() || f.n.kind == kNull {
		r.s.infof(root.pos, "fsdp_config", "no fsdp_config block: every FSDP setting is accelerate launch's default")
		return out
	}
	if f.n.kind != kMap {
		r.s.errorf(f.n.pos, f.written, "write the settings as `key: value` lines under fsdp_config", "fsdp_config is %s, not a mapping", f.n.describe())
		return out
	}
	for _, m := range f.n.keys {
		name, src := m.key, FromFile
		written := pathOf("fsdp_config", m.key)
		if !strings.HasPrefix(name, "fsdp") {
			name, src = "fsdp_"+name, FromOldSpelling
		}
		if name == oldPrefetchKey {
			src = FromOldSpelling
		}
		if prev, dup := out[name]; dup {
			r.s.warnf(m.keyPos, written, "keep one of them",
				"%s and %s (line %d) are the same setting for accelerate launch; the later one wins", written, prev.written, prev.pos.Line)
		}
		if !contains(launchKeys, name) && name != oldPrefetchKey {
			r.unknownFSDPKey(m, written)
			continue
		}
		if src == FromOldSpelling && name != oldPrefetchKey {
			r.s.warnf(m.keyPos, written, fmt.Sprintf("write %s", name),
				"old spelling without the fsdp_ prefix (accelerate ≤ 0.12); accelerate launch still reads it as %s", name)
		}
		out[name] = field{n: m.val, written: written, pos: m.keyPos, src: src}
	}
	return out
}

// unknownFSDPKey reports a key accelerate copies onto its arguments and
// never reads, with what ignoring it means.
func (r *reader) unknownFSDPKey(m member, written string) {
	name := m.key
	if !strings.HasPrefix(name, "fsdp") {
		name = "fsdp_" + name
	}
	switch name {
	case "fsdp_limit_all_gathers":
		r.s.warnf(m.keyPos, written, "remove it (the Trainer's fsdp_config reads limit_all_gathers)",
			"ignored: accelerate launch has no fsdp_limit_all_gathers; the plugin keeps limit_all_gathers: true")
		return
	case "fsdp_device_mesh_shape", "fsdp_device_mesh_dim_names":
		r.s.warnf(m.keyPos, written, "for hybrid sharding under FSDP2 write parallelism_config (parallelism_config_dp_replicate_size, parallelism_config_dp_shard_size)",
			"ignored: accelerate has no %s; its device mesh comes from parallelism_config", name)
		return
	}
	fix := didYouMean(name, append(launchKeys, oldPrefetchKey), "remove it")
	consequence := ""
	if s := suggest(name, launchKeys); s == "fsdp_transformer_layer_cls_to_wrap" {
		consequence = "; so TRANSFORMER_BASED_WRAP wraps the model's _no_split_modules instead"
	}
	r.s.warnf(m.keyPos, written, fix, "ignored: accelerate launch has no setting %s%s", name, consequence)
}

// accVersion reads fsdp_version: int(str(value)), 1 or 2.
func (r *reader) accVersion(f field) int {
	if !f.ok() {
		r.record("fsdp_version", 1, f, FromLaunchDefault, "absent: accelerate launch exports FSDP_VERSION=1 (FSDP1)")
		return 1
	}
	v, ok := pyInt(f.n.pyStr())
	if !ok || (v != 1 && v != 2) {
		r.s.errorf(f.n.pos, f.written, "write 1 (FullyShardedDataParallel) or 2 (fully_shard)", "fsdp_version is %s; accelerate knows FSDP 1 and 2", f.n.describe())
		return 0
	}
	r.record("fsdp_version", int(v), f, FromFile, "")
	return int(v)
}

// accStrategy decides the sharding strategy: FSDP1 from
// fsdp_sharding_strategy (or, as `accelerate config` writes it,
// fsdp_reshard_after_forward), FSDP2 from the boolean
// fsdp_reshard_after_forward.
func (r *reader) accStrategy(fc map[string]field) {
	ss, ra := fc["fsdp_sharding_strategy"], fc["fsdp_reshard_after_forward"]
	if r.plan.Version == 2 {
		r.plan.Strategy = FullShard
		keep := false
		if ra.ok() {
			b, ok := strToBool(strings.ToLower(ra.n.pyStr()))
			if !ok {
				fix := "write true (reshard after forward, FULL_SHARD) or false (keep until backward, SHARD_GRAD_OP)"
				if st, msg := parseStrategy(ra.n.pyStr()); msg == "" {
					fix = fmt.Sprintf("FSDP2 takes a boolean: %s is %v", st, !(st == ShardGradOp || st == HybridShardZero2 || st == NoShard))
				}
				r.s.errorf(ra.n.pos, ra.written, fix, "invalid truth value %s: under FSDP2 fsdp_reshard_after_forward is a boolean", ra.n.describe())
				return
			}
			keep = !b
			r.record("reshard_after_forward", b, ra, FromFile, "")
		} else {
			r.record("reshard_after_forward", true, ra, FromLaunchDefault, "absent: accelerate launch exports FSDP_RESHARD_AFTER_FORWARD=true")
		}
		if keep {
			r.plan.Strategy = ShardGradOp
		}
		if ss.ok() {
			st, _ := parseStrategy(ss.n.pyStr())
			fix := "remove fsdp_sharding_strategy"
			if st.Hybrid() {
				fix = "for hybrid sharding under FSDP2 use parallelism_config (parallelism_config_dp_replicate_size × parallelism_config_dp_shard_size)"
			}
			r.s.warnf(ss.pos, ss.written, fix, "ignored: FSDP2 does not read fsdp_sharding_strategy (%s); fsdp_reshard_after_forward %v decides, so this runs %s across all processes",
				ss.n.pyStr(), !keep, r.plan.Strategy)
		}
		return
	}
	// FSDP1.
	if ra.ok() && ra.n.kind == kBool {
		r.s.warnf(ra.n.pos, ra.written, "set fsdp_version: 2 if you meant FSDP2, or write fsdp_sharding_strategy",
			"ignored: under FSDP1 fsdp_reshard_after_forward takes a strategy name; a boolean is FSDP2's form (accelerate launch ignores it here, the plugin refuses it)")
		ra = field{}
	}
	switch {
	case ss.ok():
		st, ok := enum(r, ss, parseStrategy, strategyNames[1:])
		if !ok {
			return
		}
		r.plan.Strategy = st
		r.record("sharding_strategy", st.String(), ss, FromFile, "")
		if ra.ok() {
			if st2, msg := parseStrategy(ra.n.pyStr()); msg == "" && st2 != st {
				r.s.warnf(ra.pos, ra.written, "keep one of them", "ignored: fsdp_sharding_strategy %s wins over fsdp_reshard_after_forward %s under FSDP1", st, st2)
			}
		}
	case ra.ok():
		st, ok := enum(r, ra, parseStrategy, strategyNames[1:])
		if !ok {
			return
		}
		r.plan.Strategy = st
		r.record("sharding_strategy", st.String(), ra, FromFile, "from fsdp_reshard_after_forward, where `accelerate config` writes FSDP1's strategy")
		if st != FullShard {
			r.s.warnf(ra.pos, ra.written, fmt.Sprintf("add `fsdp_sharding_strategy: %s`", st),
				"accelerate launch ignores fsdp_reshard_after_forward under FSDP1 and runs its --fsdp_sharding_strategy default FULL_SHARD; dszero runs %s, as the key says", st)
		}
	default:
		r.plan.Strategy = FullShard
		r.record("sharding_strategy", FullShard.String(), ss, FromLaunchDefault, "absent: accelerate launch exports FSDP_SHARDING_STRATEGY=FULL_SHARD")
	}
}

// accWrap reads the auto wrap policy and its parameter.
func (r *reader) accWrap(fc map[string]field) {
	wf, cf, mf := fc["fsdp_auto_wrap_policy"], fc["fsdp_transformer_layer_cls_to_wrap"], fc["fsdp_min_num_params"]
	r.plan.Wrap = NoWrap
	if wf.ok() && wf.n.kind != kNull {
		w, ok := enum(r, wf, parseWrap, wrapOrder)
		if !ok {
			return
		}
		r.plan.Wrap = w
		r.record("auto_wrap_policy", w.String(), wf, FromFile, "")
	} else {
		r.record("auto_wrap_policy", NoWrap.String(), field{}, FromPluginDefault, "absent: the plugin defaults to NO_WRAP")
	}
	switch r.plan.Wrap {
	case TransformerWrap:
		if cf.ok() && cf.n.kind != kNull {
			if cf.n.kind == kSeq {
				r.s.errorf(cf.n.pos, cf.written, "write the names comma-separated in one string: LlamaDecoderLayer,LlamaMLP",
					"a YAML list: accelerate launch passes str(list) = %s and finds no such class", cf.n.pyStr())
				return
			}
			r.wrapClasses(splitClasses(cf.n.pyStr()), cf)
		} else {
			r.defaultClasses()
		}
		if mf.ok() {
			r.s.warnf(mf.pos, mf.written, "remove it", "ignored: fsdp_min_num_params applies to SIZE_BASED_WRAP, not TRANSFORMER_BASED_WRAP")
		}
	case SizeWrap:
		n := int64(1e8)
		if mf.ok() {
			v, ok := pyInt(mf.n.pyStr())
			if !ok {
				fix := "write a whole number: 100000000"
				if mf.n.kind == kStr || mf.n.kind == kFloat {
					fix = "write the digits (100000000): YAML reads 1e8 as a string and 1.0e+8 as a float, and int() refuses both"
				}
				r.s.errorf(mf.n.pos, mf.written, fix, "fsdp_min_num_params is %s; the plugin needs an integer (int(%q) fails)", mf.n.describe(), mf.n.pyStr())
				return
			}
			n = v
			r.record("min_num_params", n, mf, FromFile, "")
		} else {
			r.record("min_num_params", n, mf, FromLaunchDefault, "absent: accelerate launch exports FSDP_MIN_NUM_PARAMS=100000000")
		}
		if n <= 0 {
			r.s.warnf(mf.pos, mf.written, "write a positive min_num_params, e.g. 100000000",
				"SIZE_BASED_WRAP with min_num_params %d: the plugin silently drops the policy, so the whole model is one unit", n)
			r.plan.Wrap = NoWrap
		}
		r.plan.MinNumParams = int(n)
		if cf.ok() && cf.n.kind != kNull {
			r.s.warnf(cf.pos, cf.written, "remove it", "ignored: fsdp_transformer_layer_cls_to_wrap applies to TRANSFORMER_BASED_WRAP, not SIZE_BASED_WRAP")
		}
	case NoWrap:
		for _, f := range []field{cf, mf} {
			if f.ok() && f.n.kind != kNull {
				r.s.warnf(f.pos, f.written, "set fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP", "ignored under NO_WRAP")
			}
		}
	}
}

// accRest reads offload, prefetch, state dict, loading and checkpointing.
func (r *reader) accRest(fc map[string]field) {
	v2 := r.plan.Version == 2
	r.plan.Offload = r.envBool(fc["fsdp_offload_params"], "offload_params", false, "FSDP_OFFLOAD_PARAMS=false", true)
	r.plan.ActivationCkpt = r.envBool(fc["fsdp_activation_checkpointing"], "activation_checkpointing", false, "FSDP_ACTIVATION_CHECKPOINTING=false", true)
	r.plan.LimitAllGathers = true
	r.record("limit_all_gathers", true, field{}, FromPluginDefault, "the plugin's default; accelerate launch has no key for it")

	bp, old := fc["fsdp_backward_prefetch"], fc[oldPrefetchKey]
	switch {
	case bp.ok() && old.ok():
		if !strings.EqualFold(bp.n.pyStr(), old.n.pyStr()) {
			r.s.warnf(old.pos, old.written, "remove "+oldPrefetchKey, "ignored: %s differs from fsdp_backward_prefetch, which wins", oldPrefetchKey)
		}
	case old.ok():
		r.s.warnf(old.pos, old.written, "rename it to fsdp_backward_prefetch",
			"old spelling %s (accelerate < 0.26): accelerate ≥ 1.0 ignores it and runs NO_PREFETCH; dszero reads it as fsdp_backward_prefetch, as older accelerate did", oldPrefetchKey)
		bp = old
	}
	r.backwardPrefetch(bp, FromPluginDefault, "absent: the plugin's None (NO_PREFETCH)")

	sd := fc["fsdp_state_dict_type"]
	r.stateDict(sd)

	cpu, sync := fc["fsdp_cpu_ram_efficient_loading"], fc["fsdp_sync_module_states"]
	cpuTruthy, syncTruthy := !cpu.ok() || cpu.n.truthy(), !sync.ok() || sync.n.truthy()
	if cpuTruthy && !syncTruthy {
		at := sync
		r.s.errorf(at.n.pos, at.written, "set fsdp_sync_module_states: true: rank 0 reads the weights and broadcasts them, so without the broadcast the other ranks would start from empty weights",
			"accelerate launch refuses fsdp_cpu_ram_efficient_loading (%s) with fsdp_sync_module_states false (When using `--fsdp_cpu_ram_efficient_loading` set `--fsdp_sync_module_states` to `True`)",
			map[bool]string{true: "true", false: "the launch default true"}[cpu.ok()])
		return
	}
	r.plan.CPURAMEfficient = r.envBool(cpu, "cpu_ram_efficient_loading", true, "FSDP_CPU_RAM_EFFICIENT_LOADING=true (the plugin alone defaults to false)", true)
	if v2 {
		r.plan.SyncModuleStates = r.plan.CPURAMEfficient
		r.obsoleteV2(sync, "sync_module_states", "FSDP2 broadcasts rank 0's weights itself when cpu_ram_efficient_loading is on")
		r.obsoleteV2(fc["fsdp_use_orig_params"], "use_orig_params", "FSDP2 always keeps the original parameters")
		r.plan.UseOrigParams = true
		if f := fc["fsdp_forward_prefetch"]; f.ok() {
			r.s.warnf(f.pos, f.written, "remove it", "ignored: FSDP2 has no forward prefetch switch (accelerate does not read fsdp_forward_prefetch under FSDP2; the plugin refuses it)")
		}
	} else {
		r.plan.SyncModuleStates = r.envBool(sync, "sync_module_states", true, "FSDP_SYNC_MODULE_STATES=true", true)
		if r.plan.CPURAMEfficient && !r.plan.SyncModuleStates {
			r.s.warnf(sync.pos, sync.written, "set fsdp_sync_module_states: true", "the plugin turns sync_module_states on, since cpu_ram_efficient_loading needs rank 0's weights broadcast")
			r.plan.SyncModuleStates = true
		}
		r.plan.UseOrigParams = r.envBool(fc["fsdp_use_orig_params"], "use_orig_params", true, "FSDP_USE_ORIG_PARAMS=true", true)
		r.plan.ForwardPrefetch = r.envBool(fc["fsdp_forward_prefetch"], "forward_prefetch", false, "FSDP_FORWARD_PREFETCH=false", true)
	}
	if f := fc["fsdp_ignored_modules"]; f.ok() && f.n.kind != kNull {
		r.plan.IgnoredModules = f.n.pyStr()
		r.record("ignored_modules", r.plan.IgnoredModules, f, FromFile, "")
	}
}

// envBool reads a boolean the way the plugin reads its FSDP_* variable:
// str_to_bool(str(value).lower()); def is accelerate launch's default.
func (r *reader) envBool(f field, name string, def bool, defNote string, launch bool) bool {
	if !f.ok() {
		src := FromLaunchDefault
		note := "absent: accelerate launch exports " + defNote
		if !launch {
			src, note = FromPluginDefault, "absent: "+defNote
		}
		r.record(name, def, f, src, note)
		return def
	}
	b, ok := strToBool(strings.ToLower(f.n.pyStr()))
	if !ok {
		r.s.errorf(f.n.pos, f.written, "write true or false", "invalid truth value %s for %s", f.n.describe(), name)
		return def
	}
	r.record(name, b, f, f.src, "")
	return b
}

// obsoleteV2 reports an FSDP1-only key under FSDP2.
func (r *reader) obsoleteV2(f field, name, why string) {
	if f.ok() {
		r.s.infof(f.pos, f.written, "not read under FSDP2: %s is obsolete (%s)", name, why)
	}
}

// backwardPrefetch parses a backward prefetch policy (FSDP1; ignored with
// a warning under FSDP2).
func (r *reader) backwardPrefetch(f field, def Source, note string) {
	if !f.ok() || f.n.kind == kNull {
		r.record("backward_prefetch", NoPrefetch.String(), field{}, def, note)
		return
	}
	p, ok := enum(r, f, parsePrefetch, prefetchNames[:])
	if !ok {
		return
	}
	if r.plan.Version == 2 {
		if p != NoPrefetch {
			r.s.warnf(f.pos, f.written, "remove it", "ignored: FSDP2 has no backward prefetch policy (it prefetches by the recorded order); accelerate sets it to None")
		}
		r.record("backward_prefetch", NoPrefetch.String(), field{}, FromPluginDefault, "FSDP2: none")
		return
	}
	r.plan.BackwardPrefetch = p
	r.record("backward_prefetch", p.String(), f, f.src, "")
}

// stateDict parses fsdp_state_dict_type, defaulting by version.
func (r *reader) stateDict(f field) {
	def, note := FullStateDict, "absent: the plugin's FSDP1 default"
	if r.plan.Version == 2 {
		def, note = ShardedStateDict, "absent: the plugin's FSDP2 default"
	}
	if !f.ok() || f.n.kind == kNull {
		r.plan.StateDict = def
		r.record("state_dict_type", def.String(), field{}, FromPluginDefault, note)
		return
	}
	sd, ok := enum(r, f, parseStateDict, stateDictNames[1:])
	if !ok {
		return
	}
	if sd == LocalStateDict && r.plan.Version == 2 {
		r.s.errorf(f.n.pos, f.written, "set it to SHARDED_STATE_DICT or FULL_STATE_DICT", "FSDP2 does not support LOCAL_STATE_DICT")
		return
	}
	r.plan.StateDict = sd
	r.record("state_dict_type", sd.String(), f, f.src, "")
}

// readParallelism reads FSDP2's parallelism_config (dp_replicate ×
// dp_shard is hybrid sharding; tp/cp/sp are other parallelisms).
func (r *reader) readParallelism(f field) {
	r.plan.TensorParallel, r.plan.ContextParallel = 1, 1
	if !f.ok() || !f.n.truthy() {
		return
	}
	if f.n.kind != kMap {
		r.s.errorf(f.n.pos, f.written, "write parallelism_config_* keys under it", "parallelism_config is %s, not a mapping", f.n.describe())
		return
	}
	if r.plan.Version != 2 {
		r.s.errorf(f.pos, f.written, "set fsdp_version: 2", "parallelism_config needs FSDP2 (accelerate: You cannot use `--use_parallelism_config` without `--use_fsdp` and `--fsdp_version=2`)")
		return
	}
	size := map[string]int{"dp_replicate": 1, "dp_shard": 1, "tp": 1, "cp": 1, "sp": 1}
	for _, m := range f.n.keys {
		w := pathOf(f.written, m.key)
		if !contains(parallelismKeys, m.key) {
			r.s.warnf(m.keyPos, w, didYouMean("parallelism_config_"+m.key, parallelismKeys, "remove it"), "ignored: accelerate launch has no setting %s", m.key)
			continue
		}
		k := strings.TrimSuffix(strings.TrimPrefix(m.key, "parallelism_config_"), "_size")
		if _, sized := size[k]; !sized {
			continue
		}
		v, ok := pyInt(m.val.pyStr())
		if !ok || v < 1 {
			r.s.errorf(m.val.pos, w, "write a whole number ≥ 1", "%s must be at least 1, but got %s", strings.TrimPrefix(m.key, "parallelism_config_"), m.val.describe())
			return
		}
		size[k] = int(v)
		r.record("parallelism."+k+"_size", int(v), field{n: m.val, written: w, pos: m.keyPos, src: FromFile}, FromFile, "")
	}
	if (size["tp"] > 1 || size["cp"] > 1) && size["dp_replicate"] > 1 && size["dp_shard"] == 1 {
		r.s.errorf(f.pos, f.written, "set dp_shard_size > 1 (HSDP + TP/CP) or dp_replicate_size 1",
			"Tensor/Context parallelism (tp/cp_size > 1) cannot be used with pure data parallelism (dp_replicate_size > 1 and dp_shard_size == 1)")
		return
	}
	if size["cp"] > 1 && size["sp"] > 1 {
		r.s.errorf(f.pos, f.written, "set either cp_size=1 or sp_size=1", "context parallelism and sequence parallelism together")
		return
	}
	r.plan.TensorParallel, r.plan.ContextParallel = size["tp"], size["cp"]*size["sp"]
	if size["dp_replicate"] > 1 {
		r.plan.ShardGroupSize = size["dp_shard"]
		if size["dp_shard"] == 1 {
			r.plan.Strategy = NoShard
		} else if r.plan.Strategy == ShardGradOp {
			r.plan.Strategy = HybridShardZero2
		} else {
			r.plan.Strategy = HybridShard
		}
		r.record("sharding_strategy", r.plan.Strategy.String(), field{}, FromDerived, "from parallelism_config: dp_replicate_size × dp_shard_size")
	}
}

// readProcesses reads num_processes, num_machines and machine_rank.
func (r *reader) readProcesses(top map[string]field) {
	intKey := func(name string, def int) (int, field, bool) {
		f := top[name]
		if !f.ok() || f.n.kind == kNull {
			return def, f, true
		}
		if f.n.kind != kInt {
			r.s.errorf(f.n.pos, f.written, "write a whole number", "%s is %s; accelerate launch needs an integer", name, f.n.describe())
			return def, f, false
		}
		v, ok := pyInt(f.n.pyStr())
		if !ok {
			r.s.errorf(f.n.pos, f.written, "write a smaller number", "%s %s is out of range", name, f.n.pyStr())
			return def, f, false
		}
		return int(v), f, true
	}
	np, npf, ok1 := intKey("num_processes", -1)
	nm, nmf, ok2 := intKey("num_machines", 1)
	mr, mrf, ok3 := intKey("machine_rank", 0)
	if !ok1 || !ok2 || !ok3 {
		return
	}
	if o := r.opts.NumMachines; o > 0 {
		nm, nmf = o, field{}
		r.record("num_machines", nm, field{}, FromOption, "from the command line")
	} else {
		r.record("num_machines", nm, nmf, FromLaunchDefault, "absent: 1")
	}
	if nm < 1 {
		r.s.errorf(nmf.n.pos, nmf.written, "write 1 or more", "num_machines is %d", nm)
		return
	}
	switch {
	case r.opts.NumProcesses > 0:
		if npf.ok() && np != r.opts.NumProcesses {
			r.s.infof(npf.pos, npf.written, "num_processes %d in the file; the command line's %d applies", np, r.opts.NumProcesses)
		}
		np = r.opts.NumProcesses
		r.record("num_processes", np, field{}, FromOption, "from the command line")
	case np == -1:
		np = 1
		r.s.warnf(lenient.Pos{}, "num_processes", "write num_processes, or pass dszero --nproc N",
			"no num_processes: accelerate launch refuses this file unless --num_processes is given; dszero runs 1 process")
		r.record("num_processes", np, field{}, FromAssumed, "absent: 1 (accelerate launch needs --num_processes)")
	case np < 1:
		r.s.errorf(npf.n.pos, npf.written, "write the number of processes in all", "num_processes is %d", np)
		return
	default:
		r.record("num_processes", np, npf, FromFile, "")
	}
	if np%nm != 0 {
		r.s.errorf(npf.pos, "num_processes", fmt.Sprintf("make num_processes a multiple of num_machines (%d per machine: %d)", np/nm+1, (np/nm+1)*nm),
			"num_processes %d is not a multiple of num_machines %d: accelerate launch would start %d per machine, %d in all", np, nm, np/nm, np/nm*nm)
		return
	}
	if mr < 0 || mr >= nm {
		r.s.errorf(mrf.n.pos, mrf.written, fmt.Sprintf("write 0 to %d", nm-1), "machine_rank %d is outside 0..num_machines-1", mr)
		return
	}
	r.plan.NumProcesses, r.plan.NumMachines, r.plan.MachineRank = np, nm, mr
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
