package dcp

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dszero/dszero/ptfile"
)

// MetadataFile is the name of the coordinator's index file.
const MetadataFile = ".metadata"

// FileName is the file rank writes its blobs to: FileSystemWriter's
// "__{rank}_{i}.distcp" with one file per rank (single_file_per_rank and
// thread_count 1, the defaults Accelerate uses).
func FileName(rank int) string { return fmt.Sprintf("__%d_0.distcp", rank) }

// WriteItem is one thing a rank saves: a chunk of a tensor, or any other
// value.
type WriteItem struct {
	FQN string
	// Chunk holds the elements from Offsets of the tensor of size Size; its
	// shape is the chunk's sizes. Nil for a value.
	Chunk         *ptfile.Tensor
	Size, Offsets []int64
	// Value is saved whole, torch.save'd, when Chunk is nil: a number, a
	// string, a list of them, a tuple (param_groups' betas)...
	Value any
}

// TensorChunk is the item of a chunk t at offsets of the tensor fqn of
// size size.
func TensorChunk(fqn string, size, offsets []int64, t *ptfile.Tensor) WriteItem {
	return WriteItem{FQN: fqn, Chunk: t, Size: append([]int64{}, size...), Offsets: append([]int64{}, offsets...)}
}

// WholeTensor is the item of a tensor saved by one rank whole (a
// replicated one, such as an optimizer's step).
func WholeTensor(fqn string, t *ptfile.Tensor) WriteItem {
	return TensorChunk(fqn, t.Shape, make([]int64, len(t.Shape)), t)
}

// ValueItem is the item of a value that is not a tensor.
func ValueItem(fqn string, v any) WriteItem { return WriteItem{FQN: fqn, Value: v} }

// Written is what WriteRank reports of one item, and what the coordinator
// needs of it for .metadata (torch's WriteResult with the item's
// TensorWriteData): small, to be gathered from every rank.
type Written struct {
	FQN string
	// Tensor says the item is a chunk: of a DType tensor of Size, at
	// Offsets, of Sizes.
	Tensor               bool
	DType                ptfile.DType
	Size, Offsets, Sizes []int64
	Loc                  Location
}

// Prepare readies dir for a save: it creates it and removes a .metadata
// left by an earlier save, so that a crash while the ranks write leaves
// no index pointing into half-replaced files. The coordinator calls it
// before any rank writes.
func Prepare(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("dcp: %w", err)
	}
	for _, name := range []string{MetadataFile, MetadataFile + ".tmp"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("dcp: %w", err)
		}
	}
	return syncDir(dir)
}

// WriteRank writes rank's items to dir/FileName(rank), values first and
// then tensor chunks, each a torch.save blob, as FileSystemWriter does: the
// file is written to a temporary name, fsynced and renamed. A rank with no
// items still writes its (empty) file, as torch does.
func WriteRank(dir string, rank int, items []WriteItem) ([]Written, error) {
	name := FileName(rank)
	path := filepath.Join(dir, name)
	fail := func(err error) ([]Written, error) {
		return nil, fmt.Errorf("dcp: write %s (rank %d): %w", path, rank, err)
	}
	// The file holds values first, then tensor chunks; the results keep the
	// items' order, which is the order .metadata lists them in.
	var order []int
	for pass := range 2 {
		for i, it := range items {
			if (it.Chunk == nil) == (pass == 0) {
				order = append(order, i)
			}
		}
	}
	tmp := path + ".tmp"
	fd, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fail(err)
	}
	defer os.Remove(tmp)
	cw := &countWriter{w: bufio.NewWriterSize(fd, 1<<20)}
	out := make([]Written, len(items))
	for _, i := range order {
		w, err := writeBlob(cw, name, items[i])
		if err != nil {
			fd.Close()
			return fail(fmt.Errorf("%s: %w", items[i].FQN, err))
		}
		out[i] = w
	}
	err = cw.w.(*bufio.Writer).Flush()
	if err == nil {
		err = fd.Sync()
	}
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fail(err)
	}
	return out, nil
}

