package fsdpconfig

import (
	"fmt"
	"strings"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// The Trainer dialect follows transformers' training_args.py at 00349ae8
// (_process_fsdp_args builds the FSDP plugin's arguments from --fsdp and
// fsdp_config) and Trainer.create_accelerator_and_postprocess (which reads
// limit_all_gathers and activation_checkpointing from fsdp_config as they
// are, so the string "False" is true). Keys written with a leading fsdp_
// lose it. The FSDP2 docs page of transformers adds cpu_offload,
// auto_wrap_policy and state_dict_type, which dszero reads as well.

// fsdpOptions are FSDPOption's values, in the order the docs list them.
var fsdpOptions = []string{"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2", "offload", "auto_wrap"}

// trainerKeys are the fsdp_config keys the Trainer (and its FSDP2 docs) read.
var trainerKeys = []string{"version", "min_num_params", "transformer_layer_cls_to_wrap", "backward_prefetch",
	"forward_prefetch", "reshard_after_forward", "use_orig_params", "sync_module_states", "cpu_ram_efficient_loading",
	"activation_checkpointing", "limit_all_gathers", "xla", "xla_fsdp_v2", "xla_fsdp_grad_ckpt", "xla_fsdp_settings",
	"cpu_offload", "auto_wrap_policy", "state_dict_type"}

// acceleratorOnly are accelerate-config keys people put in a Trainer
// fsdp_config; the Trainer does not read them.
var acceleratorOnly = map[string]string{
	"sharding_strategy":        "the Trainer takes the strategy from --fsdp (full_shard, shard_grad_op, ...)",
	"offload_params":           "the Trainer offloads only with --fsdp offload (or cpu_offload)",
	"backward_prefetch_policy": "old spelling of backward_prefetch; the Trainer runs NO_PREFETCH",
	"ignored_modules":          "the Trainer has no ignored_modules",
}

func (r *reader) readTrainer(root *node) {
	cfg := root
	if fc, ok := root.get("fsdp_config"); ok {
		if fc.kind != kMap {
			r.s.errorf(fc.pos, "fsdp_config", "write the settings as a JSON object", "fsdp_config is %s, not an object", fc.describe())
			return
		}
		cfg = fc
		r.trainingArgs(root)
	}
	r.blockPos = cfg.pos
	opts, ok := r.trainerOptions(root)
	if !ok {
		return
	}
	keys := r.trainerKeys(cfg, cfg != root)
	r.trainerVersion(keys["version"])
	if r.plan.Version == 0 {
		return
	}
	r.trainerStrategy(opts, keys)
	r.trainerWrap(opts, keys)
	r.trainerRest(opts, keys)
	r.plan.TensorParallel, r.plan.ContextParallel = 1, 1
	r.plan.NumMachines = max(r.opts.NumMachines, 1)
	r.plan.NumProcesses = max(r.opts.NumProcesses, 1)
	src, note := FromOption, "from the command line"
	if r.opts.NumProcesses == 0 {
		src, note = FromAssumed, "the Trainer's file has none; pass --nproc"
	}
	r.record("num_processes", r.plan.NumProcesses, field{}, src, note)
	if r.plan.NumProcesses%r.plan.NumMachines != 0 {
		r.s.errorf(lenient.Pos{}, "num_processes", "make the process count a multiple of the machine count",
			"%d processes do not divide over %d machines", r.plan.NumProcesses, r.plan.NumMachines)
	}
}

// trainingArgs reads the TrainingArguments that matter to FSDP from a
// file that holds fsdp and fsdp_config among other arguments: bf16 and
// fp16 (unless given as options) and gradient_checkpointing.
func (r *reader) trainingArgs(root *node) {
	for _, m := range root.keys {
		switch {
		case m.key == "fsdp_config" || m.key == "fsdp" || strings.HasPrefix(m.key, "_"):
		case (m.key == "bf16" || m.key == "fp16") && m.val.truthy():
			if r.opts.MixedPrecision == "" {
				r.opts.MixedPrecision = m.key
			}
		case m.key == "gradient_checkpointing":
			r.opts.GradientCheckpointing = r.opts.GradientCheckpointing || m.val.truthy()
		default:
			r.s.infof(m.keyPos, m.key, "not an FSDP setting: left to the Trainer")
		}
	}
}

// trainerOptions parses the --fsdp option string (the flag, or the file's
// fsdp key) as FSDPOption values.
func (r *reader) trainerOptions(root *node) ([]string, bool) {
	text, src, pos, path := strings.TrimSpace(r.opts.TrainerFSDP), FromTrainerFlag, lenient.Pos{}, "--fsdp"
	if f, ok := root.get("fsdp"); ok {
		fileText := ""
		switch f.kind {
		case kBool:
			if f.b {
				fileText = "full_shard"
			}
		case kStr:
			fileText = f.s
		case kSeq:
			parts := []string{}
			for _, e := range f.elems {
				parts = append(parts, e.pyStr())
			}
			fileText = strings.Join(parts, " ")
		default:
			r.s.errorf(f.pos, "fsdp", `write the options as a string: "full_shard auto_wrap"`, "fsdp is %s", f.describe())
			return nil, false
		}
		fileText = strings.TrimSpace(fileText)
		if text != "" && strings.Join(strings.Fields(text), " ") != strings.Join(strings.Fields(fileText), " ") {
			r.s.warnf(f.pos, "fsdp", "", "ignored: --fsdp %q on the command line wins over the file's %q", text, fileText)
		} else if text == "" {
			text, src, pos, path = fileText, FromFile, f.pos, "fsdp"
			if fileText == "" {
				r.s.errorf(f.pos, "fsdp", `write "full_shard auto_wrap"`, "fsdp is %s: FSDP is off, and the Trainer ignores fsdp_config", f.describe())
				return nil, false
			}
		}
	}
	if text == "" {
		text, src = "full_shard auto_wrap", FromAssumed
		r.s.warnf(lenient.Pos{Line: 1, Col: 1}, "--fsdp", `pass --fsdp "full_shard auto_wrap" (or the options you train with)`,
			"no --fsdp options: the Trainer uses fsdp_config only with --fsdp; dszero assumes \"full_shard auto_wrap\"")
	}
	var opts []string
	for _, o := range strings.Fields(text) {
		if !contains(fsdpOptions, o) {
			r.s.errorf(pos, path, enumFix(o, fsdpOptions), "'%s' is not a valid FSDPOption", o)
			return nil, false
		}
		opts = append(opts, o)
	}
	r.plan.TrainerFSDPOption = strings.Join(opts, " ")
	r.record("fsdp", r.plan.TrainerFSDPOption, field{n: &node{}, written: path, pos: pos, src: src}, src, "")
	if len(opts) == 1 && opts[0] == "offload" {
		r.s.errorf(pos, path, `write --fsdp "full_shard offload" (or "shard_grad_op offload")`,
			"`--fsdp offload` can't work on its own: offload moves the shards of a sharding strategy to the host")
		return nil, false
	}
	if contains(opts, "full_shard") && contains(opts, "shard_grad_op") {
		r.s.errorf(pos, path, "keep one of them", "`--fsdp full_shard` is not compatible with `--fsdp shard_grad_op`")
		return nil, false
	}
	return opts, true
}

// trainerKeys collects fsdp_config with one leading fsdp_ stripped from
// each key, as _process_fsdp_args does (the fsdp_ form wins a clash).
func (r *reader) trainerKeys(cfg *node, nested bool) map[string]field {
	out := map[string]field{}
	parent := ""
	if nested {
		parent = "fsdp_config"
	}
	for _, m := range cfg.keys {
		w := pathOf(parent, m.key)
		if !nested && m.key == "fsdp" {
			continue
		}
		if strings.HasPrefix(m.key, "_") {
			continue // a comment key
		}
		name := strings.TrimPrefix(m.key, "fsdp_")
		prefixed := name != m.key
		if prev, dup := out[name]; dup {
			winner := w
			if !prefixed {
				winner = prev.written
			}
			r.s.warnf(m.keyPos, w, "keep one of them", "%s and %s are the same key once the Trainer strips fsdp_; %s wins", w, prev.written, winner)
			if !prefixed {
				continue
			}
		}
		if why, ok := acceleratorOnly[name]; ok {
			r.s.warnf(m.keyPos, w, "remove it", "ignored by the Trainer: %s", why)
			continue
		}
		if !contains(trainerKeys, name) {
			r.s.warnf(m.keyPos, w, didYouMean(name, trainerKeys, "remove it"), "ignored: the Trainer's fsdp_config has no key %s", name)
			continue
		}
		out[name] = field{n: m.val, written: w, pos: m.keyPos, src: FromFile}
	}
	return out
}

func (r *reader) trainerVersion(f field) {
	r.plan.Version = 1
	if !f.ok() {
		r.record("fsdp_version", 1, f, FromTrainerDefault, "absent: the Trainer's default (FSDP1)")
		return
	}
	v := int64(-1)
	switch f.n.kind {
	case kInt, kStr:
		v, _ = pyInt(f.n.pyStr())
	case kFloat:
		if f.n.f == float64(int64(f.n.f)) {
			v = int64(f.n.f)
		}
	}
	if v != 1 && v != 2 {
		r.s.errorf(f.n.pos, f.written, "write 1 or 2", "version is %s; the Trainer knows FSDP 1 and 2", f.n.describe())
		r.plan.Version = 0
		return
	}
	r.plan.Version = int(v)
	r.record("fsdp_version", int(v), f, FromFile, "")
}

// trainerStrategy: FSDP1 takes the last strategy among the --fsdp options
// (FULL_SHARD without one); FSDP2 follows reshard_after_forward, whose
// Trainer default is false.
func (r *reader) trainerStrategy(opts []string, keys map[string]field) {
	var st Strategy
	for _, o := range opts {
		if s, msg := parseStrategy(o); msg == "" {
			if st != 0 && s != st {
				r.s.warnf(lenient.Pos{}, "--fsdp", "keep one strategy", "both %s and %s: the Trainer keeps the last, %s", st, s, s)
			}
			st = s
		}
	}
	ra := keys["reshard_after_forward"]
	if r.plan.Version == 2 {
		keep := true
		if ra.ok() {
			b, ok := strToBool(strings.ToLower(ra.n.pyStr()))
			if !ok {
				r.s.errorf(ra.n.pos, ra.written, "write true or false", "invalid truth value %s: under FSDP2 reshard_after_forward is a boolean", ra.n.describe())
				return
			}
			keep = !b
			r.record("reshard_after_forward", b, ra, FromFile, "")
		} else {
			r.record("reshard_after_forward", false, ra, FromTrainerDefault, "absent: the Trainer's FSDP2 default is false (accelerate's is true)")
			r.s.warnf(r.at("fsdp_version"), "fsdp_config.reshard_after_forward", "write \"reshard_after_forward\": true for FULL_SHARD's memory profile",
				"no reshard_after_forward: under FSDP2 the Trainer defaults it to false, so parameters stay gathered from forward to backward (SHARD_GRAD_OP's profile) whatever --fsdp says")
		}
		r.plan.Strategy = FullShard
		if keep {
			r.plan.Strategy = ShardGradOp
		}
		if st.Hybrid() || st == NoShard {
			r.s.warnf(lenient.Pos{}, "--fsdp", "for FSDP2 use reshard_after_forward", "ignored: FSDP2 does not read the %s strategy; this runs %s across all processes", st, r.plan.Strategy)
		}
		return
	}
	switch {
	case st != 0:
		r.plan.Strategy = st
		r.record("sharding_strategy", st.String(), field{n: &node{}, written: "--fsdp", src: FromTrainerFlag}, FromTrainerFlag, "")
		if ra.ok() {
			if s2, msg := parseStrategy(ra.n.pyStr()); msg == "" && s2 != st {
				r.s.warnf(ra.pos, ra.written, "keep one of them", "ignored: the --fsdp strategy %s wins over reshard_after_forward %s under FSDP1", st, s2)
			}
		}
	case ra.ok():
		s2, ok := enum(r, ra, parseStrategy, strategyNames[1:])
		if !ok {
			return
		}
		r.plan.Strategy = s2
		r.record("sharding_strategy", s2.String(), ra, FromFile, "from reshard_after_forward")
		if s2 != FullShard {
			r.s.warnf(ra.pos, ra.written, fmt.Sprintf("add %s to --fsdp", strings.ToLower(s2.String())),
				"without a strategy in --fsdp the plugin runs FULL_SHARD under FSDP1 and ignores reshard_after_forward; dszero runs %s, as the key says", s2)
		}
	default:
		r.plan.Strategy = FullShard
		r.record("sharding_strategy", FullShard.String(), field{}, FromPluginDefault, "no strategy in --fsdp: the plugin's FSDP1 default")
	}
}

// trainerWrap: auto_wrap picks TRANSFORMER_BASED_WRAP, or SIZE_BASED_WRAP
// when min_num_params > 0; without it the plugin's NO_WRAP applies.
func (r *reader) trainerWrap(opts []string, keys map[string]field) {
	mf, cf, wf := keys["min_num_params"], keys["transformer_layer_cls_to_wrap"], keys["auto_wrap_policy"]
	minNum := int64(0)
	if mf.ok() {
		switch mf.n.kind {
		case kInt:
			v, ok := pyInt(mf.n.pyStr())
			if !ok {
				r.s.errorf(mf.n.pos, mf.written, "write a smaller number", "min_num_params %s is out of range", mf.n.pyStr())
				return
			}
			minNum = v
		case kFloat:
			if mf.n.f > 0 {
				r.s.errorf(mf.n.pos, mf.written, "write the digits: 100000000", "`min_num_params` must be an integer. Got %s of type float", pyFloat(mf.n.f))
				return
			}
		default:
			r.s.errorf(mf.n.pos, mf.written, "write a whole number", "min_num_params is %s; the Trainer compares it with 0 and fails", mf.n.describe())
			return
		}
	}
	var classes []string
	if cf.ok() && cf.n.kind != kNull {
		switch cf.n.kind {
		case kStr:
			classes = []string{cf.n.s}
		case kSeq:
			for _, e := range cf.n.elems {
				if e.kind != kStr {
					r.s.errorf(e.pos, cf.written, "write class names as strings", "a class name is %s", e.describe())
					return
				}
				classes = append(classes, e.s)
			}
		default:
			r.s.errorf(cf.n.pos, cf.written, `write ["LlamaDecoderLayer"]`, "transformer_layer_cls_to_wrap is %s", cf.n.describe())
			return
		}
	}
	if minNum > 0 && classes != nil {
		r.s.errorf(mf.pos, mf.written, "keep min_num_params (SIZE_BASED_WRAP) or transformer_layer_cls_to_wrap (TRANSFORMER_BASED_WRAP), not both",
			"`min_num_params` and `transformer_layer_cls_to_wrap` are mutually exclusive.")
		return
	}
	r.plan.Wrap = NoWrap
	switch {
	case wf.ok() && wf.n.kind != kNull:
		w, ok := enum(r, wf, parseWrap, wrapOrder)
		if !ok {
			return
		}
		r.plan.Wrap = w
		r.record("auto_wrap_policy", w.String(), wf, FromFile, "")
	case contains(opts, "auto_wrap"):
		r.plan.Wrap = TransformerWrap
		if minNum > 0 {
			r.plan.Wrap = SizeWrap
		}
		r.record("auto_wrap_policy", r.plan.Wrap.String(), field{}, FromTrainerFlag, "--fsdp auto_wrap (SIZE_BASED_WRAP when min_num_params > 0)")
	default:
		r.record("auto_wrap_policy", NoWrap.String(), field{}, FromPluginDefault, "no auto_wrap in --fsdp: the plugin's default")
		for _, f := range []field{mf, cf} {
			if f.ok() && f.n.kind != kNull {
				r.s.warnf(f.pos, f.written, "add auto_wrap to --fsdp", "ignored: without auto_wrap in --fsdp the Trainer sets no wrap policy")
			}
		}
	}
	switch r.plan.Wrap {
	case TransformerWrap:
		if classes != nil {
			r.wrapClasses(classes, cf)
		} else {
			r.defaultClasses()
		}
	case SizeWrap:
		if minNum <= 0 {
			r.s.warnf(mf.pos, mf.written, "write a positive min_num_params, e.g. 100000000",
				"SIZE_BASED_WRAP with min_num_params %d: the plugin silently drops the policy, so the whole model is one unit", minNum)
			r.plan.Wrap = NoWrap
			return
		}
		r.plan.MinNumParams = int(minNum)
		r.record("min_num_params", minNum, mf, FromFile, "")
	}
}

func (r *reader) trainerRest(opts []string, keys map[string]field) {
	v1 := r.plan.Version == 1
	r.plan.Offload = contains(opts, "offload")
	if f := keys["cpu_offload"]; f.ok() {
		if f.n.truthy() {
			r.plan.Offload = true
		}
		r.record("offload_params", r.plan.Offload, f, FromFile, "")
	} else {
		r.record("offload_params", r.plan.Offload, field{}, FromTrainerFlag, "--fsdp offload")
	}
	str := func(name, def string) (string, field) {
		f := keys[name]
		if !f.ok() {
			return def, f
		}
		return strings.ToLower(f.n.pyStr()), f
	}
	boolKey := func(name, def string) bool {
		s, f := str(name, def)
		b, ok := strToBool(s)
		if !ok {
			r.s.errorf(f.n.pos, f.written, "write true or false", "invalid truth value %s for %s", f.n.describe(), name)
			return false
		}
		r.record(name, b, f, FromTrainerDefault, "absent: the Trainer's default "+def)
		return b
	}
	syncS, syncF := str("sync_module_states", "true")
	cpuS, cpuF := str("cpu_ram_efficient_loading", "false")
	if syncS == "false" && cpuS == "true" {
		r.s.errorf(syncF.n.pos, syncF.written, "set sync_module_states to true: rank 0 reads the weights and broadcasts them; without the broadcast the other ranks would start from empty weights",
			"`sync_module_states` must be `\"True\"` if `cpu_ram_efficient_loading` is `\"True\"`")
		return
	}
	_ = cpuF
	r.plan.CPURAMEfficient = boolKey("cpu_ram_efficient_loading", "false")
	r.plan.SyncModuleStates = boolKey("sync_module_states", "true")
	if v1 {
		r.plan.UseOrigParams = boolKey("use_orig_params", "true")
		r.plan.ForwardPrefetch = boolKey("forward_prefetch", "false")
		bp := keys["backward_prefetch"]
		if bp.ok() && bp.n.kind != kStr {
			r.s.errorf(bp.n.pos, bp.written, `write "BACKWARD_PRE", "BACKWARD_POST" or "NO_PREFETCH"`, "backward_prefetch is %s; the Trainer calls .upper() on it", bp.n.describe())
			return
		}
		r.backwardPrefetch(bp, FromTrainerDefault, "absent: the Trainer's NO_PREFETCH")
	} else {
		r.plan.UseOrigParams = true
		r.plan.SyncModuleStates = r.plan.CPURAMEfficient
		for _, k := range []string{"forward_prefetch", "backward_prefetch", "use_orig_params"} {
			if f := keys[k]; f.ok() {
				r.s.warnf(f.pos, f.written, "remove it", "ignored: the Trainer passes %s only under FSDP1", k)
			}
		}
	}
	r.plan.LimitAllGathers = r.rawBool(keys["limit_all_gathers"], "limit_all_gathers", true)
	r.plan.ActivationCkpt = r.rawBool(keys["activation_checkpointing"], "activation_checkpointing", false)
	r.stateDict(keys["state_dict_type"])
	r.trainerPrecision(keys)
	if r.plan.ActivationCkpt && r.opts.GradientCheckpointing {
		f := keys["activation_checkpointing"]
		r.s.errorf(f.pos, f.written, "drop --gradient_checkpointing and keep FSDP's activation_checkpointing",
			"The activation_checkpointing in FSDP config and the gradient_checkpointing in training arg can't be set to True simultaneously")
	} else if r.opts.GradientCheckpointing && (r.plan.Strategy == FullShard || r.plan.Strategy == HybridShard) {
		r.s.warnf(lenient.Pos{}, "--gradient_checkpointing", "set activation_checkpointing: true in fsdp_config instead",
			"gradient_checkpointing under FSDP full shard adds a redundant all-gather in backward (transformers#30404)")
	}
}

// rawBool reads a value the Trainer uses as it is: Python truthiness, so
// the string "False" is true.
func (r *reader) rawBool(f field, name string, def bool) bool {
	if !f.ok() {
		r.record(name, def, f, FromPluginDefault, fmt.Sprintf("absent: the plugin's %v", def))
		return def
	}
	b := f.n.truthy()
	if f.n.kind == kStr {
		if sb, ok := strToBool(f.n.s); ok && sb != b {
			r.s.warnf(f.n.pos, f.written, fmt.Sprintf("write %v without quotes", sb),
				"the Trainer uses %s as it is, and a non-empty string is true in Python: %s is on", f.n.describe(), name)
		}
	}
	r.record(name, b, f, FromFile, "")
	return b
}

// trainerPrecision takes mixed precision from --bf16/--fp16, or from XLA's
// compute_dtype; XLA FSDP itself is TPU-only.
func (r *reader) trainerPrecision(keys map[string]field) {
	mp, src, note := "no", FromTrainerDefault, "neither --bf16 nor --fp16"
	if r.opts.MixedPrecision != "" {
		mp, src, note = r.opts.MixedPrecision, FromOption, "--"+r.opts.MixedPrecision
	}
	if f := keys["xla"]; f.ok() && f.n.truthy() {
		r.plan.XLA = true
		r.s.warnf(f.pos, f.written, "", "xla: torch_xla's FSDP for TPUs; dszero runs the same sharding and wrapping on its own engine and reads only compute_dtype and xla_fsdp_grad_ckpt")
		if g := keys["xla_fsdp_grad_ckpt"]; g.ok() && g.n.truthy() {
			r.plan.ActivationCkpt = true
			r.record("activation_checkpointing", true, g, FromFile, "xla_fsdp_grad_ckpt")
		}
		if s := keys["xla_fsdp_settings"]; s.ok() {
			if cd, ok := s.n.get("compute_dtype"); ok && r.opts.MixedPrecision == "" {
				switch cd.pyStr() {
				case "bfloat16":
					mp = "bf16"
				case "float16":
					mp = "fp16"
				}
				src, note = FromFile, "xla_fsdp_settings.compute_dtype "+cd.pyStr()
			}
		}
	}
	r.plan.MixedPrecision = mp
	r.record("mixed_precision", mp, field{}, src, note)
}
