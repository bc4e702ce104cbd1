// Package stformat checks and reads safetensors files and Hugging Face
// checkpoint directories by the format's own rules, independently of the
// reader and writer the models use (package model): tests parse what
// dszero writes with it, as Python's safetensors and transformers would.
//
// Check applies the rules the reference implementation
// (huggingface/safetensors, which Python's safetensors and transformers
// load through) applies before it hands out a tensor. Read and ReadDir
// decode every tensor to float32 (F32, BF16, F16), ReadDir following
// model.safetensors.index.json as from_pretrained does.
package stformat

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"unicode/utf8"
)

// Check parses the file at path by the rules the
// reference safetensors library (huggingface/safetensors, which Python's
// safetensors and transformers load through) applies before it hands out
// a tensor, and returns the first one broken:
//
//   - an 8-byte little-endian header length N, at most 100 MB, and N bytes
//     of UTF-8 JSON starting with '{' (trailing spaces allowed);
//   - an object whose "__metadata__", if present, maps strings to strings
//     and whose other entries are {dtype, shape, data_offsets} with a known
//     dtype, non-negative dimensions and [begin, end] offsets;
//   - sorted by offset, the tensors tile the data section exactly: each
//     begins where the previous one ended (the first at 0), its size is
//     its element count times its dtype's size, and the last ends at the
//     end of the file (no gap, no overlap, no trailing bytes).
//
// It also checks what every writer of the format does though a reader
// does not require it: the header padded to a multiple of 8 bytes.
func Check(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(b) < 8 {
		return fmt.Errorf("%s: %d bytes, no header length", path, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > 100_000_000 || n > uint64(len(b)-8) {
		return fmt.Errorf("%s: header length %d (file %d bytes)", path, n, len(b))
	}
	hdr := b[8 : 8+n]
	if !utf8.Valid(hdr) {
		return fmt.Errorf("%s: header is not UTF-8", path)
	}
	if !bytes.HasPrefix(hdr, []byte("{")) {
		return fmt.Errorf("%s: header does not start with '{'", path)
	}
	if n%8 != 0 {
		return fmt.Errorf("%s: header of %d bytes is not padded to a multiple of 8", path, n)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(hdr))
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("%s: header: %w", path, err)
	}
	if rest := bytes.TrimRight(hdr[dec.InputOffset():], " "); len(rest) > 0 {
		return fmt.Errorf("%s: %d bytes after the header's JSON are not spaces", path, len(rest))
	}
	sizes := map[string]uint64{"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
		"F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
	type entry struct {
		name       string
		begin, end uint64
	}
	var entries []entry
	for name, msg := range raw {
		if name == "__metadata__" {
			var md map[string]string
			if err := json.Unmarshal(msg, &md); err != nil {
				return fmt.Errorf("%s: __metadata__ is not a map of strings: %w", path, err)
			}
			continue
		}
		var e struct {
			DType       string   `json:"dtype"`
			Shape       []uint64 `json:"shape"`
			DataOffsets []uint64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &e); err != nil {
			return fmt.Errorf("%s: tensor %q: %w", path, name, err)
		}
		size, ok := sizes[e.DType]
		if !ok {
			return fmt.Errorf("%s: tensor %q: dtype %q", path, name, e.DType)
		}
		if e.Shape == nil || len(e.DataOffsets) != 2 {
			return fmt.Errorf("%s: tensor %q: shape %v, data_offsets %v", path, name, e.Shape, e.DataOffsets)
		}
		numel := uint64(1)
		for _, d := range e.Shape {
			numel *= d
		}
		if e.DataOffsets[1] < e.DataOffsets[0] || e.DataOffsets[1]-e.DataOffsets[0] != numel*size {
			return fmt.Errorf("%s: tensor %q: %s %v needs %d bytes, data_offsets %v", path, name, e.DType, e.Shape, numel*size, e.DataOffsets)
		}
		entries = append(entries, entry{name, e.DataOffsets[0], e.DataOffsets[1]})
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if a.begin != b.begin {
			return int(int64(a.begin) - int64(b.begin))
		}
		return int(int64(a.end) - int64(b.end))
	})
	var at uint64
	for _, e := range entries {
		if e.begin != at {
			return fmt.Errorf("%s: tensor %q starts at byte %d of the data, the previous ends at %d", path, e.name, e.begin, at)
		}
		at = e.end
	}
	if data := uint64(len(b)) - 8 - n; at != data {
		return fmt.Errorf("%s: the tensors cover %d of the %d data bytes", path, at, data)
	}
	return nil
}
