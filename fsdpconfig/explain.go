package fsdpconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// kv and obj build JSON objects whose keys keep the order written.
type kv struct {
	k string
	v any
}

type obj []kv

func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(e.k)
		v, err := json.Marshal(e.v)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// ToDSConfig renders the ds_config a DeepSpeed user would write for the
// same run, indented JSON. Batch sizes, clipping and the optimizer's
// hyperparameters are "auto" (an FSDP config has none; HF's Trainer, and
// dsconfig in HF mode, fill them); the optimizer is the Trainer's default
// AdamW, which DeepSpeed needs spelled out to offload. What DeepSpeed
// cannot say (reshard_after_forward, wrap policies, forward and backward
// prefetch) is in DSConfigNotes.
func ToDSConfig(p Plan) []byte {
	b, _ := DSEquivalent(p)
	return b
}

// DSConfigNotes says where the ds_config of ToDSConfig differs from the
// FSDP setup.
func DSConfigNotes(p Plan) []string {
	_, notes := DSEquivalent(p)
	return notes
}

// DSEquivalent returns ToDSConfig's JSON and DSConfigNotes' notes.
func DSEquivalent(p Plan) ([]byte, []string) {
	var notes []string
	note := func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }
	cfg := obj{{"train_batch_size", "auto"}, {"train_micro_batch_size_per_gpu", "auto"},
		{"gradient_accumulation_steps", "auto"}, {"gradient_clipping", "auto"}}
	note(`batch sizes, clipping and the optimizer are "auto": an FSDP config has none; HF's Trainer fills them from its arguments (dszero: --per_device_train_batch_size, --gradient_accumulation_steps, --max_grad_norm, --learning_rate, ...). The optimizer block is the Trainer's default AdamW; DeepSpeed needs it spelled out to offload (it refuses a client optimizer with offload)`)
	switch p.MixedPrecision {
	case "fp16":
		cfg = append(cfg, kv{"fp16", obj{{"enabled", true}, {"loss_scale", 0}, {"initial_scale_power", 16},
			{"loss_scale_window", 2000}, {"hysteresis", 1}, {"min_loss_scale", 1}}})
		note("fp16: the loss-scale settings copy torch's GradScaler, which FSDP uses (start 2^16, ×2 after 2000 clean steps, halve at each overflow); GradScaler has no floor, DeepSpeed stops at min_loss_scale")
	case "bf16":
		cfg = append(cfg, kv{"bf16", obj{{"enabled", true}}})
	case "fp8":
		note("fp8: DeepSpeed's ds_config has no fp8 training (accelerate runs it through TransformerEngine or torchao)")
	}
	z := obj{{"stage", p.Stage}}
	if p.Stage == 3 {
		if p.Offload {
			z = append(z, kv{"offload_param", obj{{"device", "cpu"}, {"pin_memory", true}}},
				kv{"offload_optimizer", obj{{"device", "cpu"}, {"pin_memory", true}}})
		}
		if p.StateDict == FullStateDict {
			z = append(z, kv{"stage3_gather_16bit_weights_on_model_save", true})
		}
		if p.Hybrid() {
			z = append(z, kv{"mics_shard_size", p.ShardGroupSize}, kv{"mics_hierarchical_params_gather", false})
			note("%s over %d-rank groups is MiCS in DeepSpeed (mics_shard_size %d): all model states sharded within a group, replicated across groups. ZeRO++'s zero_hpz_partition_size is not the same: it keeps only a secondary copy of the parameters within the group, while gradients and optimizer state stay sharded over all ranks",
				p.Strategy, p.ShardGroupSize, p.ShardGroupSize)
		}
		if p.KeepAfterForward {
			note("SHARD_GRAD_OP (reshard_after_forward false) has no ds_config switch. DeepSpeed's stage 3 releases each unit after its forward (FULL_SHARD); its stage 2 keeps all 16-bit parameters on every rank at all times. FSDP's SHARD_GRAD_OP is between them: sharded at rest like stage 3, gathered from forward to backward like stage 2 (one all-gather per step instead of two). dszero runs it as stage 3 with KeepAfterForward; this ds_config alone would run FULL_SHARD")
		}
		switch p.Wrap {
		case NoWrap:
			note("NO_WRAP (one unit for the whole model) has no ds_config form: DeepSpeed's stage 3 always gathers module by module")
		case SizeWrap:
			note("SIZE_BASED_WRAP (units of ≥ %d parameters) has no ds_config form; DeepSpeed gathers module by module (stage3_module_granularity_threshold only fuses small leaf modules)", p.MinNumParams)
		}
		note("prefetch: DeepSpeed prefetches in both passes by its recorded trace (stage3_prefetch_bucket_size); FSDP's backward_prefetch %s and forward_prefetch %v have no ds_config switches", p.BackwardPrefetch, p.ForwardPrefetch)
	} else if p.Offload {
		note("offload with NO_SHARD has no DeepSpeed form: DeepSpeed offloads only partitioned state (offload_optimizer from stage 1, offload_param at stage 3)")
	}
	cfg = append(cfg, kv{"optimizer", obj{{"type", "AdamW"}, {"params", obj{{"lr", "auto"}, {"betas", "auto"}, {"eps", "auto"}, {"weight_decay", "auto"}}}}},
		kv{"zero_optimization", z})
	if p.ActivationCkpt {
		cfg = append(cfg, kv{"activation_checkpointing", obj{{"partition_activations", false}}})
		note("activation checkpointing: DeepSpeed's block configures deepspeed.checkpointing; the model must call it (HF: --gradient_checkpointing)")
	}
	if p.CPURAMEfficient {
		note("cpu_ram_efficient_loading is DeepSpeed's zero.Init (accelerate's zero3_init_flag), a call in the training script, not a ds_config key")
	}
	switch p.StateDict {
	case ShardedStateDict:
		note("SHARDED_STATE_DICT: dszero train --output_dir writes each checkpoint-N as Accelerate does, pytorch_model_fsdp_0/ and optimizer_0/ in torch.distributed.checkpoint's format (dcp.load and accelerator.load_state read them at any world size), beside trainer_state.json; --save writes DeepSpeed's per-rank files (zero_pp_rank_*) instead, which zero_to_fp32.py consolidates")
	case LocalStateDict:
		note("LOCAL_STATE_DICT ↔ DeepSpeed's per-rank checkpoint files (zero_pp_rank_*), which dszero writes with --save or --output_dir; consolidate with zero_to_fp32.py")
	case FullStateDict:
		if p.Stage == 3 {
			note("FULL_STATE_DICT ↔ stage3_gather_16bit_weights_on_model_save: rank 0 writes the consolidated weights")
		}
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		panic(err) // only plain values above
	}
	return append(b, '\n'), notes
}

