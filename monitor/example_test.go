package monitor_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/dszero/dszero/monitor"
)

// A training loop opens the monitors once, writes each optimizer step's
// events and closes them at the end. Here: csv_monitor, 3 steps of
// train_batch_size 16 with bf16 (no loss scale).
func ExampleNew() {
	out, _ := os.MkdirTemp("", "monitor-example")
	defer os.RemoveAll(out)

	m, err := monitor.New(monitor.Options{
		Rank: 0, // every rank calls New; only rank 0 writes
		CSV:  monitor.Output{Enabled: true, OutputPath: out, JobName: monitor.DefaultJobName},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	const trainBatchSize = 16
	var globalSamples int64
	for step, loss := range []float32{2.5, 2.25, 2.0} {
		before := globalSamples
		globalSamples += trainBatchSize // the step consumes train_batch_size samples
		err := m.Write(monitor.StepEvents(monitor.Step{
			SamplesBefore: before, SamplesAfter: globalSamples,
			Loss: float64(loss), LR: 1e-3 * float64(step+1),
		}))
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := m.Close(); err != nil {
		fmt.Println(err)
		return
	}
	b, _ := os.ReadFile(filepath.Join(out, "DeepSpeedJobName", "Train_Samples_lr.csv"))
	fmt.Printf("%q\n", b)
	// Output:
	// "step,lr\r\n16,0.001\r\n32,0.002\r\n48,0.003\r\n"
}
