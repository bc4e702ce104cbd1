// Package tbread reads TensorBoard event files back, for tests, by two paths
// that share nothing with the writer in monitor/tfevents:
//
//   - Read: protobuf's own decoder (proto.Unmarshal into dynamicpb messages)
//     driven by TensorBoard's real schema: tensorboard_event.binpb is the
//     FileDescriptorSet protoc compiles from tensorboard/compat/proto/event.proto
//     and its imports (regen.sh says how). The TFRecord framing and both
//     CRCs are checked here with the standard library.
//   - ReadPython: the same file read by python3-protobuf (Debian's
//     python3-protobuf, a C++ protobuf runtime) and python3-crc32c, using the
//     same compiled schema (read_tfevents.py).
//
// Both return the file as a list of Records.
package tbread

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

//go:embed tensorboard_event.binpb
var schema []byte

//go:embed read_tfevents.py
var readScript []byte

//go:embed tbproto.py
var protoScript []byte

// Python is the interpreter ReadPython runs (Debian's, which has
// python3-protobuf and python3-crc32c when they are installed).
const Python = "/usr/bin/python3"

// Record is one decoded Event.
type Record struct {
	WallTime    float64
	Step        int64
	What        string // the Event.what oneof that is set: "file_version" or "summary"
	FileVersion string
	Values      []Value
}

// Value is one Summary.Value.
type Value struct {
	Tag         string
	Kind        string // the Summary.Value.value oneof that is set, "simple_value" for a scalar
	SimpleValue float32
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func masked(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// Records splits a TFRecord stream into its payloads, checking both CRCs of
// every record.
func Records(data []byte) ([][]byte, error) {
	var out [][]byte
	for off := 0; off < len(data); {
		if len(data)-off < 12 {
			return nil, fmt.Errorf("short record header at byte %d", off)
		}
		hdr := data[off : off+8]
		n := binary.LittleEndian.Uint64(hdr)
		if binary.LittleEndian.Uint32(data[off+8:]) != masked(hdr) {
			return nil, fmt.Errorf("bad length CRC at byte %d", off)
		}
		if uint64(len(data)-off-16) < n {
			return nil, fmt.Errorf("short record at byte %d: length %d", off, n)
		}
		body := data[off+12 : off+12+int(n)]
		if binary.LittleEndian.Uint32(data[off+12+int(n):]) != masked(body) {
			return nil, fmt.Errorf("bad data CRC at byte %d", off)
		}
		out = append(out, body)
		off += 16 + int(n)
	}
	return out, nil
}

func eventDescriptor() (protoreflect.MessageDescriptor, error) {
	var fds descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(schema, &fds); err != nil {
		return nil, err
	}
	files, err := protodesc.NewFiles(&fds)
	if err != nil {
		return nil, err
	}
	d, err := files.FindDescriptorByName("tensorboard.Event")
	if err != nil {
		return nil, err
	}
	return d.(protoreflect.MessageDescriptor), nil
}

// Read decodes the event file at path with protobuf's dynamic messages.
func Read(path string) ([]Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	bodies, err := Records(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	md, err := eventDescriptor()
	if err != nil {
		return nil, fmt.Errorf("tensorboard schema: %w", err)
	}
	var out []Record
	for i, b := range bodies {
		m := dynamicpb.NewMessage(md)
		if err := (proto.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(b, m); err != nil {
			return nil, fmt.Errorf("%s: record %d: %w", path, i, err)
		}
		if len(m.GetUnknown()) != 0 {
			return nil, fmt.Errorf("%s: record %d: fields unknown to event.proto: %x", path, i, m.GetUnknown())
		}
		out = append(out, fromMessage(m))
	}
	return out, nil
}

func field(m protoreflect.Message, name protoreflect.Name) protoreflect.FieldDescriptor {
	return m.Descriptor().Fields().ByName(name)
}

func fromMessage(m protoreflect.Message) Record {
	r := Record{
		WallTime: m.Get(field(m, "wall_time")).Float(),
		Step:     m.Get(field(m, "step")).Int(),
	}
	what := m.WhichOneof(m.Descriptor().Oneofs().ByName("what"))
	if what == nil {
		return r
	}
	r.What = string(what.Name())
	switch r.What {
	case "file_version":
		r.FileVersion = m.Get(what).String()
	case "summary":
		s := m.Get(what).Message()
		vals := s.Get(field(s, "value")).List()
		for i := 0; i < vals.Len(); i++ {
			v := vals.Get(i).Message()
			val := Value{Tag: v.Get(field(v, "tag")).String()}
			if k := v.WhichOneof(v.Descriptor().Oneofs().ByName("value")); k != nil {
				val.Kind = string(k.Name())
				if val.Kind == "simple_value" {
					val.SimpleValue = float32(v.Get(k).Float())
				}
			}
			r.Values = append(r.Values, val)
		}
	}
	return r
}

// PythonMissing says why ReadPython cannot run here, or "" when it can.
func PythonMissing() string {
	if _, err := os.Stat(Python); err != nil {
		return Python + " is not installed"
	}
	out, err := exec.Command(Python, "-c", "import google.protobuf, crc32c").CombinedOutput()
	if err != nil {
		return "python3-protobuf or python3-crc32c is not installed (apt-get install python3-protobuf python3-crc32c): " + string(bytes.TrimSpace(out))
	}
	return ""
}

// ReadPython decodes the event file at path with python3-protobuf. scratch
// is a directory for the script and schema (a test's TempDir).
func ReadPython(path, scratch string) ([]Record, error) {
	for name, b := range map[string][]byte{
		"read_tfevents.py":        readScript,
		"tbproto.py":              protoScript,
		"tensorboard_event.binpb": schema,
	} {
		if err := os.WriteFile(filepath.Join(scratch, name), b, 0o644); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(Python, filepath.Join(scratch, "read_tfevents.py"), path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("read_tfevents.py: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	var recs []Record
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var line struct {
			WallTime    string `json:"wall_time"`
			Step        int64  `json:"step"`
			What        string `json:"what"`
			FileVersion string `json:"file_version"`
			Values      []struct {
				Tag         string `json:"tag"`
				Kind        string `json:"kind"`
				SimpleValue string `json:"simple_value"`
			} `json:"values"`
		}
		if err := dec.Decode(&line); err != nil {
			if errors.Is(err, io.EOF) {
				return recs, nil
			}
			return nil, fmt.Errorf("read_tfevents.py output: %w", err)
		}
		wt, err := strconv.ParseFloat(line.WallTime, 64)
		if err != nil {
			return nil, err
		}
		r := Record{WallTime: wt, Step: line.Step, What: line.What, FileVersion: line.FileVersion}
		for _, v := range line.Values {
			f, err := strconv.ParseFloat(v.SimpleValue, 64) // repr of the float32, exact
			if err != nil {
				return nil, err
			}
			r.Values = append(r.Values, Value{Tag: v.Tag, Kind: v.Kind, SimpleValue: float32(f)})
		}
		recs = append(recs, r)
	}
}
