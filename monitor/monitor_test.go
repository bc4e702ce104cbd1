package monitor_test

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/dszero/dszero/monitor"
	"github.com/dszero/dszero/monitor/internal/tbread"
)

func TestNewRefusesWandBAndComet(t *testing.T) {
	for _, tc := range []struct {
		name        string
		o           monitor.Options
		mentions    []string
		notMentions []string
	}{
		{"wandb", monitor.Options{WandB: true}, []string{`"wandb"`, "WANDB_MODE=offline", `"enabled": false`, `"tensorboard"`, `"csv_monitor"`}, []string{`"comet"`}},
		{"comet", monitor.Options{Comet: true}, []string{`"comet"`, "offline", `"tensorboard"`, `"csv_monitor"`}, []string{`"wandb"`}},
		{"both, every problem at once", monitor.Options{WandB: true, Comet: true, TensorBoard: monitor.Output{Enabled: true}}, []string{`"wandb"`, `"comet"`}, nil},
		{"rank 1 refuses too", monitor.Options{Rank: 1, WandB: true}, []string{`"wandb"`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.o.TensorBoard.OutputPath = dir
			m, err := monitor.New(tc.o)
			if err == nil {
				m.Close()
				t.Fatal("New succeeded, want an error")
			}
			if !errors.Is(err, monitor.ErrUnsupported) {
				t.Errorf("error %v is not ErrUnsupported", err)
			}
			for _, s := range tc.mentions {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not mention %s:\n%v", s, err)
				}
			}
			for _, s := range tc.notMentions {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error mentions %s:\n%v", s, err)
				}
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("a refused config created %d entries in output_path", len(ents))
			}
		})
	}
}

func TestOnlyRankZeroWrites(t *testing.T) {
	dir := t.TempDir()
	o := monitor.Options{
		Rank:        3,
		TensorBoard: monitor.Output{Enabled: true, OutputPath: dir, JobName: "tb"},
		CSV:         monitor.Output{Enabled: true, OutputPath: dir, JobName: "csv"},
	}
	m, err := monitor.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Write(monitor.StepEvents(monitor.Step{SamplesAfter: 8, Loss: 1, LR: 1})); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("rank 3 created %d entries, want none (only rank 0 writes)", len(ents))
	}
	if !o.Enabled() || (monitor.Options{}).Enabled() {
		t.Error("Enabled is wrong")
	}
}

