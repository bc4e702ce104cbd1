package monitor

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/dszero/dszero/monitor/tfevents"
)

// Event is one scalar DeepSpeed logs: the value of a curve (Tag) at a point
// on its x-axis (Step). DeepSpeed's engine passes global_samples as Step, so
// the x-axis counts training samples, not optimizer steps.
type Event struct {
	Tag   string
	Value float64
	Step  int64
}

// Monitor receives the events of a training run. Write is called once per
// batch of events (DeepSpeed's write_events), Close once at the end. A
// Monitor is used by one goroutine, the training loop of rank 0.
type Monitor interface {
	Write(events []Event) error
	Close() error
}

// DefaultJobName is DeepSpeed's default job_name for tensorboard and
// csv_monitor.
const DefaultJobName = "DeepSpeedJobName"

// Output is a file monitor's block of ds_config ("tensorboard" or
// "csv_monitor"): its files go to OutputPath/JobName, relative to the working
// directory when OutputPath is relative (DeepSpeed's default output_path is
// "", so the default directory is ./DeepSpeedJobName).
type Output struct {
	Enabled    bool
	OutputPath string // output_path
	JobName    string // job_name; DeepSpeed's default is DefaultJobName
}

// Dir is os.path.join(output_path, job_name).
func (o Output) Dir() string { return filepath.Join(o.OutputPath, o.JobName) }

// Options say which monitors to run and where. They are plain values: the
// training loop maps its config onto them.
type Options struct {
	// Rank is this process's global rank. As in DeepSpeed's MonitorMaster,
	// only rank 0 opens files and writes; every other rank gets a Monitor
	// that discards.
	Rank int

	TensorBoard Output // ds_config "tensorboard"
	CSV         Output // ds_config "csv_monitor"

	// WandB and Comet are the "enabled" keys of ds_config "wandb" and
	// "comet". Both monitors need their services; New refuses them (on every
	// rank, so that no rank trains while another has failed).
	WandB bool
	Comet bool

	// Now, Hostname and PID name the TensorBoard event file and stamp its
	// events; zero values take time.Now, os.Hostname and os.Getpid.
	Now      func() time.Time
	Hostname string
	PID      int
}

// Enabled reports whether any monitor is configured, DeepSpeed's
// monitor_config.enabled; a loop may skip building events when it is false.
func (o Options) Enabled() bool {
	return o.TensorBoard.Enabled || o.CSV.Enabled || o.WandB || o.Comet
}

// ErrUnsupported marks a monitor that dszero refuses to run.
var ErrUnsupported = errors.New("monitor not supported by dszero")

// Validate reports every monitor in o that dszero cannot run.
func (o Options) Validate() error {
	var errs []error
	if o.WandB {
		errs = append(errs, fmt.Errorf(`ds_config "wandb": {"enabled": true}: %w: Weights & Biases logging runs inside the wandb Python client `+
			`and its background service, which talk to the W&B server; even with WANDB_MODE=offline it is that service that writes the run `+
			`directory, in wandb's private, versioned .wandb record format, which dszero cannot reproduce exactly. `+
			`Set "wandb": {"enabled": false} and enable "tensorboard" (W&B's TensorBoard integration can upload its event files) or "csv_monitor"`, ErrUnsupported))
	}
	if o.Comet {
		errs = append(errs, fmt.Errorf(`ds_config "comet": {"enabled": true}: %w: Comet logging runs inside the comet_ml Python client, `+
			`which sends each metric to the Comet server; its offline mode writes an archive in comet_ml's own undocumented format for `+
			`comet_ml to upload, which dszero cannot reproduce exactly. `+
			`Set "comet": {"enabled": false} and enable "tensorboard" or "csv_monitor"`, ErrUnsupported))
	}
	return errors.Join(errs...)
}

// New starts the monitors o enables, as DeepSpeed's MonitorMaster does:
// TensorBoard, then CSV, each receiving every Write. It refuses wandb and
// comet on every rank; on ranks other than 0, and when nothing is enabled,
// it returns a Monitor that discards.
func New(o Options) (Monitor, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	if o.Rank != 0 {
		return discard{}, nil
	}
	var ms fanout
	if o.TensorBoard.Enabled {
		tb, err := NewTensorBoard(o.TensorBoard.Dir(), tfevents.Options{Now: o.Now, Hostname: o.Hostname, PID: o.PID})
		if err != nil {
			return nil, err
		}
		ms = append(ms, tb)
	}
	if o.CSV.Enabled {
		c, err := NewCSV(o.CSV.Dir())
		if err != nil {
			return nil, errors.Join(err, ms.Close())
		}
		ms = append(ms, c)
	}
	switch len(ms) {
	case 0:
		return discard{}, nil
	case 1:
		return ms[0], nil
	}
	return ms, nil
}

// fanout writes every batch to each of its monitors in order, as
// MonitorMaster does. A monitor that fails does not stop the others.
type fanout []Monitor

func (f fanout) Write(events []Event) error {
	var errs []error
	for _, m := range f {
		errs = append(errs, m.Write(events))
	}
	return errors.Join(errs...)
}

func (f fanout) Close() error {
	var errs []error
	for _, m := range f {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}

// discard is the Monitor of a rank other than 0, or of a run with no monitor.
type discard struct{}

func (discard) Write([]Event) error { return nil }
func (discard) Close() error        { return nil }

var (
	_ Monitor = fanout(nil)
	_ Monitor = discard{}
	_ Monitor = (*TensorBoard)(nil)
	_ Monitor = (*CSV)(nil)
)