// writeBlob writes one item as torch.save does into the rank's stream: a
// whole zip archive per item, its entries under "archive/" (torch.save's
// name for an archive written to a stream).
func writeBlob(cw *countWriter, file string, it WriteItem) (Written, error) {
	if it.FQN == "" {
		return Written{}, errors.New("an item without a key")
	}
	start := cw.n
	w := Written{FQN: it.FQN}
	if it.Chunk == nil {
		if _, ok := it.Value.(*ptfile.Tensor); ok {
			return Written{}, errors.New("a tensor given as a value: use TensorChunk or WholeTensor")
		}
		if err := ptfile.Encode(cw, "archive", it.Value); err != nil {
			return Written{}, err
		}
	} else {
		t, err := compact(it.Chunk)
		if err != nil {
			return Written{}, err
		}
		if len(it.Size) != len(t.Shape) || len(it.Offsets) != len(t.Shape) {
			return Written{}, fmt.Errorf("a %v chunk of a tensor of size %v at offsets %v", t.Shape, it.Size, it.Offsets)
		}
		for d := range t.Shape {
			if it.Offsets[d] < 0 || it.Offsets[d]+t.Shape[d] > it.Size[d] {
				return Written{}, fmt.Errorf("a %v chunk at offsets %v reaches outside the tensor's size %v", t.Shape, it.Offsets, it.Size)
			}
		}
		if err := ptfile.Encode(cw, "archive", t); err != nil {
			return Written{}, err
		}
		w.Tensor, w.DType = true, t.DType
		w.Size, w.Offsets, w.Sizes = append([]int64{}, it.Size...), append([]int64{}, it.Offsets...), append([]int64{}, t.Shape...)
	}
	w.Loc = Location{Path: file, Offset: start, Length: cw.n - start}
	return w, nil
}

