package main

import (
	"fmt"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/monitor"
	"github.com/dszero/dszero/train"
)

// stepMonitor writes each step's curves to the plan's tensorboard and
// csv_monitor outputs, as DeepSpeed's engine writes them on rank 0 (see
// package monitor). Its zero value, with no monitor enabled, does nothing.
type stepMonitor struct {
	m              monitor.Monitor
	trainBatchSize int64
	fp16, timers   bool
}

// openMonitors opens the monitors the plan enables; only the lead process
// (global rank 0) writes. Close is on the job's closers.
func (j *trainJob) openMonitors() (*stepMonitor, error) {
	p := j.plan
	mo := p.Monitors
	o := monitor.Options{
		TensorBoard: monitor.Output{Enabled: mo.TensorBoard, OutputPath: mo.TensorBoardDir, JobName: mo.JobName},
		CSV:         monitor.Output{Enabled: mo.CSV, OutputPath: mo.CSVDir, JobName: mo.CSVJobName},
		WandB:       mo.WandB, Comet: mo.Comet,
	}
	if !j.l.lead() {
		o.Rank = 1
	}
	sm := &stepMonitor{trainBatchSize: p.Batch.TrainBatchSize, fp16: p.Precision.DType == device.F16, timers: p.WallClockBreakdown}
	if !o.Enabled() {
		return sm, nil
	}
	m, err := monitor.New(o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", j.name, err)
	}
	sm.m = m
	j.closers = append(j.closers, func() {
		if err := m.Close(); err != nil {
			fmt.Fprintf(j.stderr, "dszero train: closing the monitors: %v\n", err)
		}
	})
	if mo.TensorBoard {
		fmt.Fprintf(j.stdout, "tensorboard: writing %s\n", o.TensorBoard.Dir())
	}
	if mo.CSV {
		fmt.Fprintf(j.stdout, "csv_monitor: writing %s\n", o.CSV.Dir())
	}
	return sm, nil
}

// write logs step r. The loss is rank 0's, summed over its micro-steps
// in float32 as the engine's self.losses sums loss/GAS; the x-axis is
// global_samples (train_batch_size per step).
func (sm *stepMonitor) write(r train.Record) error {
	if sm.m == nil {
		return nil
	}
	loss := r.Loss
	if len(r.Micro) > 0 && len(r.Micro[0]) > 0 {
		var acc float32
		gas := float32(len(r.Micro[0]))
		for _, l := range r.Micro[0] {
			acc += l / gas
		}
		loss = float64(acc)
	}
	after := r.Step * sm.trainBatchSize
	ev := monitor.StepEvents(monitor.Step{SamplesBefore: after - sm.trainBatchSize, SamplesAfter: after, Loss: loss, LR: r.LR,
		LossScale: r.LossScale, HasLossScale: sm.fp16})
	if sm.timers && r.Breakdown != nil {
		// dszero times the forward, the backward and the step; it has no
		// separate backward_inner / backward_allreduce timers to write.
		b := r.Breakdown
		for _, e := range monitor.TimerEvents(after, monitor.Timers{ForwardMS: b.ForwardMS, BackwardMS: b.BackwardMS, StepMS: b.StepMS}) {
			if e.Tag != monitor.TagBackwardInnerMS && e.Tag != monitor.TagBackwardAllreduceMS {
				ev = append(ev, e)
			}
		}
	}
	if err := sm.m.Write(ev); err != nil {
		return fmt.Errorf("step %d: monitor: %w", r.Step, err)
	}
	return nil
}
