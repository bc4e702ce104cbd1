package fsdpconfig

import (
	"fmt"
	"strings"
)

// gptBlock is the block class of dszero's GPT (Hugging Face's name for a
// GPT-2 block, which is what _no_split_modules lists).
const gptBlock = "GPT2Block"

// wrapClasses checks the transformer layer classes a config names. A
// config written for another model names that model's block
// (LlamaDecoderLayer); on dszero's GPT the same policy means one unit per
// GPT2Block. Accelerate itself fails at prepare time when the model has no
// class of that exact name, so spaces and empty names are errors.
func (r *reader) wrapClasses(classes []string, f field) {
	var odd []string
	for _, c := range classes {
		switch {
		case c == "":
			r.s.errorf(f.n.pos, f.written, "remove the empty name (a stray comma)",
				"an empty class name: accelerate finds no such class (Could not find the transformer layer class  in the model.)")
			return
		case strings.TrimSpace(c) != c:
			r.s.errorf(f.n.pos, f.written, fmt.Sprintf("write %q without spaces: accelerate splits on commas only", strings.TrimSpace(c)),
				"class name %q has spaces around it, so accelerate finds no such class (Could not find the transformer layer class %s in the model.)", c, c)
			return
		case embedLike(c):
			r.s.infof(f.n.pos, f.written, "%s: dszero's units already gather the embeddings on their own", c)
		case !blockLike(c):
			odd = append(odd, c)
		}
	}
	if len(odd) > 0 {
		r.s.warnf(f.n.pos, f.written, "name the model's transformer block class (GPT2Block, LlamaDecoderLayer, ...)",
			"%s does not look like a transformer block class: FSDP would make each such module a unit; dszero makes one unit per %s", quoteList(odd), gptBlock)
	}
	r.plan.WrapClasses = append([]string(nil), classes...)
	r.record("transformer_layer_cls_to_wrap", strings.Join(classes, ","), f, f.src, "")
}

// defaultClasses applies the plugin's fallback: the model's
// _no_split_modules.
func (r *reader) defaultClasses() {
	r.plan.WrapClasses = []string{gptBlock}
	r.record("transformer_layer_cls_to_wrap", gptBlock, field{}, FromModel,
		"absent: accelerate wraps the model's _no_split_modules, which for dszero's GPT is GPT2Block")
}

// mapToEngine turns the FSDP settings into the engine's: ZeRO stage,
// KeepAfterForward, the stage-3 wrap policy and the group layout, and
// reports what the engine does not run yet.
func (r *reader) mapToEngine() {
	p := &r.plan
	p.Stage = 3
	if p.Strategy == NoShard {
		p.Stage = 0
	}
	p.KeepAfterForward = p.Strategy == ShardGradOp || p.Strategy == HybridShardZero2
	r.s.set(Setting{Name: "zero.stage", Value: p.Stage, Source: FromDerived, Note: "from " + p.Strategy.String()})
	if p.Stage == 3 {
		r.s.set(Setting{Name: "zero.keep_after_forward", Value: p.KeepAfterForward, Source: FromDerived, Note: "reshard_after_forward " + fmt.Sprint(!p.KeepAfterForward)})
	}

	// Groups.
	switch {
	case p.Strategy == NoShard:
		p.ShardGroupSize, p.ReplicaGroups = 1, p.NumProcesses
	case p.Strategy.Hybrid():
		g, src, note := p.ShardGroupSize, FromDerived, "parallelism_config dp_shard_size"
		if g == 0 {
			g, note = p.NumProcesses/p.NumMachines, "the processes of one machine (num_processes / num_machines)"
		}
		if r.opts.ShardGroupSize > 0 {
			g, src, note = r.opts.ShardGroupSize, FromOption, "--shard-group-size"
		}
		if g < 1 || p.NumProcesses%g != 0 {
			r.s.errorf(r.at("sharding_strategy"), "shard_group_size", "choose a group size that divides the process count",
				"%s: a shard group of %d does not divide %d processes", p.Strategy, g, p.NumProcesses)
			return
		}
		p.ShardGroupSize, p.ReplicaGroups = g, p.NumProcesses/g
		r.s.set(Setting{Name: "shard_group_size", Value: g, Source: src, Note: note})
		if p.ReplicaGroups == 1 {
			r.s.infof(r.at("sharding_strategy"), "", "%s with one shard group of all %d processes is %s: nothing is replicated", p.Strategy, g,
				map[bool]Strategy{true: ShardGradOp, false: FullShard}[p.KeepAfterForward])
		} else {
			r.s.infof(r.at("sharding_strategy", "parallelism.dp_replicate_size"), "",
				"%s: %d replica groups × %d-rank shard groups: model states sharded within a group, gathers and reduce-scatters inside it, gradient partitions all-reduced across groups once per step (DeepSpeed's MiCS)",
				p.Strategy, p.ReplicaGroups, g)
		}
	default:
		p.ShardGroupSize, p.ReplicaGroups = p.NumProcesses, 1
	}

	// Units.
	if p.Stage == 3 {
		switch p.Wrap {
		case TransformerWrap:
			p.WrapMinNumParams = 0
		case SizeWrap:
			p.WrapMinNumParams = p.MinNumParams
		case NoWrap:
			p.WrapMinNumParams = NoWrapMinNumParams
			r.s.warnf(r.at("auto_wrap_policy"), "auto_wrap_policy", "set the auto wrap policy to TRANSFORMER_BASED_WRAP",
				"NO_WRAP: the whole model is one unit, gathered in full for forward and backward, so sharding saves only the gradient and optimizer-state memory")
		}
		r.s.set(Setting{Name: "zero.wrap_min_num_params", Value: p.WrapMinNumParams, Source: FromDerived, Note: p.Wrap.String()})
	}

	// What the engine does not run yet.
	if p.Offload && p.Stage == 0 {
		r.s.unsupportedf(r.at("offload_params", "fsdp"), "offload_params", "remove it: with NO_SHARD there are no shards to offload in DeepSpeed's terms either",
			"offload with NO_SHARD: dszero offloads the shards of stage 3 (DeepSpeed's offload_param + offload_optimizer to cpu)")
	}
	if p.MixedPrecision == "fp8" {
		r.s.unsupportedf(r.at("mixed_precision"), "mixed_precision", "use bf16", "fp8 training: dszero has no fp8 matmuls")
	}
	if p.TensorParallel > 1 || p.ContextParallel > 1 {
		r.s.unsupportedf(r.at("parallelism.tp_size", "parallelism.cp_size", "parallelism.sp_size"), "parallelism_config", "set tp_size, cp_size and sp_size to 1",
			"tensor/context parallelism (tp %d, cp×sp %d): dszero runs data parallelism only", p.TensorParallel, p.ContextParallel)
	}
	if p.IgnoredModules != "" {
		r.s.unsupportedf(r.at("ignored_modules"), "ignored_modules", "remove it", "ignored_modules %q: dszero shards every parameter of its GPT", p.IgnoredModules)
	}
}
