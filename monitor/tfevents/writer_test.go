package tfevents_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/dszero/dszero/monitor/internal/tbread"
	"github.com/dszero/dszero/monitor/tfevents"
)

// golden is testdata/golden_events.json: the events that
// internal/tbread/gen_golden.py wrote into testdata/golden.tfevents with
// python3-protobuf and TensorBoard's real schema.
type golden struct {
	FileVersionNS int64 `json:"file_version_wall_time_ns"`
	Events        []struct {
		Tag    string `json:"tag"`
		Value  string `json:"value"`
		Step   int64  `json:"step"`
		WallNS int64  `json:"wall_time_ns"`
	} `json:"events"`
}

func loadGolden(t *testing.T) golden {
	t.Helper()
	b, err := os.ReadFile("testdata/golden_events.json")
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// clock returns the given times in order, one per call.
func clock(t *testing.T, ns ...int64) func() time.Time {
	return func() time.Time {
		if len(ns) == 0 {
			t.Fatal("clock read more often than the test expected")
		}
		now := time.Unix(0, ns[0])
		ns = ns[1:]
		return now
	}
}

func writeGolden(t *testing.T, dir string) string {
	t.Helper()
	g := loadGolden(t)
	times := []int64{g.FileVersionNS}
	var scalars []tfevents.Scalar
	for _, e := range g.Events {
		v, err := strconv.ParseFloat(e.Value, 64)
		if err != nil {
			t.Fatal(err)
		}
		scalars = append(scalars, tfevents.Scalar{Tag: e.Tag, Value: v, Step: e.Step})
		times = append(times, e.WallNS)
	}
	w, err := tfevents.Create(dir, tfevents.Options{Now: clock(t, times...), Hostname: "golden", PID: 4242})
	if err != nil {
		t.Fatal(err)
	}
	// Two batches, as a training loop writes them (loss, then lr and loss scale).
	if err := w.AddScalars(scalars[:3]); err != nil {
		t.Fatal(err)
	}
	if err := w.AddScalars(scalars[3:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.Path()
}

// The bytes are exactly what python3-protobuf serializes from TensorBoard's
// event.proto, framed as tensorboard's RecordWriter frames them.
func TestGoldenBytesFromPythonProtobuf(t *testing.T) {
	dir := t.TempDir()
	path := writeGolden(t, dir)
	if got, want := filepath.Base(path), "events.out.tfevents.1767225600.golden.4242.0"; got != want {
		t.Errorf("file name %q, want %q (EventFileWriter's events.out.tfevents.%%010d.host.pid.n)", got, want)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/golden.tfevents")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("event file differs from the python3-protobuf golden (-want +got):\n%s", diff)
	}
}

func wantRecords(t *testing.T) []tbread.Record {
	g := loadGolden(t)
	want := []tbread.Record{{WallTime: float64(g.FileVersionNS) / 1e9, What: "file_version", FileVersion: tfevents.FileVersion}}
	for _, e := range g.Events {
		v, _ := strconv.ParseFloat(e.Value, 64)
		want = append(want, tbread.Record{
			WallTime: float64(e.WallNS) / 1e9, Step: e.Step, What: "summary",
			Values: []tbread.Value{{Tag: e.Tag, Kind: "simple_value", SimpleValue: float32(v)}},
		})
	}
	return want
}

// protobuf's own decoder, driven by TensorBoard's schema, reads every record.
func TestReadBackWithTensorBoardSchema(t *testing.T) {
	path := writeGolden(t, t.TempDir())
	got, err := tbread.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantRecords(t), got, cmpopts.EquateNaNs()); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// python3-protobuf reads the file and checks every CRC.
func TestReadBackWithPythonProtobuf(t *testing.T) {
	if why := tbread.PythonMissing(); why != "" {
		t.Skip(why)
	}
	path := writeGolden(t, t.TempDir())
	got, err := tbread.ReadPython(path, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantRecords(t), got, cmpopts.EquateNaNs()); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

func TestCreateNamesAndErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out", "job")
	now := func() time.Time { return time.Unix(1767225600, 5e8) }
	var names []string
	for range 2 {
		w, err := tfevents.Create(dir, tfevents.Options{Now: now, Hostname: "h", PID: 7})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, filepath.Base(w.Path()))
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if err := w.AddScalars([]tfevents.Scalar{{Tag: "a", Value: 1}}); err == nil || !strings.Contains(err.Error(), "after Close") {
			t.Errorf("AddScalars after Close: %v, want an error", err)
		}
	}
	// Two writers of one process in one second get the next counter, as
	// EventFileWriter's _global_uid gives them.
	if diff := cmp.Diff([]string{"events.out.tfevents.1767225600.h.7.0", "events.out.tfevents.1767225600.h.7.1"}, names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}

	w, err := tfevents.Create(t.TempDir(), tfevents.Options{Now: now, Hostname: "h", PID: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.AddScalars([]tfevents.Scalar{{Tag: "ok", Value: 1}, {Tag: "bad\xff", Value: 2, Step: 9}})
	if err == nil || !strings.Contains(err.Error(), "UTF-8") || !strings.Contains(err.Error(), "step 9") {
		t.Errorf("invalid tag: %v, want an error naming UTF-8 and the step", err)
	}
	recs, err := tbread.Read(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Errorf("a rejected batch wrote %d records after file_version, want none", len(recs)-1)
	}

	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tfevents.Create(filepath.Join(blocker, "sub"), tfevents.Options{}); err == nil || !strings.Contains(err.Error(), "log directory") {
		t.Errorf("Create under a file: %v, want a log-directory error", err)
	}
}

// float64 values become float32 by round-to-nearest, as protobuf does for a
// Python float assigned to a float field.
func TestSimpleValueRounding(t *testing.T) {
	w, err := tfevents.Create(t.TempDir(), tfevents.Options{Hostname: "h", PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	in := []float64{0.1, 1e-4, 3.40282356e38, 1e39, -1e-46, math.Inf(-1)}
	var sc []tfevents.Scalar
	for i, v := range in {
		sc = append(sc, tfevents.Scalar{Tag: "x", Value: v, Step: int64(i)})
	}
	if err := w.AddScalars(sc); err != nil {
		t.Fatal(err)
	}
	w.Close()
	recs, err := tbread.Read(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	var got []float32
	for _, r := range recs[1:] {
		got = append(got, r.Values[0].SimpleValue)
	}
	want := []float32{0.1, 1e-4, math.MaxFloat32, float32(math.Inf(1)), float32(math.Copysign(0, -1)), float32(math.Inf(-1))}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("simple_value (-want +got):\n%s", diff)
	}
	if !math.Signbit(float64(got[4])) {
		t.Errorf("-1e-46 became %v, want -0", got[4])
	}
}
