package dcp

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dszero/dszero/ptfile"
)

// The classes .metadata pickles, as torch 2.4–2.11 names them. Reading
// accepts exactly these (and the older spellings below) as opaque data;
// nothing of them runs.
const (
	mdModule     = "torch.distributed.checkpoint.metadata"
	fsModule     = "torch.distributed.checkpoint.filesystem"
	shardModule  = "torch.distributed._shard.sharded_tensor.metadata" // TensorProperties before torch 2.2
	clsMetadata  = "Metadata"
	clsTensorMD  = "TensorStorageMetadata"
	clsBytesMD   = "BytesStorageMetadata"
	clsChunkMD   = "ChunkStorageMetadata"
	clsIndex     = "MetadataIndex"
	clsProps     = "TensorProperties"
	clsStorageMD = "StorageMeta"
	clsMemFormat = "_MEM_FORMAT_ENCODING"
	clsInfo      = "_StorageInfo"
	getLayout    = "torch.serialization._get_layout" // how torch pickles torch.strided
	// Version is the CURRENT_DCP_VERSION torch ≥ 2.5 records in Metadata.version.
	Version = "1.0.0"
)

// MetadataClasses are the classes a .metadata pickle may name: the
// dataclasses of torch/distributed/checkpoint/metadata.py and
// filesystem.py, TensorProperties' older home, torch's layout rebuilder,
// and pathlib's paths (FileSystemWriter records its directory as a Path in
// StorageMeta.checkpoint_id; Python 3.13 moved the classes to
// pathlib._local).
var MetadataClasses = []string{
	mdModule + "." + clsMetadata, mdModule + "." + clsTensorMD, mdModule + "." + clsBytesMD,
	mdModule + "." + clsChunkMD, mdModule + "." + clsIndex, mdModule + "." + clsProps,
	mdModule + "." + clsStorageMD, mdModule + "." + clsMemFormat,
	shardModule + "." + clsProps, shardModule + ".MEM_FORMAT_ENCODING",
	fsModule + "." + clsInfo,
	getLayout,
	"pathlib.PosixPath", "pathlib.WindowsPath", "pathlib.PurePosixPath", "pathlib.PureWindowsPath",
	"pathlib._local.PosixPath", "pathlib._local.WindowsPath", "pathlib._local.PurePosixPath", "pathlib._local.PureWindowsPath",
}

// Metadata is a checkpoint's .metadata: every item of the flattened state
// dict, in the order the save planned them, with where each piece is.
type Metadata struct {
	Items []Item
	// Mappings is planner_data: each flat key's path in the nested state
	// dict the save was given, so the nesting can be rebuilt (Unflatten).
	// Nil when the save did not flatten.
	Mappings []Mapping
	// Version is Metadata.version ("1.0.0" from torch 2.5 on; "" before).
	Version string
	// SaveID is StorageMeta.save_id, a UUID each save draws; CheckpointID
	// is StorageMeta.checkpoint_id, the directory as the saver named it.
	SaveID, CheckpointID string

	index map[string]int
}

// Item is one entry of state_dict_metadata: a tensor, saved as chunks, or
// any other value, saved whole as a torch.save'd blob ("bytes").
type Item struct {
	FQN    string
	Tensor *Tensor   // nil for a bytes item
	Bytes  *Location // a bytes item's blob; nil for a tensor
}

// Tensor is a TensorStorageMetadata: the whole tensor's dtype and size,
// and the chunks that tile it.
type Tensor struct {
	DType  ptfile.DType
	Size   []int64
	Chunks []Chunk
}

// Chunk is a ChunkStorageMetadata, the box Offsets..Offsets+Sizes of the
// tensor, with the blob that holds it (storage_data[MetadataIndex(fqn,
// offsets)]).
type Chunk struct {
	Offsets, Sizes []int64
	Loc            Location
}

// Location is a _StorageInfo: Length bytes at Offset of the file Path
// (relative to the checkpoint directory) hold one torch.save blob.
type Location struct {
	Path           string
	Offset, Length int64
}

