package monitor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type recorder struct {
	got  [][]Event
	fail error
}

func (r *recorder) Write(ev []Event) error { r.got = append(r.got, ev); return r.fail }
func (r *recorder) Close() error           { return r.fail }

// A failing monitor does not keep the batch from the others, and its error
// is returned.
func TestFanoutWritesEveryMonitor(t *testing.T) {
	boom := errors.New("disk full")
	a, b := &recorder{fail: boom}, &recorder{}
	f := fanout{a, b}
	batch := []Event{{Tag: TagLR, Value: 1, Step: 8}}
	if err := f.Write(batch); !errors.Is(err, boom) {
		t.Errorf("Write error %v, want %v", err, boom)
	}
	if diff := cmp.Diff([][]Event{batch}, b.got); diff != "" {
		t.Errorf("second monitor (-want +got):\n%s", diff)
	}
	if err := f.Close(); !errors.Is(err, boom) {
		t.Errorf("Close error %v, want %v", err, boom)
	}
}

func TestCSVErrorsNameFileAndStep(t *testing.T) {
	dir := t.TempDir()
	c, err := NewCSV(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A directory where the tag's file should be.
	if err := os.Mkdir(filepath.Join(dir, "Train_Samples_lr.csv"), 0o755); err != nil {
		t.Fatal(err)
	}
	err = c.Write([]Event{{Tag: TagTrainLoss, Value: 1, Step: 0}, {Tag: TagLR, Value: 1, Step: 64}})
	if err == nil || !strings.Contains(err.Error(), "Train_Samples_lr.csv") || !strings.Contains(err.Error(), "step 64") {
		t.Errorf("error %v, want one naming Train_Samples_lr.csv and step 64", err)
	}
	// Nothing of the failed batch was written.
	b, _ := os.ReadFile(filepath.Join(dir, "Train_Samples_train_loss.csv"))
	if diff := cmp.Diff("step,train_loss\r\n", string(b)); diff != "" {
		t.Errorf("train_loss file (-want +got):\n%s", diff)
	}

	blocker := filepath.Join(dir, "file")
	os.WriteFile(blocker, nil, 0o644)
	if _, err := New(Options{CSV: Output{Enabled: true, OutputPath: blocker, JobName: "j"}}); err == nil || !strings.Contains(err.Error(), "csv_monitor") {
		t.Errorf("New under a file: %v, want a csv_monitor error", err)
	}
	if _, err := New(Options{TensorBoard: Output{Enabled: true, OutputPath: blocker, JobName: "j"}}); err == nil || !strings.Contains(err.Error(), "tensorboard") {
		t.Errorf("New under a file: %v, want a tensorboard error", err)
	}
}
