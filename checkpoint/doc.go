// Package checkpoint saves and loads an engine's training state in
// DeepSpeed's checkpoint layout (engine.save_checkpoint of DeepSpeed
// 0.14.5), with ptfile's .pt writer and allow-listed reader.
//
// # The layout
//
//	DIR/latest                                   the tag, written last
//	DIR/TAG/mp_rank_00_model_states.pt           stages 0–2: rank 0 writes it
//	DIR/TAG/zero_pp_rank_R_mp_rank_00_model_states.pt   stage 3: every rank
//	DIR/TAG/[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt  stages 1–3, and
//	                                             bf16 at stage 0: rank R
//	DIR/TAG/dszero_manifest_rank_R.json          rank R's files: bytes and sha256
//
// TAG defaults to global_step{N}. A model-states file holds the module
// (the working parameters in the training dtype: views of one flat storage
// at stages 0–2, empty placeholders at stage 3), buffer_names,
// param_shapes (one OrderedDict name → torch.Size), the lr scheduler's
// state, global_steps, skipped_steps, global_samples, dp_world_size,
// ds_config and ds_version; at stage 0 in fp32 also the whole torch
// optimizer state dict (one state entry per parameter), in fp16 the state
// dict of DeepSpeed's fp16 wrapper around it, which holds the fp32 master
// and the loss scale (FP16_UnfusedOptimizer's or FP16_Optimizer's,
// fp16wrap.go). An
// optim-states file holds the rank's fp32 partition and the base
// optimizer's state over it:
//
//	stages 1, 2  single_partition_of_fp32_groups [rank's partition of the
//	             flat buffer, padding stripped], base_optimizer_state
//	             {state {0: {step, exp_avg, ...}}, param_groups},
//	             param_slice_mappings (fragment_address {numel, start} per
//	             parameter piece), group_paddings, partition_count, zero_stage
//	stage 3      fp32_flat_groups [one per sub-group: the rank's partition
//	             of every parameter, ceil(numel/world) each, padding
//	             included], optimizer_state_dict {state {g: ...}}
//	bf16 at      DeepSpeed's BF16_Optimizer: the keys of stages 1 and 2 over
//	stage 0      the same partition, without zero_stage or a loss scaler
//	             (every rank holds the whole state; each saves its part)
//
// Stages 1–3 also carry loss_scaler (DeepSpeed's LossScaler object),
// dynamic_loss_scale and overflow. What DeepSpeed does not save but an exact resume needs —
// the dynamic loss scaler's cur_iter, last_overflow_iter and
// cur_hysteresis (and, in checkpoints of dszero before its stage-0 fp16
// wrappers, which the loader still reads, the fp32 master) — is
// client state under the key "dszero", as DeepSpeed keeps any client
// state at the top of the model-states file.
//
// # Crash safety
//
// Every rank writes its files into DIR/.TAG.tmp, each file written to a
// temporary name, fsynced and renamed (ptfile.WriteFile), and lists them
// with their sizes and sha256 in its manifest. The files are streamed
// from the rank's buffers in place (view.go): a save's extra memory is
// the writer's I/O buffer, not a copy of the state; the sha256 is
// computed as each file is written. SaveAsync (async.go) writes from a
// snapshot in the background instead, publishing when every rank is done. When all ranks are done, rank 0
// renames the directory to DIR/TAG, fsyncs DIR, and only then replaces
// DIR/latest (again through a temporary file and a rename). A crash at any
// point leaves the previous checkpoint, and latest naming it, intact. A
// checkpoint of an existing tag (a rerun) is never written into: the old
// directory is moved aside to DIR/.TAG.old, the new one renamed in, and the
// old one removed.
//
// # Loading
//
// Load reads the tag from latest (refusing a tag that leaves DIR), checks
// every file it reads against the manifest — a truncated or altered file
// is an error naming it — and restores the rank's state bit for bit into
// an engine built from the same config (a dszero file's tensors are read
// from the file where they go — at stages 1–3 into the engine's own
// buffers, the padding that stages 1 and 2 save in their optimizer state
// checked on the way; at stage 3 with offload_optimizer nvme through a
// buffer of the engine's swap pool into its swap files (load3.go) —
// never as a copy of the file, in the file's order,
// and each file's sha256 is computed from those reads (hashread.go), so
// that the file is read once): the next steps are those of the uninterrupted run. A checkpoint of another ZeRO stage or world size is
// resharded (reshard.go): every rank reads every saved rank's fp32 master
// and optimizer state, puts the model's back together and takes its own
// part in the new layout — what DeepSpeed needs its universal-checkpoint
// conversion for. Another model or optimizer is refused with what to
// change. A checkpoint DeepSpeed wrote (no manifest) loads too: its stage
// and world size are read from its files (the zero_pp_rank optimizer
// files, the ZeroStageEnum they record) and its loss scaler from the
// LossScaler object it pickled; with no sha256 to check, its files are
// checked by their zip entries' CRC-32s. A dszero checkpoint whose
// manifest is missing is refused.
//
// Every file is also checked for being this checkpoint's file of that
// rank (identity.go): dszero's files say which rank of how many wrote
// them, at which stage and step, over which partition; DeepSpeed's are
// checked by what they record (global_steps, dp_world_size, zero_stage,
// partition_count, partition sizes, param_slice_mappings). A file copied
// from another step, or two ranks' files swapped, is an error naming the
// file, what it says and what the checkpoint needs. Before a file's
// tensors are read, the sizes its storages declare are checked against
// what the model's checkpoint can hold (files.go): a compressed entry may
// declare, and inflate to, gigabytes.
package checkpoint