// Mapping is one planner_data entry: the flat key Key was at Path (dict
// keys as strings, list indices as ints) in the nested state dict.
type Mapping struct {
	Key  string
	Path []any
}

// Item returns the item with flat key fqn.
func (m *Metadata) Item(fqn string) (*Item, bool) {
	if m.index == nil {
		m.reindex()
	}
	i, ok := m.index[fqn]
	if !ok {
		return nil, false
	}
	return &m.Items[i], true
}

func (m *Metadata) reindex() {
	m.index = make(map[string]int, len(m.Items))
	for i, it := range m.Items {
		m.index[it.FQN] = i
	}
}

// Numel is the number of elements of a tensor of size.
func Numel(size []int64) int64 {
	n := int64(1)
	for _, d := range size {
		n *= d
	}
	return n
}

func obj(module, name string, state any) *ptfile.Object {
	return &ptfile.Object{Module: module, Name: name, Kind: ptfile.NewObject, State: state}
}

func size(x []int64) ptfile.Size { return append(ptfile.Size{}, x...) }

// marshal pickles m as FileSystemWriter.finish does (protocol 2 here;
// torch writes Python's default, 4: both read the same).
func (m *Metadata) marshal() ([]byte, error) {
	sdm := ptfile.NewDict()
	storage := ptfile.NewDict()
	for _, it := range m.Items {
		if it.Tensor == nil {
			sdm.Set(it.FQN, obj(mdModule, clsBytesMD, nil))
			// MetadataIndex(fqn): __init__ leaves offset unset.
			storage.SetObjectKey(obj(mdModule, clsIndex, ptfile.DictOf("fqn", it.FQN, "index", nil)), info(*it.Bytes))
			continue
		}
		t := it.Tensor
		if t.DType.Size() == 0 {
			return nil, fmt.Errorf("%s: invalid dtype %v", it.FQN, t.DType)
		}
		chunks := make(ptfile.List, len(t.Chunks))
		for i, c := range t.Chunks {
			chunks[i] = obj(mdModule, clsChunkMD, ptfile.DictOf("offsets", size(c.Offsets), "sizes", size(c.Sizes)))
			key := obj(mdModule, clsIndex, ptfile.DictOf("fqn", it.FQN, "index", int64(i), "offset", size(c.Offsets)))
			storage.SetObjectKey(key, info(c.Loc))
		}
		// TensorProperties pickles its __getstate__ tuple: (dtype, layout,
		// requires_grad, _MEM_FORMAT_ENCODING, pin_memory).
		layout := &ptfile.Object{Module: "torch.serialization", Name: "_get_layout", Kind: ptfile.CallObject, Args: ptfile.Tuple{"torch.strided"}}
		contiguous := &ptfile.Object{Module: mdModule, Name: clsMemFormat, Kind: ptfile.CallObject, Args: ptfile.Tuple{int64(0)}}
		props := obj(mdModule, clsProps, ptfile.Tuple{t.DType, layout, false, contiguous, false})
		sdm.Set(it.FQN, obj(mdModule, clsTensorMD, ptfile.DictOf("properties", props, "size", size(t.Size), "chunks", chunks)))
	}
	var planner any
	if m.Mappings != nil {
		pd := ptfile.NewDict()
		for _, mp := range m.Mappings {
			pd.Set(mp.Key, append(ptfile.Tuple{}, mp.Path...))
		}
		planner = pd
	}
	var ckID any
	if m.CheckpointID != "" {
		ckID = m.CheckpointID
	}
	meta := obj(mdModule, clsStorageMD, ptfile.DictOf("checkpoint_id", ckID, "save_id", m.SaveID, "load_id", nil, "modules", ptfile.List{}))
	state := ptfile.DictOf("state_dict_metadata", sdm, "planner_data", planner, "storage_data", storage, "storage_meta", meta)
	if m.Version != "" {
		state.Set("version", m.Version)
	}
	return ptfile.Pickle(obj(mdModule, clsMetadata, state))
}

func info(l Location) *ptfile.Object {
	return obj(fsModule, clsInfo, ptfile.DictOf("relative_path", l.Path, "offset", l.Offset, "length", l.Length))
}

