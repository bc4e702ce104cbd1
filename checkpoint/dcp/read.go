package dcp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dszero/dszero/ptfile"
)

// MaxMetadataBytes bounds the .metadata a reader accepts: a checkpoint of
// a large model with optimizer state, on many ranks, indexes some 10^5
// chunks in a few tens of megabytes.
const MaxMetadataBytes = 256 << 20

// Checkpoint is an opened torch.distributed.checkpoint directory: its
// .metadata read and checked, its files open. Reads take any box of a
// tensor, whatever chunks it was saved in: a checkpoint saved on one world
// size loads on any other.
type Checkpoint struct {
	Dir  string
	Meta *Metadata

	files map[string]*os.File
	sizes map[string]int64
}

// Open opens the checkpoint in dir: it reads .metadata through the
// allow-list (no code runs), checks that every tensor's chunks tile it,
// and that every blob lies inside its file.
func Open(dir string) (*Checkpoint, error) {
	path := filepath.Join(dir, MetadataFile)
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		if _, derr := os.Stat(dir); derr != nil {
			return nil, fmt.Errorf("dcp: %w", derr)
		}
		return nil, fmt.Errorf("dcp: %s has no %s: not a torch.distributed.checkpoint directory, or its save did not finish (the coordinator writes %s last)", dir, MetadataFile, MetadataFile)
	}
	if err != nil {
		return nil, fmt.Errorf("dcp: %w", err)
	}
	if st.Size() > MaxMetadataBytes {
		return nil, fmt.Errorf("dcp: %s is %d bytes, more than the %d a checkpoint's index holds: a corrupt or foreign file", path, st.Size(), MaxMetadataBytes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("dcp: %w", err)
	}
	m, err := parseMetadata(data, path)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: dir, Meta: m, files: map[string]*os.File{}, sizes: map[string]int64{}}
	check := func(fqn string, l Location) error {
		n, ok := c.sizes[l.Path]
		if !ok {
			st, err := os.Stat(filepath.Join(dir, l.Path))
			if err != nil {
				return fmt.Errorf("dcp: %s: %s is saved in %s: %w", dir, fqn, l.Path, err)
			}
			n = st.Size()
			c.sizes[l.Path] = n
		}
		if l.Offset+l.Length > n || l.Offset+l.Length < l.Offset {
			return fmt.Errorf("dcp: %s: %s is saved at bytes %d..%d of %s, which has %d: the file is truncated or not this checkpoint's", dir, fqn, l.Offset, l.Offset+l.Length, l.Path, n)
		}
		return nil
	}
	for _, it := range m.Items {
		if it.Bytes != nil {
			if err := check(it.FQN, *it.Bytes); err != nil {
				return nil, err
			}
			continue
		}
		for _, ch := range it.Tensor.Chunks {
			if err := check(it.FQN, ch.Loc); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// Close closes the checkpoint's files.
func (c *Checkpoint) Close() error {
	var first error
	for name, f := range c.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
		delete(c.files, name)
	}
	return first
}

func (c *Checkpoint) file(name string) (*os.File, error) {
	if f, ok := c.files[name]; ok {
		return f, nil
	}
	f, err := os.Open(filepath.Join(c.Dir, name))
	if err != nil {
		return nil, fmt.Errorf("dcp: %w", err)
	}
	c.files[name] = f
	return f, nil
}

// blob opens the torch.save archive at l.
func (c *Checkpoint) blob(fqn string, l Location, opts ptfile.Options) (*ptfile.File, error) {
	f, err := c.file(l.Path)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s[%d:%d] (%s)", filepath.Join(c.Dir, l.Path), l.Offset, l.Offset+l.Length, fqn)
	var magic [4]byte
	if l.Length < 4 {
		return nil, fmt.Errorf("dcp: %s: %d bytes, not a torch.save archive", name, l.Length)
	}
	if _, err := f.ReadAt(magic[:], l.Offset); err != nil {
		return nil, fmt.Errorf("dcp: %s: %w", name, err)
	}
	if !bytes.Equal(magic[:], []byte("PK\x03\x04")) {
		return nil, fmt.Errorf("dcp: %s: not a torch.save archive (saved with serialization_format=SAFETENSORS, or not this checkpoint's file): dszero reads the default TORCH_SAVE format", name)
	}
	return ptfile.NewReader(io.NewSectionReader(f, l.Offset, l.Length), l.Length, name, opts)
}

// chunkTensor reads chunk ch of fqn: a tensor of the chunk's shape and the
// tensor's dtype.
func (c *Checkpoint) chunkTensor(fqn string, t *Tensor, ch Chunk) (*ptfile.Tensor, error) {
	pf, err := c.blob(fqn, ch.Loc, ptfile.Options{})
	if err != nil {
		return nil, err
	}
	x, ok := pf.Root.(*ptfile.Tensor)
	if !ok {
		return nil, fmt.Errorf("dcp: %s: holds a %s where the chunk at %v of %s goes", pf.Name, ptfile.TypeName(pf.Root), ch.Offsets, fqn)
	}
	if x.DType != t.DType || fmt.Sprint(x.Shape) != fmt.Sprint(ch.Sizes) {
		return nil, fmt.Errorf("dcp: %s: holds a %s%v tensor; .metadata says the chunk at %v is %s%v", pf.Name, x.DType, x.Shape, ch.Offsets, t.DType, ch.Sizes)
	}
	if x.Numel() > x.Storage.Numel {
		return nil, fmt.Errorf("dcp: %s: an expanded view (%v, stride %v) of %d elements", pf.Name, x.Shape, x.Stride, x.Storage.Numel)
	}
	if err := pf.Load(x.Storage); err != nil {
		return nil, err
	}
	return x, nil
}

// tensorItem returns fqn's tensor metadata.
func (c *Checkpoint) tensorItem(fqn string) (*Tensor, error) {
	it, ok := c.Meta.Item(fqn)
	if !ok {
		return nil, fmt.Errorf("dcp: %s: no %q in the checkpoint (%d items)", c.Dir, fqn, len(c.Meta.Items))
	}
	if it.Tensor == nil {
		return nil, fmt.Errorf("dcp: %s: %q is a value, not a tensor", c.Dir, fqn)
	}
	return it.Tensor, nil
}

// ReadBox reads the box b of tensor fqn from every chunk it overlaps: a
// contiguous tensor of b's sizes in the saved dtype.
func (c *Checkpoint) ReadBox(fqn string, b Box) (*ptfile.Tensor, error) {
	t, err := c.tensorItem(fqn)
	if err != nil {
		return nil, err
	}
	if len(b.Offsets) != len(t.Size) || len(b.Sizes) != len(t.Size) {
		return nil, fmt.Errorf("dcp: %s: a %d-dimensional box of the %d-dimensional %s", c.Dir, len(b.Offsets), len(t.Size), fqn)
	}
	for d := range t.Size {
		if b.Offsets[d] < 0 || b.Sizes[d] < 0 || b.Offsets[d]+b.Sizes[d] > t.Size[d] {
			return nil, fmt.Errorf("dcp: %s: box at %v of sizes %v reaches outside %s's size %v", c.Dir, b.Offsets, b.Sizes, fqn, t.Size)
		}
	}
	es := t.DType.Size()
	out := make([]byte, Numel(b.Sizes)*es)
	var filled int64
	for _, ch := range t.Chunks {
		in, ok := intersect(b, Box{Offsets: ch.Offsets, Sizes: ch.Sizes})
		if !ok && len(t.Size) > 0 {
			continue
		}
		if len(t.Size) == 0 {
			in = Box{Offsets: []int64{}, Sizes: []int64{}}
		}
		x, err := c.chunkTensor(fqn, t, ch)
		if err != nil {
			return nil, err
		}
		src, err := x.Bytes() // row-major, whatever the blob's strides
		if err != nil {
			return nil, fmt.Errorf("dcp: %s: chunk at %v: %w", fqn, ch.Offsets, err)
		}
		copyBox(out, b, src, Box{Offsets: ch.Offsets, Sizes: ch.Sizes}, in, es)
		filled += Numel(in.Sizes)
	}
	if filled != Numel(b.Sizes) {
		return nil, fmt.Errorf("dcp: %s: the chunks of %s hold %d of the box's %d elements", c.Dir, fqn, filled, Numel(b.Sizes))
	}
	return ptfile.NewTensor(t.DType, b.Sizes, out), nil
}

// copyBox copies box in, which lies in both, from src (the row-major
// elements of box sb) to dst (those of box db), es bytes an element: one
// run of the last dimension at a time.
func copyBox(dst []byte, db Box, src []byte, sb Box, in Box, es int64) {
	nd := len(in.Sizes)
	if nd == 0 {
		copy(dst, src[:es])
		return
	}
	if Numel(in.Sizes) == 0 {
		return
	}
	dstStride := strides(db.Sizes)
	srcStride := strides(sb.Sizes)
	run := in.Sizes[nd-1] * es
	idx := make([]int64, nd) // position within in, last dimension fixed at 0
	for {
		var di, si int64
		for d := range nd {
			p := in.Offsets[d] + idx[d]
			di += (p - db.Offsets[d]) * dstStride[d]
			si += (p - sb.Offsets[d]) * srcStride[d]
		}
		copy(dst[di*es:di*es+run], src[si*es:si*es+run])
		d := nd - 2
		for ; d >= 0; d-- {
			idx[d]++
			if idx[d] < in.Sizes[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

func strides(size []int64) []int64 {
	s := make([]int64, len(size))
	acc := int64(1)
	for i := len(size) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= size[i]
	}
	return s
}

// ReadTensor reads tensor fqn whole.
func (c *Checkpoint) ReadTensor(fqn string) (*ptfile.Tensor, error) {
	t, err := c.tensorItem(fqn)
	if err != nil {
		return nil, err
	}
	return c.ReadBox(fqn, Box{Offsets: make([]int64, len(t.Size)), Sizes: append([]int64{}, t.Size...)})
}

// ReadRows reads rank's FSDP chunk of tensor fqn at world size world
// (RowChunk); ok is false when the rank holds no rows of it.
func (c *Checkpoint) ReadRows(fqn string, world, rank int) (t *ptfile.Tensor, ok bool, err error) {
	tm, err := c.tensorItem(fqn)
	if err != nil {
		return nil, false, err
	}
	b, ok := RowChunk(tm.Size, world, rank)
	if !ok {
		return nil, false, nil
	}
	t, err = c.ReadBox(fqn, b)
	return t, err == nil, err
}

// ReadFlat reads the row-major elements [start, end) of tensor fqn — a
// ZeRO partition's piece of it — as raw little-endian bytes.
func (c *Checkpoint) ReadFlat(fqn string, start, end int64) ([]byte, error) {
	t, err := c.tensorItem(fqn)
	if err != nil {
		return nil, err
	}
	if n := Numel(t.Size); start < 0 || end > n || start > end {
		return nil, fmt.Errorf("dcp: %s: elements [%d, %d) of %s, which has %d", c.Dir, start, end, fqn, n)
	}
	out := make([]byte, 0, (end-start)*t.DType.Size())
	for _, b := range FlatBoxes(t.Size, start, end) {
		x, err := c.ReadBox(fqn, b)
		if err != nil {
			return nil, err
		}
		out = append(out, x.Storage.Data...)
	}
	return out, nil
}

// ReadValue reads the value saved under fqn: a bytes item's torch.save'd
// object, through ptfile's allow-list (opts), or a tensor whole.
func (c *Checkpoint) ReadValue(fqn string, opts ptfile.Options) (any, error) {
	it, ok := c.Meta.Item(fqn)
	if !ok {
		return nil, fmt.Errorf("dcp: %s: no %q in the checkpoint (%d items)", c.Dir, fqn, len(c.Meta.Items))
	}
	if it.Tensor != nil {
		return c.ReadTensor(fqn)
	}
	pf, err := c.blob(fqn, *it.Bytes, opts)
	if err != nil {
		return nil, err
	}
	if err := pf.LoadAll(); err != nil {
		return nil, err
	}
	return pf.Root, nil
}

// StateDict reads the whole checkpoint into the nested state dict it was
// saved from (planner_data's paths; a flat dict when there are none):
// what torch's dcp_to_torch_save produces. Meant for checkpoints that fit
// in memory: tools, tests, conversion.
func (c *Checkpoint) StateDict(opts ptfile.Options) (*ptfile.Dict, error) {
	paths := map[string][]any{}
	for _, mp := range c.Meta.Mappings {
		paths[mp.Key] = mp.Path
	}
	leaves := make([]Leaf, 0, len(c.Meta.Items))
	for _, it := range c.Meta.Items {
		v, err := c.ReadValue(it.FQN, opts)
		if err != nil {
			return nil, err
		}
		leaves = append(leaves, Leaf{Key: it.FQN, Path: paths[it.FQN], Value: v})
	}
	return Unflatten(leaves)
}