// strategyStory says what each strategy does with memory and
// communication; Ψ parameters, N ranks in a shard group, K optimizer bytes
// per parameter (12 for Adam with fp32 master weights).
var strategyStory = map[Strategy]string{
	FullShard: "FULL_SHARD → ZeRO stage 3: parameters, gradients and optimizer state are split across the ranks, (2+2+K)Ψ/N bytes of model states per rank. " +
		"Each unit is all-gathered before its forward, released after it (reshard_after_forward true), gathered again for its backward, and its gradients are reduce-scattered.",
	ShardGradOp: "SHARD_GRAD_OP → ZeRO stage 3 with the parameters kept from forward to backward (reshard_after_forward false, the engine's KeepAfterForward). " +
		"At rest it is stage 3, (2+2+K)Ψ/N per rank; by the end of forward every unit is gathered (2Ψ of 16-bit parameters), and each is released after its backward. " +
		"One all-gather per step instead of FULL_SHARD's two. DeepSpeed stage 2 is not the same: it never shards the 16-bit parameters, 2Ψ + (2+K)Ψ/N per rank at all times.",
	NoShard:          "NO_SHARD → ZeRO stage 0 (DDP): every rank holds everything, (2+2+K)Ψ, and gradients are all-reduced.",
	HybridShard:      "HYBRID_SHARD → ZeRO stage 3 within each shard group, replicated across groups: (2+2+K)Ψ/G per rank for groups of G; all-gathers and reduce-scatters stay in the group, and gradients are all-reduced across groups (DeepSpeed: MiCS).",
	HybridShardZero2: "HYBRID_SHARD_ZERO2 → SHARD_GRAD_OP within each shard group (parameters kept from forward to backward), replicated across groups: (2+2+K)Ψ/G per rank at rest.",
}