// parseMetadata reads a .metadata pickle (name is the file errors name)
// and checks it: every tensor's chunks lie inside it, do not overlap and
// cover it, and each has a blob in a file of the directory.
func parseMetadata(data []byte, name string) (*Metadata, error) {
	root, err := ptfile.Unpickle(data, name, ptfile.Options{Classes: MetadataClasses})
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("dcp: %s: %s", name, fmt.Sprintf(format, args...))
	}
	state, err := stateOf(root, mdModule, clsMetadata)
	if err != nil {
		return nil, bad("not a torch.distributed.checkpoint Metadata: %v", err)
	}
	m := &Metadata{}
	if v, ok := state.Get("version"); ok && v != nil {
		if m.Version, ok = v.(string); !ok {
			return nil, bad("version is a %s", ptfile.TypeName(v))
		}
	}
	if sm, ok := state.Get("storage_meta"); ok && sm != nil {
		if st, err := stateOf(sm, mdModule, clsStorageMD); err == nil {
			m.SaveID, _ = lookupString(st, "save_id")
			m.CheckpointID = pathString(st)
		}
	}
	locs, err := parseStorage(state)
	if err != nil {
		return nil, bad("%v", err)
	}
	sdm, err := dictField(state, "state_dict_metadata")
	if err != nil {
		return nil, bad("%v", err)
	}
	for k, v := range sdm.All() {
		fqn, ok := k.(string)
		if !ok {
			return nil, bad("state_dict_metadata has a key of type %s", ptfile.TypeName(k))
		}
		it, err := parseItem(fqn, v, locs)
		if err != nil {
			return nil, bad("%s: %v", fqn, err)
		}
		m.Items = append(m.Items, it)
	}
	if pd, ok := state.Get("planner_data"); ok && pd != nil {
		if m.Mappings, err = parseMappings(pd); err != nil {
			return nil, bad("planner_data: %v", err)
		}
	}
	m.reindex()
	return m, nil
}

// stateOf returns the BUILD state dict of an object of class module.name.
func stateOf(v any, module, name string) (*ptfile.Dict, error) {
	o, ok := v.(*ptfile.Object)
	if !ok || o.Name != name || (o.Module != module && !(name == clsProps && o.Module == shardModule)) {
		return nil, fmt.Errorf("a %s where a %s.%s goes", ptfile.TypeName(v), module, name)
	}
	if o.State == nil {
		return ptfile.NewDict(), nil
	}
	d, ok := o.State.(*ptfile.Dict)
	if !ok {
		return nil, fmt.Errorf("%s has a %s state, not a dict", o.Class(), ptfile.TypeName(o.State))
	}
	return d, nil
}

func dictField(d *ptfile.Dict, key string) (*ptfile.Dict, error) {
	v, ok := d.Get(key)
	if !ok {
		return nil, fmt.Errorf("no %s", key)
	}
	x, ok := v.(*ptfile.Dict)
	if !ok {
		return nil, fmt.Errorf("%s is a %s, not a dict", key, ptfile.TypeName(v))
	}
	return x, nil
}

func lookupString(d *ptfile.Dict, key string) (string, bool) {
	v, _ := d.Get(key)
	s, ok := v.(string)
	return s, ok
}

