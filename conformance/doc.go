// Package conformance runs reference cases — training runs recorded by real
// DeepSpeed — through dszero and reports, case by case, how close dszero
// comes: the evidence that swapping DeepSpeed for dszero changes nothing a
// user cares about. `dszero conformance DIR...` is its command line; `go
// test ./conformance` runs the shipped cases (testdata/README.md).
//
// # The case format
//
// A case is a directory laid out as the reference harness
// (shared/reference/harness) writes its runs, so that new runs of the
// harness are cases without conversion:
//
//	<root>/init/models.json              the models: for each model key, its parameters
//	                                     (name, shape) in named_parameters() order,
//	                                     init_file, data_file, data_shapes
//	<root>/init/<model>_init.safetensors the initial fp32 weights, one tensor per parameter
//	<root>/init/<model>_data.safetensors the data, leading dims [step, sample]:
//	                                     "tokens" int64 [.., T+1] (GPT) or "x", "y" f32 (MLP)
//	<root>/<model>/<run>/result.json     the recorded run (below)
//	<root>/<model>/<run>/final_fp32.safetensors   the final fp32 weights (optional, below)
//	<root>/<model>/<run>/case.json       optional: tolerances, notes, paths (below)
//	<root>/<model>/<run>/checkpoint.json optional: the structure of DeepSpeed's last
//	                                     checkpoint (checkpoint.Record)
//	<root>/<model>/<run>/ckpt/global_step5/  optional: DeepSpeed's own step-5 checkpoint
//
// Any directory holding a result.json is a case; its name is its path below
// the root given to Find (e.g. "gpt/z3_bf16"). ckpt/ directories are not
// searched.
//
// result.json (the fields read; the harness writes more):
//
//   - model: the key in models.json; ds_config: the config DeepSpeed ran;
//     deepspeed_version: whose semantics to follow (0.14.5 and 0.19.5 are
//     known; another is "unsupported").
//   - status: "ok", or anything else for a run that produced no result
//     (DeepSpeed hung or crashed): reported "no result", not counted
//     against a pass.
//   - steps: one record per optimizer step — loss (the mean over ranks and
//     micro-steps), lr_used, grad_norm, optional loss_scale, and
//     micro_losses, either {"rank0": [micro 0, micro 1, …], …} or a list of
//     {"micro", "rank", "loss"}. The number of ranks in micro_losses is the
//     world size the case runs on (in-process ranks); the number of records
//     is the number of steps.
//   - final_fp32_identical_to: when the run's own final_fp32.safetensors is
//     absent, the sibling run whose final weights are bit-identical (the
//     harness stores each distinct file once); followed up to 8 hops.
//
// case.json (every field optional; see Meta): init (the directory of
// models.json, relative to the case; default: the nearest init/ in the
// case directory or above it), model (the models.json key), ds_config (for
// a run whose result.json has none: the plain-PyTorch baselines, run as
// the equivalent DeepSpeed config), deepspeed_version, world_size, heads
// (the GPT's attention heads; models.json does not record them, default
// head size 16 as the harness's TinyGPT), tolerances ({loss_rel,
// grad_norm_rel, lr_rel, weights_abs}), notes. Unknown fields are an error.
//
// # The model
//
// The model is built from its description, never from the case's name:
// parameters wte, wpe, blocks.<i>.{ln1, attn.qkv, attn.proj, ln2, mlp.fc,
// mlp.proj}, ln_f and an optional lm_head make a GPT-2-style transformer
// (package model/gpt; tied head when lm_head is absent; widths from the
// shapes); fc1, fc2, … (weight, bias) make a ReLU MLP with a mean-squared
// error loss (package model/mlp). dszero's layout of the model must then be
// the description's parameter list exactly — names, shapes, order — or the
// case is "unsupported". A models.json entry may name arch, activation and
// loss; values dszero does not build are "unsupported" too, as are configs
// that dsconfig cannot compile or that the engine refuses (zero.CheckPlan):
// an unsupported case is never a pass.
//
// # The run
//
// The case trains on its world size of in-process ranks from the initial
// weights, with the harness's data layout: in step s, micro-step m, rank r
// reads micro-batch mb = m·world + r, samples s·G + mb·B … + B−1 (mod the
// number of samples), G = B·GAS·world. Matmuls use pure Go (the same
// numbers on every machine); NVMe offload swaps to an in-memory filesystem
// (the case compares numerics; nvme_path is created there).
//
// # The comparison
//
// Per step: the step loss and every rank's micro-step losses (relative),
// the gradient norm (relative; not for skipped steps), the lr (relative
// 1e-12), the loss scale when recorded (exactly); then the final fp32
// master weights (largest absolute difference; ‖Δ‖₂/‖w‖₂ is reported too,
// because a relative difference per element means nothing for weights near
// zero). Default tolerances (Defaults): fp32 losses and gradient norms 1e-5
// relative, weights 1e-5 absolute; bf16/fp16 losses 1e-3 relative,
// gradient norms 5e-3 relative, weights 5e-3 absolute. A case passes when
// every comparison is within its tolerance.
//
// # Checkpoints and resume
//
// dszero's run of a case saves a checkpoint after step 5 and after the
// step checkpoint.json describes (DeepSpeed's described_tag). Then:
//
//   - checkpoint: the described checkpoint must have every file DeepSpeed
//     wrote, with the same keys, types, dtypes and shapes and the same
//     recorded scalar values (counters, the param groups' lr and betas,
//     the loss scaler's state; floats to 1e-12 relative), and no file
//     DeepSpeed did not write (dszero's manifests aside). Keys DeepSpeed's
//     engine does not write at the top of a model-states file are the
//     recording run's client state and are not compared; DeepSpeed's copy
//     of zero_to_fp32.py is the one file dszero does not write (`dszero
//     export` does its work). "not recorded" without a checkpoint.json.
//   - resume: a second run loads dszero's step-5 checkpoint and trains to
//     the last step; losses, gradient norms, lr and final weights must
//     equal the uninterrupted run's bit for bit ("bit-exact"). When the
//     case holds DeepSpeed's own ckpt/global_step5, a third run resumes
//     from it, and its steps 6… and final weights are held to the case's
//     tolerances against the reference (Report.ResumeLoss,
//     Report.ResumeWeights). result.json's resume_from_step5 says whether
//     DeepSpeed recorded its own resume; the column notes when it did not.
//   - a departing resume: where resume_from_step5 also holds the resumed
//     run's "steps" and "final_fp32_file" (gen_case.py --keep-resumed), the
//     reference's resume departs from its uninterrupted run by design
//     (DeepSpeed's 1-bit optimizers drop their compression errors on load,
//     and in fp32 take an initialization step again), and both resumes —
//     from dszero's step-5 checkpoint and from DeepSpeed's — are held to
//     the case's tolerances against DeepSpeed's resumed run instead (losses
//     of steps 6…, final weights); "dszero's: …; DeepSpeed's: …".
//
// A difference in either fails the case.
//
// # Reference facts
//
// A directory holding a facts.json instead of a result.json is a case of
// another kind: values DeepSpeed's own classes and functions returned
// when called as its engine calls them (conformance/reference/facts.py
// makes them), each checked against the dszero code that reproduces it:
//
//		{"kind": K, "deepspeed_version": "0.14.5+…", "torch_version", "source", "command",
//		 "entries": [...]}
//
//	  - lr_schedule: {name, ds_config, lr: [the lr of optimizer step 1, 2,
//	    …], betas: [[β1, β2] per step] (OneCycle with cycle_momentum)} —
//	    the scheduler zero.NewScheduler builds from the ds_config, stepped
//	    once per optimizer step; relative 1e-12.
//	  - loss_scaler: {name, ds_config, events: [{overflow, scale} or
//	    {overflow, error}]} — the scale after each update of the scaler
//	    zero.NewLossScaler builds (DynamicLossScaler under ZeRO,
//	    FP16_Optimizer's rule at stage 0), and the error DeepSpeed raises at
//	    the minimum scale; exact.
//	  - estimator: {fn: zero2|zero3, total_params, largest_layer_params,
//	    num_gpus_per_node, num_nodes, cpu_offload, cpu_offload_params,
//	    zero_init, additional_buffer_factor, cpu, gpu} —
//	    estimate_zero2/3_model_states_mem_needs against package estimate;
//	    exact.
//	  - zero_to_fp32: {stage 2, world, numels, saved_lengths,
//	    params_from_flat} — the per-rank lengths of
//	    single_partition_of_fp32_groups that zero_to_fp32 reconstructs
//	    from, and where each parameter lies in the flat buffer; {stage 3,
//	    world, numel, partitioned_numel, padding} — zero3_partitioned_param_info.
//	    Against package zero/partition; exact.
//
// The facts are reported in a table of their own.
package conformance