// compact returns t as a contiguous tensor over a storage of exactly its
// elements, as torch's writer clones a view of a larger storage.
func compact(t *ptfile.Tensor) (*ptfile.Tensor, error) {
	if t.Storage == nil || t.Storage.Data == nil {
		return nil, errors.New("a chunk whose storage is not loaded")
	}
	if t.Contiguous() && t.Offset == 0 && t.Storage.Numel == t.Numel() && !t.RequiresGrad && !t.Parameter {
		return t, nil
	}
	b, err := t.Bytes()
	if err != nil {
		return nil, err
	}
	return ptfile.NewTensor(t.DType, t.Shape, b), nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Options are what .metadata records beside the items.
type Options struct {
	// Mappings are the flat keys' paths in the nested state dict (Flatten);
	// nil means the state dict was flat: every key its own one-element path.
	Mappings []Mapping
	// SaveID is recorded as StorageMeta.save_id; "" draws a random UUID,
	// as torch does for every save.
	SaveID string
	// CheckpointID is recorded as StorageMeta.checkpoint_id (torch records
	// the directory it was given); "" records the directory passed in.
	CheckpointID string
}

// WriteMetadata is the coordinator's finish: it combines every rank's
// Written, in rank order, into the checkpoint's Metadata — items in the
// order the ranks first name them, a tensor's chunks in rank order —
// checks that each tensor's chunks tile it and no value is saved twice,
// and writes dir/.metadata (to a temporary name, fsynced, renamed).
func WriteMetadata(dir string, ranks [][]Written, o Options) (*Metadata, error) {
	m, err := combine(ranks)
	if err != nil {
		return nil, fmt.Errorf("dcp: %s: %w", dir, err)
	}
	m.Version, m.SaveID, m.CheckpointID = Version, o.SaveID, o.CheckpointID
	if m.SaveID == "" {
		m.SaveID = newUUID()
	}
	if m.CheckpointID == "" {
		m.CheckpointID = dir
	}
	m.Mappings = o.Mappings
	if m.Mappings == nil {
		for _, it := range m.Items {
			m.Mappings = append(m.Mappings, Mapping{Key: it.FQN, Path: []any{it.FQN}})
		}
	}
	known := map[string]bool{}
	for _, mp := range m.Mappings {
		known[mp.Key] = true
	}
	for _, it := range m.Items {
		if !known[it.FQN] {
			return nil, fmt.Errorf("dcp: %s: %s has no mapping (Options.Mappings must cover every item)", dir, it.FQN)
		}
	}
	pkl, err := m.marshal()
	if err != nil {
		return nil, fmt.Errorf("dcp: %s: %w", dir, err)
	}
	if err := writeFileSync(filepath.Join(dir, MetadataFile), pkl); err != nil {
		return nil, err
	}
	return m, nil
}

func combine(ranks [][]Written) (*Metadata, error) {
	m := &Metadata{}
	at := map[string]int{} // fqn → index in m.Items
	by := map[string]int{} // fqn → the rank that first wrote it
	for r, ws := range ranks {
		for _, w := range ws {
			i, seen := at[w.FQN]
			if !seen {
				at[w.FQN], by[w.FQN] = len(m.Items), r
				it := Item{FQN: w.FQN}
				if w.Tensor {
					it.Tensor = &Tensor{DType: w.DType, Size: w.Size}
				} else {
					loc := w.Loc
					it.Bytes = &loc
				}
				m.Items = append(m.Items, it)
				i = len(m.Items) - 1
			}
			it := &m.Items[i]
			switch {
			case !w.Tensor || it.Tensor == nil:
				if seen {
					return nil, fmt.Errorf("%s is saved by rank %d and again by rank %d (a value, or a value and a tensor): save a replicated value on one rank only", w.FQN, by[w.FQN], r)
				}
				continue
			case w.DType != it.Tensor.DType || fmt.Sprint(w.Size) != fmt.Sprint(it.Tensor.Size):
				return nil, fmt.Errorf("%s: rank %d saves a chunk of a %s%v tensor, rank %d of a %s%v one", w.FQN, r, w.DType, w.Size, by[w.FQN], it.Tensor.DType, it.Tensor.Size)
			}
			it.Tensor.Chunks = append(it.Tensor.Chunks, Chunk{Offsets: w.Offsets, Sizes: w.Sizes, Loc: w.Loc})
		}
	}
	for _, it := range m.Items {
		if it.Tensor != nil {
			if err := checkTiling(it.Tensor.Size, it.Tensor.Chunks); err != nil {
				return nil, fmt.Errorf("%s: the ranks' chunks do not tile the tensor: %w", it.FQN, err)
			}
		}
	}
	m.reindex()
	return m, nil
}

// Save writes a whole checkpoint from one process: ranks[r] are rank r's
// items (Prepare, WriteRank for every rank, WriteMetadata).
func Save(dir string, ranks [][]WriteItem, o Options) (*Metadata, error) {
	if err := Prepare(dir); err != nil {
		return nil, err
	}
	written := make([][]Written, len(ranks))
	for r, items := range ranks {
		w, err := WriteRank(dir, r, items)
		if err != nil {
			return nil, err
		}
		written[r] = w
	}
	return WriteMetadata(dir, written, o)
}

// ShardStateDict splits a nested state dict of whole tensors as FSDP
// saves it on world ranks: flattened (Flatten), every tensor of one or
// more dimensions chunked by rows (RowChunk), 0-dimensional tensors and
// other values saved whole by rank 0. It returns each rank's items and
// the mappings for Options.
func ShardStateDict(sd *ptfile.Dict, world int) ([][]WriteItem, []Mapping, error) {
	leaves, err := Flatten(sd)
	if err != nil {
		return nil, nil, err
	}
	ranks := make([][]WriteItem, world)
	maps := make([]Mapping, len(leaves))
	for i, lf := range leaves {
		maps[i] = Mapping{Key: lf.Key, Path: lf.Path}
		t, ok := lf.Value.(*ptfile.Tensor)
		if !ok {
			ranks[0] = append(ranks[0], ValueItem(lf.Key, lf.Value))
			continue
		}
		if len(t.Shape) == 0 {
			ranks[0] = append(ranks[0], WholeTensor(lf.Key, t))
			continue
		}
		data, err := t.Bytes()
		if err != nil {
			return nil, nil, fmt.Errorf("dcp: %s: %w", lf.Key, err)
		}
		row := Numel(t.Shape[1:]) * t.DType.Size()
		has := false
		for r := range world {
			b, ok := RowChunk(t.Shape, world, r)
			if !ok {
				continue
			}
			has = true
			part := bytes.Clone(data[b.Offsets[0]*row : (b.Offsets[0]+b.Sizes[0])*row])
			ranks[r] = append(ranks[r], TensorChunk(lf.Key, t.Shape, b.Offsets, ptfile.NewTensor(t.DType, b.Sizes, part)))
		}
		if !has { // no rows at all: one empty chunk keeps the tensor's entry
			ranks[0] = append(ranks[0], WholeTensor(lf.Key, ptfile.NewTensor(t.DType, t.Shape, []byte{})))
		}
	}
	return ranks, maps, nil
}

// SaveStateDict is ShardStateDict and Save.
func SaveStateDict(dir string, sd *ptfile.Dict, world int, o Options) (*Metadata, error) {
	ranks, maps, err := ShardStateDict(sd, world)
	if err != nil {
		return nil, err
	}
	if o.Mappings == nil {
		o.Mappings = maps
	}
	return Save(dir, ranks, o)
}

func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	err := os.WriteFile(tmp, data, 0o644)
	if err == nil {
		var fd *os.File
		if fd, err = os.OpenFile(tmp, os.O_WRONLY, 0); err == nil {
			err = fd.Sync()
			if cerr := fd.Close(); err == nil {
				err = cerr
			}
		}
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("dcp: write %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	d.Close()
	return err
}

// newUUID is a random (version 4) UUID, as uuid.uuid4() draws save_id.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