// pathString is StorageMeta.checkpoint_id as a string: a str, or a
// pathlib path (PosixPath(*parts)).
func pathString(st *ptfile.Dict) string {
	v, _ := st.Get("checkpoint_id")
	switch p := v.(type) {
	case string:
		return p
	case *ptfile.Object:
		var parts []string
		for _, a := range p.Args {
			if s, ok := a.(string); ok {
				parts = append(parts, s)
			}
		}
		if len(parts) > 0 && (parts[0] == "/" || strings.HasSuffix(parts[0], `\`)) {
			return parts[0] + strings.Join(parts[1:], "/")
		}
		return strings.Join(parts, "/")
	}
	return ""
}

// storageKey is a MetadataIndex's (fqn, offset): what torch hashes it by.
type storageKey struct{ fqn, offsets string }

func keyOf(fqn string, offsets []int64) storageKey {
	if offsets == nil {
		return storageKey{fqn: fqn, offsets: "-"}
	}
	return storageKey{fqn, fmt.Sprint(offsets)}
}

func parseStorage(state *ptfile.Dict) (map[storageKey]Location, error) {
	sd, err := dictField(state, "storage_data")
	if err != nil {
		return nil, err
	}
	locs := make(map[storageKey]Location, sd.Len())
	for k, v := range sd.All() {
		ks, err := stateOf(k, mdModule, clsIndex)
		if err != nil {
			return nil, fmt.Errorf("storage_data key: %v", err)
		}
		fqn, ok := lookupString(ks, "fqn")
		if !ok {
			return nil, errors.New("storage_data key without an fqn")
		}
		var offsets []int64
		if off, _ := ks.Get("offset"); off != nil {
			s, ok := off.(ptfile.Size)
			if !ok {
				return nil, fmt.Errorf("storage_data key %s: offset is a %s", fqn, ptfile.TypeName(off))
			}
			offsets = []int64(s)
		}
		vs, err := stateOf(v, fsModule, clsInfo)
		if err != nil {
			return nil, fmt.Errorf("storage_data[%s]: %v", fqn, err)
		}
		if td, _ := vs.Get("transform_descriptors"); td != nil {
			if l, ok := td.(ptfile.List); !ok || len(l) > 0 {
				return nil, fmt.Errorf("storage_data[%s]: written through stream transforms %v (a compression extension): not supported; save without _extensions", fqn, td)
			}
		}
		path, ok1 := lookupString(vs, "relative_path")
		off, ok2 := intField(vs, "offset")
		n, ok3 := intField(vs, "length")
		if !ok1 || !ok2 || !ok3 {
			return nil, fmt.Errorf("storage_data[%s]: want relative_path, offset and length", fqn)
		}
		if path == "" || path == "." || path == ".." || strings.ContainsAny(path, `/\`) || off < 0 || n < 0 {
			return nil, fmt.Errorf("storage_data[%s]: %q at %d length %d is not a blob of a file in the checkpoint directory", fqn, path, off, n)
		}
		locs[keyOf(fqn, offsets)] = Location{Path: path, Offset: off, Length: n}
	}
	return locs, nil
}

func intField(d *ptfile.Dict, key string) (int64, bool) {
	v, _ := d.Get(key)
	n, ok := v.(int64)
	return n, ok
}

func parseItem(fqn string, v any, locs map[storageKey]Location) (Item, error) {
	if o, ok := v.(*ptfile.Object); ok && o.Module == mdModule && o.Name == clsBytesMD {
		l, ok := locs[keyOf(fqn, nil)]
		if !ok {
			return Item{}, errors.New("a bytes item with no storage_data entry")
		}
		return Item{FQN: fqn, Bytes: &l}, nil
	}
	st, err := stateOf(v, mdModule, clsTensorMD)
	if err != nil {
		return Item{}, err
	}
	t := &Tensor{}
	props, _ := st.Get("properties")
	if t.DType, err = parseDType(props); err != nil {
		return Item{}, err
	}
	sz, ok := mustGet(st, "size").(ptfile.Size)
	if !ok {
		return Item{}, errors.New("size is not a torch.Size")
	}
	t.Size = []int64(sz)
	for _, d := range t.Size {
		if d < 0 {
			return Item{}, fmt.Errorf("size %v", t.Size)
		}
	}
	chunks, ok := mustGet(st, "chunks").(ptfile.List)
	if !ok {
		return Item{}, errors.New("chunks is not a list")
	}
	for i, c := range chunks {
		cs, err := stateOf(c, mdModule, clsChunkMD)
		if err != nil {
			return Item{}, fmt.Errorf("chunk %d: %v", i, err)
		}
		off, ok1 := mustGet(cs, "offsets").(ptfile.Size)
		n, ok2 := mustGet(cs, "sizes").(ptfile.Size)
		if !ok1 || !ok2 {
			return Item{}, fmt.Errorf("chunk %d: offsets and sizes are not torch.Sizes", i)
		}
		ch := Chunk{Offsets: []int64(off), Sizes: []int64(n)}
		l, ok := locs[keyOf(fqn, ch.Offsets)]
		if !ok {
			return Item{}, fmt.Errorf("chunk %d at offsets %v has no storage_data entry", i, ch.Offsets)
		}
		ch.Loc = l
		t.Chunks = append(t.Chunks, ch)
	}
	if err := checkTiling(t.Size, t.Chunks); err != nil {
		return Item{}, err
	}
	return Item{FQN: fqn, Tensor: t}, nil
}

func mustGet(d *ptfile.Dict, key string) any {
	v, _ := d.Get(key)
	return v
}

// parseDType reads TensorProperties' dtype from its state: the
// __getstate__ tuple, or a plain attribute dict.
func parseDType(props any) (ptfile.DType, error) {
	o, ok := props.(*ptfile.Object)
	if !ok || o.Name != clsProps {
		return 0, fmt.Errorf("properties is a %s, not TensorProperties", ptfile.TypeName(props))
	}
	var dt any
	switch s := o.State.(type) {
	case ptfile.Tuple:
		if len(s) > 0 {
			dt = s[0]
		}
	case *ptfile.Dict:
		dt, _ = s.Get("dtype")
	}
	d, ok := dt.(ptfile.DType)
	if !ok {
		return 0, fmt.Errorf("TensorProperties has no dtype (%s)", ptfile.TypeName(dt))
	}
	return d, nil
}

// checkTiling checks that chunks lie inside a tensor of size, do not
// overlap, and together cover it (torch's _validate_global_plan).
func checkTiling(size []int64, chunks []Chunk) error {
	var vol int64
	for i, c := range chunks {
		if len(c.Offsets) != len(size) || len(c.Sizes) != len(size) {
			return fmt.Errorf("chunk %d (offsets %v, sizes %v) has not the %d dimensions of the tensor", i, c.Offsets, c.Sizes, len(size))
		}
		for d := range size {
			if c.Offsets[d] < 0 || c.Sizes[d] < 0 || c.Offsets[d]+c.Sizes[d] > size[d] {
				return fmt.Errorf("chunk %d (offsets %v, sizes %v) reaches outside the tensor's size %v", i, c.Offsets, c.Sizes, size)
			}
		}
		vol += Numel(c.Sizes)
		for j := range i {
			if overlap(chunks[j].Offsets, chunks[j].Sizes, c.Offsets, c.Sizes) {
				return fmt.Errorf("chunks %d and %d (offsets %v and %v) overlap", j, i, chunks[j].Offsets, c.Offsets)
			}
		}
	}
	if vol != Numel(size) {
		return fmt.Errorf("the chunks hold %d elements of the %d of size %v: the checkpoint is missing part of the tensor", vol, Numel(size), size)
	}
	return nil
}

// overlap reports whether two non-empty boxes share an element.
func overlap(ao, as, bo, bs []int64) bool {
	if Numel(as) == 0 || Numel(bs) == 0 {
		return false
	}
	for d := range ao {
		if ao[d] >= bo[d]+bs[d] || bo[d] >= ao[d]+as[d] {
			return false
		}
	}
	return true
}

func parseMappings(v any) ([]Mapping, error) {
	d, ok := v.(*ptfile.Dict)
	if !ok {
		return nil, fmt.Errorf("a %s, not a dict", ptfile.TypeName(v))
	}
	out := make([]Mapping, 0, d.Len())
	for k, p := range d.All() {
		key, ok := k.(string)
		path, ok2 := p.(ptfile.Tuple)
		if !ok || !ok2 || len(path) == 0 {
			return nil, fmt.Errorf("entry %v: want a string key and a tuple path", k)
		}
		for _, e := range path {
			switch e.(type) {
			case string, int64:
			default:
				return nil, fmt.Errorf("%s: path element of type %s", key, ptfile.TypeName(e))
			}
		}
		out = append(out, Mapping{Key: key, Path: append([]any{}, path...)})
	}
	return out, nil
}
