package tfevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// FileVersion is the file_version of the first event in every file; readers
// use it to recognise the format.
const FileVersion = "brain.Event:2"

// Field numbers from tensorboard/compat/proto/event.proto and summary.proto.
const (
	eventWallTime    protowire.Number = 1 // double
	eventStep        protowire.Number = 2 // int64
	eventFileVersion protowire.Number = 3 // string, oneof what
	eventSummary     protowire.Number = 5 // Summary, oneof what

	summaryValue protowire.Number = 1 // repeated Summary.Value

	valueTag         protowire.Number = 1 // string
	valueSimpleValue protowire.Number = 2 // float, oneof value
)

// Scalar is one point of one curve: the value of Tag at Step.
type Scalar struct {
	Tag   string
	Value float64 // stored as float32 (simple_value)
	Step  int64
}

// Options are a Writer's dependencies. Zero fields take the process's own:
// time.Now, os.Hostname, os.Getpid.
type Options struct {
	Now      func() time.Time // the wall_time of each event and the time in the file name
	Hostname string
	PID      int
}

// Writer appends scalar events to one event file. It is not safe for
// concurrent use.
type Writer struct {
	f      *os.File
	path   string
	now    func() time.Time
	buf    []byte // reused record buffer
	ev     []byte // reused event buffer
	closed bool
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TensorFlow's masked CRC-32C of b.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// Create makes dir (and its parents) if needed, creates a new event file in
// it named as PyTorch's EventFileWriter names it, and writes the
// file_version event.
func Create(dir string, o Options) (*Writer, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Hostname == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("tfevents: the event file name needs the host name: %w", err)
		}
		o.Hostname = h
	}
	if o.PID == 0 {
		o.PID = os.Getpid()
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("tfevents: create the TensorBoard log directory: %w", err)
	}
	start := o.Now()
	var f *os.File
	var path string
	for n := 0; ; n++ {
		path = filepath.Join(dir, fmt.Sprintf("events.out.tfevents.%010d.%s.%d.%d", start.Unix(), o.Hostname, o.PID, n))
		var err error
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || n == 1000 {
			return nil, fmt.Errorf("tfevents: create the event file: %w", err)
		}
	}
	w := &Writer{f: f, path: path, now: o.Now}
	w.buf = appendRecord(w.buf[:0], appendFileVersionEvent(nil, wallTime(start)))
	if err := w.writeBuf(); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// Path is the event file's path.
func (w *Writer) Path() string { return w.path }

// AddScalars appends one event per scalar, each stamped with the clock's time
// as it is written, in one write to the file.
func (w *Writer) AddScalars(scalars []Scalar) error {
	if w.closed {
		return fmt.Errorf("tfevents: %s: write after Close", w.path)
	}
	for _, s := range scalars {
		if !utf8.ValidString(s.Tag) {
			return fmt.Errorf("tfevents: %s: tag %q at step %d is not valid UTF-8 (protobuf strings must be)", w.path, s.Tag, s.Step)
		}
	}
	w.buf = w.buf[:0]
	for _, s := range scalars {
		w.ev = appendScalarEvent(w.ev[:0], wallTime(w.now()), s)
		w.buf = appendRecord(w.buf, w.ev)
	}
	return w.writeBuf()
}

func (w *Writer) writeBuf() error {
	if _, err := w.f.Write(w.buf); err != nil {
		return fmt.Errorf("tfevents: write %s: %w", w.path, err)
	}
	return nil
}

// Close fsyncs and closes the file. Closing twice is a no-op.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	serr := w.f.Sync()
	cerr := w.f.Close()
	if err := errors.Join(serr, cerr); err != nil {
		return fmt.Errorf("tfevents: close %s: %w", w.path, err)
	}
	return nil
}

// wallTime is t as Python's time.time(): seconds since the epoch, a double.
func wallTime(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// appendRecord frames data as one TFRecord.
func appendRecord(b, data []byte) []byte {
	var hdr [8]byte
	binary.LittleEndian.PutUint64(hdr[:], uint64(len(data)))
	b = append(b, hdr[:]...)
	b = binary.LittleEndian.AppendUint32(b, maskedCRC(hdr[:]))
	b = append(b, data...)
	return binary.LittleEndian.AppendUint32(b, maskedCRC(data))
}

func appendWallTime(b []byte, wt float64) []byte {
	if math.Float64bits(wt) == 0 { // proto3: a zero scalar is not written
		return b
	}
	b = protowire.AppendTag(b, eventWallTime, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(wt))
}

// appendFileVersionEvent encodes Event{wall_time, file_version}.
func appendFileVersionEvent(b []byte, wt float64) []byte {
	b = appendWallTime(b, wt)
	b = protowire.AppendTag(b, eventFileVersion, protowire.BytesType)
	return protowire.AppendString(b, FileVersion)
}

// appendScalarEvent encodes
// Event{wall_time, step, summary: Summary{value: [Value{tag, simple_value}]}}.
func appendScalarEvent(b []byte, wt float64, s Scalar) []byte {
	valueLen := protowire.SizeTag(valueTag) + protowire.SizeBytes(len(s.Tag)) +
		protowire.SizeTag(valueSimpleValue) + protowire.SizeFixed32()
	summaryLen := protowire.SizeTag(summaryValue) + protowire.SizeBytes(valueLen)

	b = appendWallTime(b, wt)
	if s.Step != 0 {
		b = protowire.AppendTag(b, eventStep, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(s.Step))
	}
	b = protowire.AppendTag(b, eventSummary, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(summaryLen))
	b = protowire.AppendTag(b, summaryValue, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(valueLen))
	b = protowire.AppendTag(b, valueTag, protowire.BytesType)
	b = protowire.AppendString(b, s.Tag)
	b = protowire.AppendTag(b, valueSimpleValue, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, math.Float32bits(float32(s.Value)))
}
