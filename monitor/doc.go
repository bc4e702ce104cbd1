// Package monitor writes the training curves that DeepSpeed's monitors
// write, to the same files, so that a ds_config with a "tensorboard" or
// "csv_monitor" block shows under dszero what it shows under DeepSpeed.
//
// # Events
//
// An Event is one scalar: a Tag naming the curve, a Value, and a Step on
// the x-axis. DeepSpeed's engine uses global_samples — the number of
// training samples consumed so far, train_batch_size per optimizer step —
// as the x-axis of every curve, not the step count; so does dszero. The
// engine writes at gradient-accumulation boundaries only, on rank 0 only:
//
//	Train/Samples/train_loss   mean micro-batch loss of the step, at
//	                           global_samples before the step counts itself
//	Train/Samples/lr           learning rate after the step (scheduler stepped),
//	                           at global_samples after the step
//	Train/Samples/loss_scale   fp16 only: the loss scale after the step,
//	                           at global_samples after the step
//
// and, with wall_clock_breakdown, the Train/Samples/elapsed_time_ms_*
// timers. StepEvents and TimerEvents build these batches; each tag gets one
// value per step.
//
// # Monitors
//
// A Monitor takes batches of events (Write) and is closed once (Close). New
// builds DeepSpeed's MonitorMaster from plain Options: it fans each batch
// out to every enabled monitor, and only on rank 0 — other ranks get a
// Monitor that discards, as in DeepSpeed, where only rank 0 creates
// writers.
//
//   - tensorboard: a TensorBoard event file
//     output_path/job_name/events.out.tfevents.<secs>.<host>.<pid>.<n>, the
//     file torch.utils.tensorboard.SummaryWriter writes (see package
//     tfevents), one simple_value scalar event per Event, written through
//     after every batch and fsynced on Close.
//   - csv_monitor: output_path/job_name/<tag with / and space as _>.csv per
//     tag, "step,<last element of the tag>" then "<step>,<value>" rows, in
//     Python csv.writer's text (see CSV).
//   - wandb, comet: refused by New with an error saying why (both log
//     through their Python clients to their services, and their offline
//     formats are private to those clients) and what to enable instead.
//
// DeepSpeed's defaults are output_path "" and job_name "DeepSpeedJobName",
// i.e. ./DeepSpeedJobName; the two file monitors have separate blocks and
// may point at different directories.
//
// # What differs from DeepSpeed, on purpose
//
//   - A resumed run does not repeat the CSV header in the middle of a file.
//   - CSV values print as Python floats always; DeepSpeed prints a loss
//     scale that is still the initial int (2**initial_scale_power, before
//     its first update) as "65536" where dszero prints "65536.0".
//
// The reference is DeepSpeed 0.19.6 (commit edaa7221), deepspeed/monitor/
// and runtime/engine.py; train_loss as the 0.18.2 engine wrote it (see
// StepEvents).
package monitor
