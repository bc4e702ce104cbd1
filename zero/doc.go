// Package zero is dszero's engine core: one rank's training state and the
// optimizer step, with DeepSpeed's semantics.
//
// Vocabulary:
//
//   - flat buffer: all trainable parameters of a model in one []float32, in
//     named_parameters() order (model.Layout gives each tensor's view).
//   - working parameters: what the model computes with, in the training
//     precision (fp32, or fp16/bf16 values emulated by rounding).
//   - master parameters: the fp32 copy the optimizer updates. With fp32
//     training they are the working parameters themselves.
//   - gradient buffer: where backward accumulates, in fp32, across the
//     micro-steps of one optimizer step (gradient accumulation).
//   - partition: the slice of a flat buffer a rank owns under ZeRO.
//
// A Strategy decides what a rank keeps of these and what it does at unit
// boundaries (model.UnitHooks) and at the step. NewEngine picks one from
// plan.Zero.Stage, in one switch: ZeRO stage 0 is Stage0 (this package),
// stage 1 is stage1.Strategy (optimizer state partitioned), stage 2 is
// stage2.Strategy (gradients partitioned too), stage 3 is stage3.Strategy
// (parameters partitioned too, gathered per unit).
// Stages are implementations of one interface, never flags inside one;
// what they share (the step's contract, gradient averaging, the
// partitioned optimizer of stages 1 and 2) is in internal/zcore.
//
// Ranks: every rank runs its own Engine on its own comm.Comm (Options.Comm)
// with a plan compiled for the world size. Engine.Step and GatherMaster are
// collectives: every rank calls them, in the same order. Which stage holds
// what, per rank (Ψ parameters, N ranks, fp32 with Adam; each term padded
// to the partitioned layout of package partition at stages 1 and 2):
//
//	stage 0: master 4Ψ (= the working parameters), gradients 4Ψ, Adam 8Ψ
//	stage 1: working 4Ψ, gradients 4Ψ, master 4Ψ/N, Adam 8Ψ/N
//	stage 2: working 4Ψ, gradient partition 4Ψ/N, master 4Ψ/N, Adam 8Ψ/N,
//	         plus the gradients of the units in backward and in buckets
//
// One optimizer step, as DeepSpeed takes it:
//
//	for each micro-step: forward, backward of loss × loss_scale / GAS
//	    (stage 2: each bucket of finished gradients is averaged and reduced
//	    during backward, and added to the rank's gradient partition)
//	reduce gradients across ranks (stages 0 and 1, at the boundary), averaged
//	fp16/bf16: if any gradient is inf/NaN, skip the step; fp16: update the loss
//	    scale (before unscaling: a clean step that grows the scale divides
//	    its gradients by the grown one, fp16wrap.go)
//	global norm → clip coefficient (and 1/loss_scale) → scale gradients
//	optimizer.step() on the master parameters with the scheduler's lr
//	copy master → working parameters (rounded), zero the gradients
//	    (stages 1 and 2: all-gather the updated partitions)
//	scheduler.step() (only after a step that was applied)
//
// Reading one step in the code, in order (train.Run drives it):
//
//	train/train.go         the loop: Batches, Forward, Backward(GradScale), Step
//	model/<model>          forward and backward, calling the unit hooks
//	stage3/hooks.go        the hooks: gather a unit's group, reduce its gradients
//	stage3/fetch.go        need → issue (all-gather) → land; prefetch along the
//	                       recorded trace; done → release
//	offload/paramswap.go   offload_param nvme: a partition read from its swap
//	                       file into the all-gather, written back after the step
//	stage3/readahead.go    those reads started ahead of the gather, by the trace
//	stage3/reduce.go       a unit's gradients averaged and reduce-scattered
//	zero/engine.go         Engine.Step: loss scale, lr, the strategy's step
//	stage3/stage3.go       step: the norm, clipping, sub-group by sub-group
//	offload/optimswap.go   offload_optimizer nvme: a sub-group's master and
//	                       state swapped in and out around its step
//	zero/optim/adam.go     the update itself
//
// stage3's Example_step prints that order for one step of a 3-unit model
// with the optimizer on NVMe, and Example_stepParamNVMe with the
// parameters there too (stage3.Config.Trace is the hook they listen on); the
// stages 0–2 follow the same loop with their own step (stage0.go,
// stage1/, stage2/, internal/zcore/shard.go).
//
// Gradients are kept, accumulated and reduced in the dtypes DeepSpeed
// uses (zcore.DeepSpeedGradDTypes: communication_data_type defaults to the
// model's dtype). Stage 3 offloads to the pinned host and NVMe and runs on
// groups of ranks (MiCS, ZeRO++ hpZ; see package stage3).
//
// Partial optimizer offload (offload_optimizer.ratio < 1, stage 3, device
// cpu) runs as DeepSpeed does: of the rank's k sub-groups, the release's
// rule (partition.OffloadOrder: the first int(ratio·k) in 0.14.5, the last
// k − int((1−ratio)·k) from 0.18.0) keep master, gradient partition and
// DeepSpeedCPUAdam state on the pinned host; the others keep them on the
// device and are stepped by a backup torch.optim.AdamW with the optimizer
// block's lr, betas, eps and weight_decay, which the scheduler never
// updates (a warning says so when there is a scheduler).
//
// Not implemented, and refused or reported by name (CheckPlan): overlap of
// the stage 1 reduction with backward (stage 2 overlaps; numbers are the
// same either way), gradient_allreduce_op "sum", NVMe offload at stages 1
// and 2, partial offload with device nvme or with an optimizer other than
// DeepSpeedCPUAdam (DeepSpeed asserts it).
package zero