// ExplainText writes the plan for `dszero config explain`: what FSDP runs,
// how dszero's engine runs it, every setting with its source, the
// equivalent ds_config and the diagnostics.
func ExplainText(w io.Writer, p Plan) {
	fmt.Fprintf(w, "%s (%s dialect, FSDP%d, %d process(es) on %d machine(s))\n\n", p.File, p.Dialect, p.Version, p.NumProcesses, p.NumMachines)
	fmt.Fprintf(w, "Sharding\n  %s\n", strategyStory[p.Strategy])
	if p.Strategy.Hybrid() {
		fmt.Fprintf(w, "  groups: %d replica group(s) × %d-rank shard groups%s\n", p.ReplicaGroups, p.ShardGroupSize,
			map[bool]string{true: " (DeepSpeed MiCS: all-reduce across groups once per step)", false: " (one group: nothing replicated)"}[p.Hybrid()])
	}
	fmt.Fprintf(w, "  engine: ZeRO stage %d", p.Stage)
	if p.Stage == 3 {
		fmt.Fprintf(w, ", KeepAfterForward %v, WrapMinNumParams %s", p.KeepAfterForward, wrapNumber(p.WrapMinNumParams))
	}
	fmt.Fprintln(w)
	if p.Stage == 3 {
		fmt.Fprintf(w, "\nUnits (%s)\n  %s\n", p.Wrap, unitStory(p))
	}
	fmt.Fprintf(w, "\nOffload\n")
	if p.Offload {
		fmt.Fprintf(w, "  parameters and gradients on the host, optimizer step there (DeepSpeed: offload_param and offload_optimizer to cpu)\n")
	} else {
		fmt.Fprintf(w, "  none: everything on the device\n")
	}
	fmt.Fprintf(w, "\nPrecision\n  %s\n", precisionStory(p.MixedPrecision))
	fmt.Fprintf(w, "\nCheckpoints\n  %s\n", stateDictStory[p.StateDict])
	fmt.Fprintf(w, "\nLoading\n")
	switch {
	case p.CPURAMEfficient:
		fmt.Fprintf(w, "  cpu_ram_efficient_loading: rank 0 reads the weights, the other ranks start empty and receive rank 0's by broadcast (DeepSpeed: zero.Init); dszero's stage 3 initializes each rank's partitions only\n")
	case p.SyncModuleStates:
		fmt.Fprintf(w, "  sync_module_states: every rank loads the weights, then rank 0's are broadcast so all ranks start equal\n")
	default:
		fmt.Fprintf(w, "  every rank loads the weights itself\n")
	}
	fmt.Fprintf(w, "\nOther\n  activation checkpointing %v; backward prefetch %s; forward prefetch %v; limit_all_gathers %v; use_orig_params %v\n",
		p.ActivationCkpt, p.BackwardPrefetch, p.ForwardPrefetch, p.LimitAllGathers, p.UseOrigParams)
	fmt.Fprintf(w, "  (dszero's stage 3 prefetches by its recorded trace in both passes and bounds live gathers by stage3_max_live_parameters; it always keeps per-parameter views, as use_orig_params true)\n")

	fmt.Fprintf(w, "\nSettings (value, source)\n")
	settings := p.Settings()
	sort.SliceStable(settings, func(i, j int) bool {
		a, b := settings[i], settings[j]
		if (a.Line == 0) != (b.Line == 0) {
			return a.Line != 0
		}
		return a.Line < b.Line
	})
	for _, s := range settings {
		src := s.Source.String()
		if s.Written != "" && s.Line > 0 {
			src += fmt.Sprintf(" %s (line %d)", s.Written, s.Line)
		}
		if s.Note != "" {
			src += ": " + s.Note
		}
		fmt.Fprintf(w, "  %-30s %-24s %s\n", s.Name, s.ValueString(), src)
	}
	js, notes := DSEquivalent(p)
	fmt.Fprintf(w, "\nThe same run as a ds_config\n")
	for _, line := range strings.Split(strings.TrimRight(string(js), "\n"), "\n") {
		fmt.Fprintf(w, "  %s\n", line)
	}
	for _, n := range notes {
		fmt.Fprintf(w, "  - %s\n", n)
	}
	if ds := p.Diagnostics(); len(ds) > 0 {
		fmt.Fprintf(w, "\nNotes\n")
		for _, d := range ds {
			fmt.Fprintf(w, "  %s\n", d.String())
		}
	}
}

func wrapNumber(n int) string {
	if n == NoWrapMinNumParams {
		return "max (one unit)"
	}
	return fmt.Sprint(n)
}

func unitStory(p Plan) string {
	switch p.Wrap {
	case TransformerWrap:
		named := "one unit per " + gptBlock
		if len(p.WrapClasses) != 1 || p.WrapClasses[0] != gptBlock {
			named = fmt.Sprintf("one unit per transformer block (the config names %s; on dszero's GPT that is each %s)", strings.Join(p.WrapClasses, ", "), gptBlock)
		}
		return named + "; the embeddings and the head are gathered as units of their own, where FSDP keeps them in the root unit"
	case SizeWrap:
		return fmt.Sprintf("consecutive modules merged into units of at least %d parameters; a model smaller than that is a single unit", p.MinNumParams)
	}
	return "the whole model is one unit, gathered in full for forward and backward: sharding saves only gradient and optimizer-state memory"
}

func precisionStory(mp string) string {
	switch mp {
	case "bf16":
		return "bf16 compute, fp32 sharded master weights and optimizer state (DeepSpeed: bf16.enabled)"
	case "fp16":
		return "fp16 compute with a dynamic loss scale, fp32 sharded master weights (DeepSpeed: fp16.enabled)"
	case "fp8":
		return "fp8 (not run by dszero)"
	}
	return "fp32"
}

var stateDictStory = map[StateDict]string{
	FullStateDict:    "FULL_STATE_DICT: rank 0 gathers and writes the whole model (DeepSpeed: stage3_gather_16bit_weights_on_model_save, or zero_to_fp32.py afterwards)",
	ShardedStateDict: "SHARDED_STATE_DICT: each rank writes its shards with metadata, resumable on another world size (DeepSpeed: per-rank zero_pp_rank files; universal checkpoints to reshape)",
	LocalStateDict:   "LOCAL_STATE_DICT: each rank writes its flat shard as it lies in memory, loadable only on the same world size (DeepSpeed: per-rank zero_pp_rank files)",
}
