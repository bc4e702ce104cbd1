// Package hfstate lays out checkpoints as Hugging Face's Trainer and
// Accelerate write them, so that a run dszero saved resumes in their
// PyTorch jobs and theirs in dszero. It names the files and encodes the
// small ones; the sharded state dicts go through package dcp
// (torch.distributed.checkpoint) and the DeepSpeed layout through package
// checkpoint.
//
// Read for it: transformers/trainer.py (_save_checkpoint, _save_rng_state,
// _save_optimizer_and_scheduler, save_model, _sorted_checkpoints,
// _rotate_checkpoints, _load_rng_state, _load_optimizer_and_scheduler),
// trainer_callback.py (TrainerState, TrainerControl, ExportableState) and
// trainer_utils.py (get_last_checkpoint) of transformers 4.5x; and
// accelerate/utils/fsdp_utils.py (save_fsdp_model, save_fsdp_optimizer,
// load_fsdp_*), accelerate/checkpointing.py (save_accelerator_state),
// accelerator.py (save_state) and utils/constants.py of Accelerate's main
// branch.
//
// # The Trainer's checkpoint-N
//
// Every save_steps the Trainer writes OUTPUT_DIR/checkpoint-N, N the
// global step (CheckpointDir), holding what its backend saves:
//
//	with DeepSpeed  global_stepN/, latest, zero_to_fp32.py    engine.save_checkpoint(checkpoint-N)
//	                scheduler.pt        only for an HF scheduler (a DeepSpeed config's scheduler is in global_stepN)
//	with FSDP       pytorch_model_fsdp_0/, optimizer_0/        SHARDED_STATE_DICT (torch.distributed.checkpoint)
//	                pytorch_model_fsdp.bin, optimizer.bin     FULL_STATE_DICT (rank 0's torch.save)
//	                scheduler.pt
//	otherwise       optimizer.pt, scheduler.pt
//	always          model.safetensors, config.json ...        save_model (weights unless ZeRO-3 without gathering)
//	                trainer_state.json                        TrainerState (TrainerState)
//	                rng_state.pth | rng_state_R.pth           Python, NumPy, torch and CUDA generators
//	                training_args.bin                         torch.save of TrainingArguments
//	                scaler.pt                                 fp16 loss scaler, when there is one
//
// dszero writes these but two: training_args.bin is a pickled
// TrainingArguments object, not data dszero has; and rng_state files hold
// generators dszero does not use (rng.go: it writes its own,
// dszero_rng_state_R.pth, and a Trainer resuming says reproducibility is
// not guaranteed, which is true). zero_to_fp32.py is DeepSpeed's script,
// copied by DeepSpeed's save_checkpoint; `dszero export` does its work.
//
// trainer_state.json is json.dumps(asdict(state), indent=2,
// sort_keys=True) plus a newline: Python's number spellings (1e-05, 2.0,
// NaN, Infinity), which pyjson.go writes and reads. Its stateful_callbacks
// hold TrainerControl's state, should_save true (the save is under way).
//
// save_total_limit keeps the newest checkpoints, and the best one
// (best_model_checkpoint) besides (RotationPlan). resume_from_checkpoint
// true means the checkpoint-N with the largest N (get_last_checkpoint's
// ^checkpoint-(\d+)$, folders only), a path means that folder
// (ResolveResume). dszero assembles a checkpoint in a staging folder whose
// name matches neither pattern and renames it into place (Commit), so a
// crash mid-save never leaves a checkpoint-N to resume from.
//
// # Accelerate's FSDP state dicts
//
// save_fsdp_model / save_fsdp_optimizer (Accelerate's save_state, and the
// Trainer's FSDP saves) write, for model and optimizer index I:
//
//	SHARDED_STATE_DICT  pytorch_model_fsdp_I/   dcp.save({"model": model_sd})
//	                    optimizer_I/            dcp.save({"optimizer": optim_sd})
//	FULL_STATE_DICT     pytorch_model_fsdp.bin  torch.save(model_sd), rank 0 (_I for I > 0)
//	                    optimizer.bin           torch.save(optim_sd), rank 0
//	LOCAL_STATE_DICT    pytorch_model_fsdp_rankR.bin   each rank's flat parameters (FSDP1 only; not supported)
//
// and save_state adds scheduler.bin (scheduler.state_dict()), sampler.bin
// (a SeedableRandomSampler's state), scaler.pt and random_states_R.pkl
// (Python's, NumPy's and torch's generators, and the step). The model
// state dict is keyed by parameter name; the optimizer's (FSDP1's
// optim_state_dict and FSDP2's get_optimizer_state_dict alike) by
// parameter name too: state.NAME.{step, exp_avg, exp_avg_sq} and
// param_groups[g] with the hyperparameters and the names in "params"
// (OptimizerState). Flattened by dcp.save, the keys read
// model.NAME, optimizer.state.NAME.exp_avg, optimizer.param_groups.0.lr
// (ModelFQN, OptimizerFQN, ParamGroupFQN). Both state dicts shard every
// tensor by rows (dcp.RowChunk); the step count is a replicated
// 0-dimensional float32 tensor.
package hfstate
