package main

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// tfScalar is one scalar of a TensorBoard event file.
type tfScalar struct {
	Tag   string
	Step  int64
	Value float32
}

// readTFEvents parses an event file by hand, sharing nothing with the
// writer: TFRecord framing (uint64 length, masked CRC-32C of the length,
// the data, masked CRC-32C of the data; mask(c) = ((c>>15)|(c<<17)) +
// 0xa282ead8) and the Event protobuf (tensorboard/compat/proto/event.proto:
// 1 wall_time double, 2 step int64, 3 file_version string, 5 summary;
// Summary: 1 repeated Value; Value: 1 tag string, 2 simple_value float).
// It returns the file_version and the scalars in file order.
func readTFEvents(t *testing.T, path string) (string, []tfScalar) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	table := crc32.MakeTable(crc32.Castagnoli)
	mask := func(c uint32) uint32 { return ((c >> 15) | (c << 17)) + 0xa282ead8 }
	var version string
	var out []tfScalar
	for off := 0; off < len(raw); {
		if len(raw)-off < 12 {
			t.Fatalf("%s: %d trailing bytes at %d", path, len(raw)-off, off)
		}
		n := binary.LittleEndian.Uint64(raw[off:])
		if got := binary.LittleEndian.Uint32(raw[off+8:]); got != mask(crc32.Checksum(raw[off:off+8], table)) {
			t.Fatalf("%s: record at %d: bad length CRC", path, off)
		}
		data := raw[off+12 : off+12+int(n)]
		if got := binary.LittleEndian.Uint32(raw[off+12+int(n):]); got != mask(crc32.Checksum(data, table)) {
			t.Fatalf("%s: record at %d: bad data CRC", path, off)
		}
		off += 12 + int(n) + 4
		var step int64
		var values [][]byte
		for _, f := range protoFields(t, data) {
			switch f.num {
			case 2:
				step = int64(f.varint)
			case 3:
				version = string(f.bytes)
			case 5:
				for _, v := range protoFields(t, f.bytes) {
					if v.num == 1 {
						values = append(values, v.bytes)
					}
				}
			}
		}
		for _, v := range values {
			s := tfScalar{Step: step}
			for _, f := range protoFields(t, v) {
				switch f.num {
				case 1:
					s.Tag = string(f.bytes)
				case 2:
					s.Value = math.Float32frombits(f.fixed32)
				}
			}
			out = append(out, s)
		}
	}
	return version, out
}

type protoField struct {
	num     int
	varint  uint64
	fixed32 uint32
	bytes   []byte
}

// protoFields splits a protobuf message into its fields (wire types 0,
// 1, 2 and 5).
func protoFields(t *testing.T, b []byte) []protoField {
	t.Helper()
	var out []protoField
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			t.Fatalf("bad field key")
		}
		b = b[n:]
		f := protoField{num: int(key >> 3)}
		switch key & 7 {
		case 0:
			f.varint, n = binary.Uvarint(b)
			b = b[n:]
		case 1:
			b = b[8:]
		case 2:
			l, n := binary.Uvarint(b)
			f.bytes, b = b[n:n+int(l)], b[n+int(l):]
		case 5:
			f.fixed32, b = binary.LittleEndian.Uint32(b), b[4:]
		default:
			t.Fatalf("wire type %d", key&7)
		}
		out = append(out, f)
	}
	return out
}

// TestTrainTensorBoard: a run with the tensorboard block writes one event
// file in output_path/job_name that holds, after the file_version record,
// one scalar per tag per step: train_loss at the global samples before the
// step, lr and (fp16) loss_scale after it, lr equal to the step's --json-log
// lr as a float32; csv_monitor writes the same curves to DeepSpeed's file
// names.
func TestTrainTensorBoard(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ds.json")
	js := fmt.Sprintf(`{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
		"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3, "warmup_num_steps": 4}},
		"fp16": {"enabled": true, "initial_scale_power": 8}, "zero_optimization": {"stage": 2},
		"tensorboard": {"enabled": true, "output_path": %q, "job_name": "tb_job"},
		"csv_monitor": {"enabled": true, "output_path": %q}}`, filepath.Join(dir, "tb"), filepath.Join(dir, "csv"))
	if err := os.WriteFile(cfg, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "log.jsonl")
	code, out, errs := runCLI(tinyTrain("--quiet", "--deepspeed", cfg, "--nproc", "2", "--steps", "3", "--json-log", log)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "tb", "tb_job", "events.out.tfevents.*"))
	if len(files) != 1 {
		t.Fatalf("event files %v, want one in tb/tb_job", files)
	}
	version, scalars := readTFEvents(t, files[0])
	if version != "brain.Event:2" {
		t.Errorf("file_version %q, want brain.Event:2", version)
	}
	byTag := map[string][]tfScalar{}
	for _, s := range scalars {
		byTag[s.Tag] = append(byTag[s.Tag], s)
	}
	var tags []string
	for tag := range byTag {
		tags = append(tags, tag)
	}
	sort.Strings(tags)
	if d := cmp.Diff([]string{"Train/Samples/loss_scale", "Train/Samples/lr", "Train/Samples/train_loss"}, tags); d != "" {
		t.Errorf("tags (-want +got):\n%s", d)
	}
	steps := func(tag string) []int64 {
		var s []int64
		for _, x := range byTag[tag] {
			s = append(s, x.Step)
		}
		return s
	}
	if d := cmp.Diff([]int64{0, 8, 16}, steps("Train/Samples/train_loss")); d != "" {
		t.Errorf("train_loss at global samples (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int64{8, 16, 24}, steps("Train/Samples/lr")); d != "" {
		t.Errorf("lr at global samples (-want +got):\n%s", d)
	}
	var wantLR []float32
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, log)), "\n") {
		var lr float64
		if _, err := fmt.Sscanf(line[strings.Index(line, `"lr":`)+5:], "%g", &lr); err != nil {
			t.Fatal(err)
		}
		wantLR = append(wantLR, float32(lr))
	}
	var gotLR []float32
	for _, s := range byTag["Train/Samples/lr"] {
		gotLR = append(gotLR, s.Value)
	}
	if d := cmp.Diff(wantLR, gotLR); d != "" {
		t.Errorf("lr (-json-log +tensorboard):\n%s", d)
	}
	for _, s := range byTag["Train/Samples/train_loss"] {
		if d := cmp.Diff(float32(math.Log(64)), s.Value, cmpopts.EquateApprox(0.1, 0)); d != "" {
			t.Errorf("train_loss %v at %d, want near ln(64) on random tokens", s.Value, s.Step)
		}
	}
	csvLR := readFile(t, filepath.Join(dir, "csv", "DeepSpeedJobName", "Train_Samples_lr.csv"))
	if !strings.HasPrefix(csvLR, "step,lr\r\n8,") || strings.Count(csvLR, "\r\n") != 4 {
		t.Errorf("Train_Samples_lr.csv: %q", csvLR)
	}
	for _, f := range []string{"Train_Samples_train_loss.csv", "Train_Samples_loss_scale.csv"} {
		if _, err := os.Stat(filepath.Join(dir, "csv", "DeepSpeedJobName", f)); err != nil {
			t.Error(err)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
