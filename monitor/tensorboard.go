package monitor

import (
	"fmt"

	"github.com/dszero/dszero/monitor/tfevents"
)

// TensorBoard is DeepSpeed's TensorBoardMonitor: a SummaryWriter on
// output_path/job_name that add_scalar's every event (old-style
// simple_value scalars) and flushes after each batch.
type TensorBoard struct {
	w       *tfevents.Writer
	scratch []tfevents.Scalar
}

// NewTensorBoard creates dir and a new event file in it.
func NewTensorBoard(dir string, o tfevents.Options) (*TensorBoard, error) {
	w, err := tfevents.Create(dir, o)
	if err != nil {
		return nil, fmt.Errorf("monitor: tensorboard output_path/job_name %q: %w", dir, err)
	}
	return &TensorBoard{w: w}, nil
}

// Path is the event file's path.
func (t *TensorBoard) Path() string { return t.w.Path() }

// Write appends one event per scalar and writes them to the file.
func (t *TensorBoard) Write(events []Event) error {
	t.scratch = t.scratch[:0]
	for _, e := range events {
		t.scratch = append(t.scratch, tfevents.Scalar(e))
	}
	if err := t.w.AddScalars(t.scratch); err != nil {
		return fmt.Errorf("monitor: tensorboard: %w", err)
	}
	return nil
}

// Close fsyncs and closes the event file.
func (t *TensorBoard) Close() error {
	if err := t.w.Close(); err != nil {
		return fmt.Errorf("monitor: tensorboard: %w", err)
	}
	return nil
}
