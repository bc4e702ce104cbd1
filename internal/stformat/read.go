package stformat

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// Tensor is one tensor of a file, decoded to float32.
type Tensor struct {
	DType  string // as stored: "F32", "BF16", "F16"
	Shape  []int
	Values []float32
	File   string // the file's base name
}

// Read checks the file at path (Check) and decodes every tensor, and the
// header's __metadata__.
func Read(path string) (map[string]Tensor, map[string]string, error) {
	if err := Check(path); err != nil {
		return nil, nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	n := binary.LittleEndian.Uint64(b)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		return nil, nil, fmt.Errorf("%s: header: %w", path, err)
	}
	data := b[8+n:]
	out, md := map[string]Tensor{}, map[string]string{}
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &md); err != nil {
				return nil, nil, fmt.Errorf("%s: __metadata__: %w", path, err)
			}
			continue
		}
		var e struct {
			DType       string   `json:"dtype"`
			Shape       []int    `json:"shape"`
			DataOffsets []uint64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, nil, fmt.Errorf("%s: tensor %q: %w", path, name, err)
		}
		v, err := decode(e.DType, data[e.DataOffsets[0]:e.DataOffsets[1]])
		if err != nil {
			return nil, nil, fmt.Errorf("%s: tensor %q: %w", path, name, err)
		}
		out[name] = Tensor{DType: e.DType, Shape: e.Shape, Values: v, File: filepath.Base(path)}
	}
	return out, md, nil
}

// decode widens little-endian F32, BF16 or F16 values to float32.
func decode(dtype string, b []byte) ([]float32, error) {
	switch dtype {
	case "F32":
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v, nil
	case "BF16":
		v := make([]float32, len(b)/2)
		for i := range v {
			v[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
		return v, nil
	case "F16":
		v := make([]float32, len(b)/2)
		for i := range v {
			v[i] = halfToFloat(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return v, nil
	}
	return nil, fmt.Errorf("dtype %s is not a float type this reader decodes", dtype)
}

// halfToFloat widens an IEEE 754 binary16 value exactly.
func halfToFloat(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * float32(math.Ldexp(frac, -24))
	case 0x1f:
		if frac != 0 {
			return float32(math.NaN())
		}
		return sign * float32(math.Inf(1))
	}
	return sign * float32(math.Ldexp(1+frac/1024, exp-15))
}

// Index is model.safetensors.index.json.
type Index struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// ReadDir reads a checkpoint directory as transformers' from_pretrained
// does: model.safetensors, or the shards model.safetensors.index.json
// names. With an index, every file it names must exist and pass Check,
// every tensor must be in the file the index says and in no other, every
// file's tensors must be in the index, and metadata.total_size, when
// present, must be the bytes of all tensors' data.
func ReadDir(dir string) (map[string]Tensor, error) {
	idxPath := filepath.Join(dir, "model.safetensors.index.json")
	ib, err := os.ReadFile(idxPath)
	if errors.Is(err, os.ErrNotExist) {
		ts, _, err := Read(filepath.Join(dir, "model.safetensors"))
		return ts, err
	}
	if err != nil {
		return nil, err
	}
	var idx Index
	if err := json.Unmarshal(ib, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", idxPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: no weight_map", idxPath)
	}
	files := []string{}
	for _, f := range idx.WeightMap {
		if !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	out := map[string]Tensor{}
	var bytes float64
	for _, f := range files {
		ts, _, err := Read(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		for name, t := range ts {
			if idx.WeightMap[name] != f {
				return nil, fmt.Errorf("%s: holds %q, which the index puts in %q", f, name, idx.WeightMap[name])
			}
			out[name] = t
			size := map[string]float64{"F32": 4, "BF16": 2, "F16": 2}[t.DType]
			bytes += size * float64(len(t.Values))
		}
	}
	for name, f := range idx.WeightMap {
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("%s: the index puts %q in %s, which does not hold it", idxPath, name, f)
		}
	}
	if ts, ok := idx.Metadata["total_size"]; ok {
		if n, ok := ts.(float64); !ok || n != bytes {
			return nil, fmt.Errorf("%s: metadata.total_size %v, the tensors hold %v bytes", idxPath, ts, bytes)
		}
	}
	return out, nil
}
