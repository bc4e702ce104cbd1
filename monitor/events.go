package monitor

// The tags DeepSpeed's engine writes. All of them use global_samples as the
// step.
const (
	TagTrainLoss = "Train/Samples/train_loss"
	TagLR        = "Train/Samples/lr"
	TagLossScale = "Train/Samples/loss_scale"

	// The global timers, in milliseconds, written at each boundary when
	// wall_clock_breakdown (or the flops profiler) is on.
	TagForwardMS           = "Train/Samples/elapsed_time_ms_forward"
	TagBackwardMS          = "Train/Samples/elapsed_time_ms_backward"
	TagBackwardInnerMS     = "Train/Samples/elapsed_time_ms_backward_inner"
	TagBackwardAllreduceMS = "Train/Samples/elapsed_time_ms_backward_allreduce"
	TagStepMS              = "Train/Samples/elapsed_time_ms_step"
)

// Step is what one optimizer step (one gradient-accumulation boundary)
// reports.
type Step struct {
	// SamplesBefore is global_samples when the boundary's backward runs,
	// before this step counts its samples; DeepSpeed logs train_loss there.
	SamplesBefore int64
	// SamplesAfter is global_samples after the step has added its samples
	// (train_batch_size, or micro-batch size × micro-batches run when the
	// caller owns accumulation); DeepSpeed logs lr and loss_scale there.
	SamplesAfter int64

	// Loss is the step's loss as DeepSpeed accumulates it: the sum over the
	// step's micro-batches of each micro-batch's mean loss divided by
	// gradient_accumulation_steps, i.e. the mean micro-batch loss. Pass the
	// float32 loss widened to float64 to get DeepSpeed's CSV text.
	Loss float64
	// LR is the first parameter group's learning rate read after the step
	// (get_lr()[0]): the scheduler has already stepped, so it is the rate
	// the next step uses; a step skipped on fp16 overflow leaves it as is.
	LR float64
	// LossScale is the fp16 loss scale after the step has updated it;
	// HasLossScale is false for bf16 and fp32, which log no loss_scale.
	LossScale    float64
	HasLossScale bool
}

// StepEvents is what DeepSpeed's engine writes for one step, in its order:
// train_loss from the boundary backward, then lr and loss_scale from step().
//
// The non-pipeline engine wrote train_loss this way up to DeepSpeed 0.18.2;
// 0.18.3 (PR #7665, the PyTorch-style backward) dropped it, and the pipeline
// engine still writes it (at the post-step global_samples). dszero keeps it:
// a loss curve is what a TensorBoard user opens the board for.
func StepEvents(s Step) []Event {
	ev := []Event{
		{Tag: TagTrainLoss, Value: s.Loss, Step: s.SamplesBefore},
		{Tag: TagLR, Value: s.LR, Step: s.SamplesAfter},
	}
	if s.HasLossScale {
		ev = append(ev, Event{Tag: TagLossScale, Value: s.LossScale, Step: s.SamplesAfter})
	}
	return ev
}

// Timers are the global timers of one step in milliseconds.
type Timers struct {
	ForwardMS, BackwardMS, BackwardInnerMS, BackwardAllreduceMS, StepMS float64
}

// TimerEvents is what DeepSpeed's _write_monitor writes at a boundary when
// wall_clock_breakdown is on, at the post-step global_samples.
func TimerEvents(samplesAfter int64, t Timers) []Event {
	return []Event{
		{Tag: TagForwardMS, Value: t.ForwardMS, Step: samplesAfter},
		{Tag: TagBackwardMS, Value: t.BackwardMS, Step: samplesAfter},
		{Tag: TagBackwardInnerMS, Value: t.BackwardInnerMS, Step: samplesAfter},
		{Tag: TagBackwardAllreduceMS, Value: t.BackwardAllreduceMS, Step: samplesAfter},
		{Tag: TagStepMS, Value: t.StepMS, Step: samplesAfter},
	}
}
