package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// A Hugging Face checkpoint directory keeps its weights in one
// model.safetensors or, above a size, in shards
//
//	model-00001-of-00003.safetensors, ..., model-00003-of-00003.safetensors
//	model.safetensors.index.json: {"metadata": {"total_size": bytes},
//	                               "weight_map": {tensor name: shard file}}
//
// (transformers' SAFE_WEIGHTS_NAME and SAFE_WEIGHTS_INDEX_NAME, and
// huggingface_hub's shard naming). SafetensorsDir reads either form by
// tensor name; WriteSafetensorsDir writes them the way save_pretrained does.

// The file names of the two forms.
const (
	SafetensorsName      = "model.safetensors"
	SafetensorsIndexName = "model.safetensors.index.json"
)

// shardName matches the weight files save_pretrained writes.
var shardName = regexp.MustCompile(`^model(-\d{5}-of-\d{5})?\.safetensors$`)

// SafetensorsIndex is the content of model.safetensors.index.json.
type SafetensorsIndex struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// SafetensorsDir is the open weight files of a checkpoint directory.
type SafetensorsDir struct {
	Dir   string
	Files []*SafetensorsFile // model.safetensors, or the shards in name order
	where map[string]int     // tensor name -> index in Files
}

// OpenSafetensorsDir opens the weights of dir: model.safetensors when it
// exists (transformers looks for it first), else the shards that
// model.safetensors.index.json names. Every shard's header is read and
// checked against the index: a tensor the index places in a file must be
// there, every tensor of a shard must be in the index under that file, and
// no tensor may be in two files. All problems are reported together.
func OpenSafetensorsDir(dir string) (_ *SafetensorsDir, err error) {
	d := &SafetensorsDir{Dir: dir, where: map[string]int{}}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	single := filepath.Join(dir, SafetensorsName)
	if _, err := os.Stat(single); err == nil {
		f, err := OpenSafetensors(single)
		if err != nil {
			return nil, err
		}
		d.Files = []*SafetensorsFile{f}
		for _, t := range f.Tensors {
			d.where[t.Name] = 0
		}
		return d, nil
	}
	idxPath := filepath.Join(dir, SafetensorsIndexName)
	b, err := os.ReadFile(idxPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: no %s or %s (only safetensors weights are read: convert pytorch_model.bin with transformers' save_pretrained(safe_serialization=True))", dir, SafetensorsName, SafetensorsIndexName)
	}
	if err != nil {
		return nil, err
	}
	var idx SafetensorsIndex
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", idxPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: weight_map is missing or empty", idxPath)
	}
	var names []string
	for name, file := range idx.WeightMap {
		if file != filepath.Base(file) || file == "." || file == ".." || strings.ContainsAny(file, `/\`) {
			return nil, fmt.Errorf("%s: weight_map[%q] = %q is not a file name in the directory", idxPath, name, file)
		}
		if !slices.Contains(names, file) {
			names = append(names, file)
		}
	}
	slices.Sort(names)
	var errs []error
	for i, name := range names {
		f, err := OpenSafetensors(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("%s names %s: %w", idxPath, name, err)
		}
		d.Files = append(d.Files, f)
		for _, t := range f.Tensors {
			if prev, dup := d.where[t.Name]; dup {
				errs = append(errs, fmt.Errorf("%s: tensor %q is in both %s and %s", dir, t.Name, names[prev], name))
				continue
			}
			d.where[t.Name] = i
			if want, ok := idx.WeightMap[t.Name]; !ok {
				errs = append(errs, fmt.Errorf("%s: tensor %q of %s is not in the weight_map", idxPath, t.Name, name))
			} else if want != name {
				errs = append(errs, fmt.Errorf("%s: weight_map puts %q in %s, but it is in %s", idxPath, t.Name, want, name))
			}
		}
	}
	for name, file := range idx.WeightMap {
		if _, ok := d.where[name]; !ok {
			errs = append(errs, fmt.Errorf("%s: weight_map puts %q in %s, which has no such tensor", idxPath, name, file))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return d, nil
}

// Close closes every file.
func (d *SafetensorsDir) Close() error {
	var errs []error
	for _, f := range d.Files {
		errs = append(errs, f.Close())
	}
	d.Files = nil
	return errors.Join(errs...)
}

// Lookup returns the header entry of the named tensor and the file that
// holds it.
func (d *SafetensorsDir) Lookup(name string) (TensorInfo, *SafetensorsFile, bool) {
	i, ok := d.where[name]
	if !ok {
		return TensorInfo{}, nil, false
	}
	t, _ := d.Files[i].Lookup(name)
	return t, d.Files[i], true
}

// Tensors lists every tensor, file by file, each file's in data order.
func (d *SafetensorsDir) Tensors() []TensorInfo {
	var out []TensorInfo
	for _, f := range d.Files {
		out = append(out, f.Tensors...)
	}
	return out
}

// ReadFloat32Range reads elements [lo, lo+len(dst)) of the named tensor
// (see SafetensorsFile.ReadFloat32Range).
func (d *SafetensorsDir) ReadFloat32Range(name string, lo int, dst []float32) error {
	_, f, ok := d.Lookup(name)
	if !ok {
		return fmt.Errorf("%s: no tensor %q", d.Dir, name)
	}
	return f.ReadFloat32Range(name, lo, dst)
}

// DTypeBytes is the element size of a safetensors dtype ("F32", "BF16",
// ...), 0 for an unknown one.
func DTypeBytes(dtype string) int64 { return dtypeSize[dtype] }

// WriteSafetensorsDir writes tensors into dir (which must exist) the way
// transformers' save_pretrained does: one model.safetensors when the
// shards come to one, else model-0000K-of-0000N.safetensors and
// model.safetensors.index.json (keys sorted, two-space indent). Tensors
// are taken in order and split as huggingface_hub's
// split_torch_state_dict_into_shards splits them: a tensor larger than
// maxShardBytes gets a shard of its own, and a shard is closed when the
// next tensor would take it over maxShardBytes. maxShardBytes <= 0 means
// one file. Weight files of an earlier save that this one does not write
// (other shard counts) are removed, as save_pretrained removes them, so
// the directory never mixes two checkpoints. It returns the weight files
// written, in order.
func WriteSafetensorsDir(dir string, tensors []Tensor, maxShardBytes int64, metadata map[string]string) ([]string, error) {
	var shards [][]Tensor
	var cur []Tensor
	var curSize, total int64
	for _, t := range tensors {
		size := tensorBytes(t)
		total += size
		if maxShardBytes > 0 && size > maxShardBytes {
			shards = append(shards, []Tensor{t})
			continue
		}
		if maxShardBytes > 0 && curSize+size > maxShardBytes {
			shards = append(shards, cur)
			cur, curSize = nil, 0
		}
		cur = append(cur, t)
		curSize += size
	}
	if len(cur) > 0 || len(shards) == 0 {
		shards = append(shards, cur)
	}
	names := []string{SafetensorsName}
	if len(shards) > 1 {
		names = names[:0]
		for i := range shards {
			names = append(names, fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards)))
		}
	}
	for i, sh := range shards {
		if err := WriteSafetensors(filepath.Join(dir, names[i]), sh, metadata); err != nil {
			return nil, err
		}
	}
	idxPath := filepath.Join(dir, SafetensorsIndexName)
	if len(shards) > 1 {
		idx := SafetensorsIndex{Metadata: map[string]any{"total_size": total}, WeightMap: map[string]string{}}
		for i, sh := range shards {
			for _, t := range sh {
				idx.WeightMap[t.Name] = names[i]
			}
		}
		b, err := json.MarshalIndent(idx, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := writeFileAtomic(idxPath, append(b, '\n')); err != nil {
			return nil, err
		}
	} else if err := os.Remove(idxPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	// Remove the weight files of an earlier save that are not ours.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if n := e.Name(); shardName.MatchString(n) && !slices.Contains(names, n) {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return nil, err
			}
		}
	}
	return names, nil
}

// tensorBytes is the size of t's data in the file.
func tensorBytes(t Tensor) int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	dt := t.DType
	if dt == "" {
		dt = "F32"
	}
	return n * dtypeSize[dt]
}

// writeFileAtomic writes b to path+".tmp" and renames it over path.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
