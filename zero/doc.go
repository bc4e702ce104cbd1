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
// boundaries (model.UnitHooks) and at the step. ZeRO stage 0 is Stage0;
// the partitioning stages are further implementations of the same
// interface, never flags inside one.
//
// One optimizer step, as DeepSpeed takes it:
//
//	for each micro-step: forward, backward of loss × loss_scale / GAS
//	reduce gradients across ranks (stage dependent), averaged
//	fp16/bf16: if any gradient is inf/NaN, skip the step and update the loss scale
//	global norm → clip coefficient (and 1/loss_scale) → scale gradients
//	optimizer.step() on the master parameters with the scheduler's lr
//	copy master → working parameters (rounded), zero the gradients
//	scheduler.step() (only after a step that was applied)
package zero