func TestStepEvents(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    monitor.Step
		want []monitor.Event
	}{
		{"bf16: no loss scale", monitor.Step{SamplesBefore: 0, SamplesAfter: 32, Loss: 2.5, LR: 1e-4},
			[]monitor.Event{{"Train/Samples/train_loss", 2.5, 0}, {"Train/Samples/lr", 1e-4, 32}}},
		{"fp16", monitor.Step{SamplesBefore: 32, SamplesAfter: 64, Loss: 2, LR: 2e-4, LossScale: 32768, HasLossScale: true},
			[]monitor.Event{{"Train/Samples/train_loss", 2, 32}, {"Train/Samples/lr", 2e-4, 64}, {"Train/Samples/loss_scale", 32768, 64}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, monitor.StepEvents(tc.s)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	got := monitor.TimerEvents(96, monitor.Timers{ForwardMS: 1, BackwardMS: 2, BackwardInnerMS: 3, BackwardAllreduceMS: 4, StepMS: 5})
	want := []monitor.Event{
		{"Train/Samples/elapsed_time_ms_forward", 1, 96},
		{"Train/Samples/elapsed_time_ms_backward", 2, 96},
		{"Train/Samples/elapsed_time_ms_backward_inner", 3, 96},
		{"Train/Samples/elapsed_time_ms_backward_allreduce", 4, 96},
		{"Train/Samples/elapsed_time_ms_step", 5, 96},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("TimerEvents (-want +got):\n%s", diff)
	}
}

// run is a small fp16 run: train_batch_size 32, a loss that falls, a
// warm-up lr, one overflow at step 3 that halves the scale.
type run struct {
	steps []monitor.Step
}

func newRun() run {
	var r run
	scale := 65536.0
	for i := int64(0); i < 6; i++ {
		if i == 3 {
			scale /= 2
		}
		r.steps = append(r.steps, monitor.Step{
			SamplesBefore: 32 * i, SamplesAfter: 32 * (i + 1),
			Loss: float64(float32(2.5 - 0.25*float64(i))), LR: 1e-5 * float64(i+1),
			LossScale: scale, HasLossScale: true,
		})
	}
	return r
}

func writeRun(t *testing.T, o monitor.Options, r run) {
	t.Helper()
	m, err := monitor.New(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range r.steps {
		if err := m.Write(monitor.StepEvents(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// point is one scalar of a curve as a reader sees it.
type point struct {
	Step  int64
	Value float32
}

// curves groups the scalar records by tag, failing on any other record after
// the first (file_version).
func curves(t *testing.T, recs []tbread.Record) map[string][]point {
	t.Helper()
	if len(recs) == 0 || recs[0].What != "file_version" || recs[0].FileVersion != "brain.Event:2" {
		t.Fatalf("first record %+v, want file_version brain.Event:2", recs[:min(1, len(recs))])
	}
	out := map[string][]point{}
	for i, r := range recs[1:] {
		if r.What != "summary" || len(r.Values) != 1 || r.Values[0].Kind != "simple_value" {
			t.Fatalf("record %d = %+v, want one simple_value summary", i+1, r)
		}
		out[r.Values[0].Tag] = append(out[r.Values[0].Tag], point{r.Step, r.Values[0].SimpleValue})
	}
	return out
}

func wantCurves(r run) map[string][]point {
	out := map[string][]point{}
	for _, s := range r.steps {
		out["Train/Samples/train_loss"] = append(out["Train/Samples/train_loss"], point{s.SamplesBefore, float32(s.Loss)})
		out["Train/Samples/lr"] = append(out["Train/Samples/lr"], point{s.SamplesAfter, float32(s.LR)})
		out["Train/Samples/loss_scale"] = append(out["Train/Samples/loss_scale"], point{s.SamplesAfter, float32(s.LossScale)})
	}
	return out
}

// oneScalarPerTagPerStep fails when a reader sees a tag twice at one step.
func oneScalarPerTagPerStep(t *testing.T, c map[string][]point) {
	t.Helper()
	for tag, pts := range c {
		seen := map[int64]bool{}
		for _, p := range pts {
			if seen[p.Step] {
				t.Errorf("%s has two scalars at step %d", tag, p.Step)
			}
			seen[p.Step] = true
		}
	}
}

var eventFileName = regexp.MustCompile(`^events\.out\.tfevents\.\d{10}\.testhost\.77\.0$`)

func tensorBoardRun(t *testing.T) (string, run) {
	out := t.TempDir()
	r := newRun()
	var tick int64
	writeRun(t, monitor.Options{
		TensorBoard: monitor.Output{Enabled: true, OutputPath: out, JobName: "bert_job"},
		Hostname:    "testhost", PID: 77,
		Now: func() time.Time { tick++; return time.Unix(1767225600+tick, 0) },
	}, r)
	ents, err := os.ReadDir(filepath.Join(out, "bert_job"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || !eventFileName.MatchString(ents[0].Name()) {
		t.Fatalf("output_path/job_name holds %v, want one events.out.tfevents.<secs>.testhost.77.0", ents)
	}
	return filepath.Join(out, "bert_job", ents[0].Name()), r
}

func TestTensorBoardReadBackWithSchema(t *testing.T) {
	path, r := tensorBoardRun(t)
	recs, err := tbread.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	got := curves(t, recs)
	oneScalarPerTagPerStep(t, got)
	if diff := cmp.Diff(wantCurves(r), got); diff != "" {
		t.Errorf("curves (-want +got):\n%s", diff)
	}
	// Wall times come from the clock, one tick per event, in order.
	for i, rec := range recs {
		if want := float64(1767225600 + i + 1); rec.WallTime != want {
			t.Errorf("record %d wall_time %v, want %v", i, rec.WallTime, want)
		}
	}
}

func TestTensorBoardReadBackWithPython(t *testing.T) {
	if why := tbread.PythonMissing(); why != "" {
		t.Skip(why)
	}
	path, r := tensorBoardRun(t)
	recs, err := tbread.ReadPython(path, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	got := curves(t, recs)
	oneScalarPerTagPerStep(t, got)
	if diff := cmp.Diff(wantCurves(r), got); diff != "" {
		t.Errorf("curves (-want +got):\n%s", diff)
	}
}

func TestTensorBoardAndCSVTogether(t *testing.T) {
	out := t.TempDir()
	r := newRun()
	writeRun(t, monitor.Options{
		TensorBoard: monitor.Output{Enabled: true, OutputPath: out, JobName: monitor.DefaultJobName},
		CSV:         monitor.Output{Enabled: true, OutputPath: out, JobName: monitor.DefaultJobName},
	}, r)
	var names []string
	ents, err := os.ReadDir(filepath.Join(out, "DeepSpeedJobName"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		names = append(names, regexp.MustCompile(`tfevents\..*`).ReplaceAllString(e.Name(), "tfevents.*"))
	}
	want := []string{"Train_Samples_loss_scale.csv", "Train_Samples_lr.csv", "Train_Samples_train_loss.csv", "events.out.tfevents.*"}
	if diff := cmp.Diff(want, names, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

func TestCSVText(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs", "run1")
	writeRun(t, monitor.Options{CSV: monitor.Output{Enabled: true, OutputPath: filepath.Dir(dir), JobName: "run1"}}, newRun())
	// What DeepSpeed's csvMonitor writes for these events: Python csv.writer
	// rows (CRLF) of [step, value], value as repr(float) (CPython prints
	// 1e-5*3 as 3.0000000000000004e-05 and 1e-5*6 as 6.000000000000001e-05).
	want := map[string]string{
		"Train_Samples_train_loss.csv": "step,train_loss\r\n0,2.5\r\n32,2.25\r\n64,2.0\r\n96,1.75\r\n128,1.5\r\n160,1.25\r\n",
		"Train_Samples_lr.csv":         "step,lr\r\n32,1e-05\r\n64,2e-05\r\n96,3.0000000000000004e-05\r\n128,4e-05\r\n160,5e-05\r\n192,6.000000000000001e-05\r\n",
		"Train_Samples_loss_scale.csv": "step,loss_scale\r\n32,65536.0\r\n64,65536.0\r\n96,65536.0\r\n128,32768.0\r\n160,32768.0\r\n192,32768.0\r\n",
	}
	got := map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got[e.Name()] = string(b)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("csv files (-want +got):\n%s", diff)
	}
}

// A second run appending to the same job's files writes no second header.
func TestCSVResumeAppends(t *testing.T) {
	out := t.TempDir()
	o := monitor.Options{CSV: monitor.Output{Enabled: true, OutputPath: out, JobName: "j"}}
	for _, s := range []int64{0, 8} {
		m, err := monitor.New(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Write([]monitor.Event{{Tag: "Train/Samples/train_loss", Value: 1, Step: s}}); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if err := m.Write(nil); err == nil {
			t.Error("Write after Close succeeded")
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "j", "Train_Samples_train_loss.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("step,train_loss\r\n0,1.0\r\n8,1.0\r\n", string(b)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// The CSV text, including names, quoting and float text, is what Python's
// own csv.writer produces for DeepSpeed's rows.
func TestCSVAgainstPythonCSVWriter(t *testing.T) {
	if _, err := os.Stat(tbread.Python); err != nil {
		t.Skip(tbread.Python + " is not installed")
	}
	events := []monitor.Event{
		{"Train/Samples/train_loss", 2.3025851249694824, 0},
		{"Train/Samples/lr", 1e-4, 32},
		{"Train/Samples/lr", 1.5e-5, 64},
		{"Train/Eigenvalues/ModelBlockParam_0", 123456789012345.6, 64},
		{"eval loss", 1e16, 7},
		{`odd/a,"b"`, math.Copysign(0, -1), 1},
		{"odd/x", 5e-324, 2},
		{"diverged/loss", math.NaN(), 3},
		{"diverged/loss", math.Inf(1), 4},
		{"diverged/loss", float64(float32(0.1)), 5},
	}
	dir := t.TempDir()
	writeEvents(t, dir, events)

	// Python writes the rows with csv.writer; the file names and headers are
	// given to it as DeepSpeed derives them (tested by name above).
	script := `
import csv, sys
rows = {}
for line in sys.stdin.read().splitlines():
    name, header, step, value = line.split("\t")
    rows.setdefault((name, header), []).append([int(step), float.fromhex(value)])
for (name, header), rs in rows.items():
    with open(sys.argv[1] + "/" + name, "a+") as f:
        w = csv.writer(f)
        w.writerow(["step", header])
        for r in rs:
            w.writerow(r)
`
	var in strings.Builder
	for _, e := range events {
		header := e.Tag[strings.LastIndex(e.Tag, "/")+1:]
		in.WriteString(monitor.FileName(e.Tag) + "\t" + header + "\t" + strconv.FormatInt(e.Step, 10) + "\t" + strconv.FormatFloat(e.Value, 'x', -1, 64) + "\n")
	}
	pyDir := t.TempDir()
	cmd := exec.Command(tbread.Python, "-c", script, pyDir)
	cmd.Stdin = strings.NewReader(in.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	if diff := cmp.Diff(readDir(t, pyDir), readDir(t, dir)); diff != "" {
		t.Errorf("csv files (-python +dszero):\n%s", diff)
	}
}

func writeEvents(t *testing.T, dir string, events []monitor.Event) {
	t.Helper()
	m, err := monitor.NewCSV(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Write(events); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}
