// Package fsdpconfig reads PyTorch FSDP setups — an `accelerate config`
// file (distributed_type: FSDP and its fsdp_config block) or HF Trainer's
// --fsdp options with its --fsdp_config JSON — as Accelerate and the
// Trainer read them, and maps them onto dszero's ZeRO engine. Diagnostics
// are dsconfig's: file:line:col, the key, the severity, the message and
// the fix, with a did-you-mean for misspelt keys and values.
//
// # FSDP and ZeRO are the same idea
//
// Both keep one copy of the model states split over N ranks and gather a
// unit's parameters just before it computes. With Ψ parameters and K bytes
// of optimizer state per parameter (12 for Adam with fp32 master weights),
// per rank:
//
//	FSDP strategy        ZeRO            model states at rest      parameters during a step
//	NO_SHARD             stage 0 (DDP)   (2+2+K)Ψ                  all, always
//	FULL_SHARD           stage 3         (2+2+K)Ψ/N                a unit at a time, released after forward and after backward
//	SHARD_GRAD_OP        stage 3, kept   (2+2+K)Ψ/N                gathered in forward, kept until each unit's backward
//	(none)               stage 2         2Ψ + (2+K)Ψ/N             all, always
//	HYBRID_SHARD         stage 3 in G    (2+2+K)Ψ/G                as FULL_SHARD within a group of G ranks
//	HYBRID_SHARD_ZERO2   stage 3, kept   (2+2+K)Ψ/G                as SHARD_GRAD_OP within a group of G ranks
//
// SHARD_GRAD_OP is often called "ZeRO-2", and it is not: DeepSpeed's stage
// 2 never shards the 16-bit parameters, while FSDP's SHARD_GRAD_OP shards
// them at rest and only keeps each unit gathered from its forward to its
// backward (reshard_after_forward false). Its traffic is stage 2's (one
// all-gather and one reduce-scatter per step) and its peak is stage 2's,
// but between steps it holds what stage 3 holds. dszero runs it as stage 3
// with KeepAfterForward, so the difference stays real. FSDP2 has no
// strategy names: reshard_after_forward true is FULL_SHARD, false is
// SHARD_GRAD_OP, and hybrid sharding comes from a device mesh (accelerate's
// parallelism_config: dp_replicate_size × dp_shard_size). The hybrids are
// MiCS in DeepSpeed's terms (all model states sharded within a group),
// not ZeRO++'s hpZ (a secondary parameter copy only); the engine runs them
// as stage 3 on shard groups (zero.Options.ShardGroupSize): gathers and
// reduce-scatters inside a group, the gradient partitions all-reduced
// across groups once per step. Offload (parameters and gradients on the
// host, the optimizer step there) is stage 3's offload_param and
// offload_optimizer to cpu.
//
// A unit is what FSDP wraps: TRANSFORMER_BASED_WRAP makes one per block
// class (for dszero's GPT, GPT2Block, whatever block class the config
// names: a config written for Llama says LlamaDecoderLayer), SIZE_BASED_WRAP
// merges modules until they hold min_num_params, NO_WRAP makes the whole
// model one unit — gathered in full, so only gradients and optimizer state
// are saved. The engine's WrapMinNumParams is 0 for one unit per block,
// min_num_params for size-based units, and NoWrapMinNumParams for one.
//
// The rest maps as Accelerate's FSDP/DeepSpeed concept guide pairs them:
// offload_params is offload_param plus offload_optimizer to the host (FSDP
// offloads both or neither); SHARDED_STATE_DICT and LOCAL_STATE_DICT are
// per-rank checkpoints, FULL_STATE_DICT the consolidated weights rank 0
// writes (stage3_gather_16bit_weights_on_model_save); cpu_ram_efficient_loading
// and sync_module_states load the weights on rank 0 and broadcast them
// (DeepSpeed's zero.Init); mixed_precision bf16/fp16 is bf16/fp16 with fp32
// master weights. ToDSConfig writes the ds_config a DeepSpeed user would
// write, and DSConfigNotes what it cannot say.
//
// # Reading as Accelerate and the Trainer read
//
// Accelerate (HEAD 16cb6eb8, after v1.14) loads YAML with yaml.safe_load,
// so YAML 1.1 types apply: yes/no/on/off are booleans (an unquoted
// mixed_precision: no is false, and launch fails), 1e8 is a string (int()
// refuses it), 010 is 8. `accelerate launch` prefixes fsdp_config keys
// that lack "fsdp" (the old offload_params, sharding_strategy spellings),
// passes every value through str() into FSDP_* variables, and the plugin
// parses those: strategies by name in any case or by torch's enum value
// (1 FULL_SHARD, 2 SHARD_GRAD_OP, 3 NO_SHARD, 4 HYBRID_SHARD,
// 5 HYBRID_SHARD_ZERO2), booleans with str_to_bool (true/false, yes/no,
// 1/0, any case). Unknown top-level keys make accelerate refuse the file
// (an Error here); unknown fsdp_config keys are copied and never read (a
// Warning with a did-you-mean and what ignoring it means).
//
// Three layers of defaults disagree, and every Setting says which one it
// took (Settings, Source and Note): `accelerate launch`'s argument
// defaults, exported when a key is absent (fsdp_version 1, FULL_SHARD,
// reshard_after_forward true, min_num_params 1e8, cpu_ram_efficient_loading
// and sync_module_states true, use_orig_params true); the plugin's own
// (NO_WRAP, NO_PREFETCH, FULL_STATE_DICT under FSDP1 and SHARDED_STATE_DICT
// under FSDP2); and the model's (_no_split_modules, GPT2Block). The
// Trainer (transformers training_args.py at 00349ae8) has its own: no
// strategy in --fsdp means FULL_SHARD, and under FSDP2 reshard_after_forward
// defaults to false — SHARD_GRAD_OP's profile — unlike accelerate's true.
//
// Under FSDP2 the FSDP1-only keys (sharding_strategy, backward_prefetch,
// forward_prefetch, sync_module_states, use_orig_params) are not read;
// each is reported with what runs instead. Under FSDP1 accelerate launch
// takes the strategy from fsdp_sharding_strategy and ignores
// fsdp_reshard_after_forward, although `accelerate config` writes the FSDP1
// strategy there; dszero follows the key and warns when accelerate would
// run FULL_SHARD instead. The old fsdp_backward_prefetch_policy, which
// accelerate 1.0 stopped reading, is read as fsdp_backward_prefetch with a
// warning.
//
// Errors keep Accelerate's and the Trainer's own messages where they have
// one (Invalid auto wrap policy, `--fsdp offload` can't work on its own,
// `min_num_params` and `transformer_layer_cls_to_wrap` are mutually
// exclusive, sync_module_states with cpu_ram_efficient_loading) and add the
// position and the fix.
package fsdpconfig
