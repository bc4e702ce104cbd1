package ptfile

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// File is an opened checkpoint: Open reads and checks the pickle and the
// archive's directory; storage bytes are read by Load or LoadAll, so a
// caller can pull one tensor's storage at a time.
type File struct {
	// Name is the path (or the name given to NewReader) errors use.
	Name string
	// Archive is the archive's directory, the file's base name when torch
	// wrote it ("mp_rank_00_model_states").
	Archive string
	// Root is the unpickled value: usually a *Dict.
	Root any
	// Storages lists every storage the pickle references, in order of
	// first reference; Data is nil until loaded.
	Storages []*Storage

	size    int64
	ra      io.ReaderAt
	entries map[string]*zip.File
	byKey   map[string]*Storage
	closer  io.Closer
	// cursors follow the streamed reads of each storage (ReadAt): how far
	// its CRC-32 is known, and a compressed entry's inflating stream.
	cursors map[*Storage]*cursor
	scratch []byte // for hashing the bytes a read skips
}

// Read reads the checkpoint at path with every storage loaded.
func Read(path string, opts Options) (any, error) {
	f, err := Open(path, opts)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.LoadAll(); err != nil {
		return nil, err
	}
	return f.Root, nil
}

// Open opens the checkpoint at path and reads its pickle; see File.
func Open(path string, opts Options) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ptfile: %w", err)
	}
	st, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, fmt.Errorf("ptfile: %w", err)
	}
	f, err := NewReader(fd, st.Size(), path, opts)
	if err != nil {
		fd.Close()
		return nil, err
	}
	f.closer = fd
	return f, nil
}

// NewReader reads a checkpoint of size bytes from r; name is used in errors.
func NewReader(r io.ReaderAt, size int64, name string, opts Options) (*File, error) {
	f := &File{Name: name, size: size, ra: r, entries: map[string]*zip.File{}, byKey: map[string]*Storage{}, cursors: map[*Storage]*cursor{}}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		var magic [2]byte
		if n, _ := r.ReadAt(magic[:], 0); n == 2 && magic[0] == 0x80 && magic[1] <= 5 {
			return nil, f.errorf("", "the legacy (torch < 1.6, non-zip) torch.save format is not supported: %v", err)
		}
		return nil, f.errorf("", "not a torch.save zip archive (truncated or corrupt?): %v", err)
	}
	for _, zf := range zr.File {
		if f.entries[zf.Name] != nil {
			return nil, f.errorf(zf.Name, "duplicate archive entry")
		}
		f.entries[zf.Name] = zf
		if dir, ok := strings.CutSuffix(zf.Name, "/data.pkl"); ok && !strings.Contains(dir, "/") {
			if f.Archive != "" {
				return nil, f.errorf(zf.Name, "a second data.pkl (the first is under %s/)", f.Archive)
			}
			f.Archive = dir
		}
	}
	if f.Archive == "" {
		return nil, f.errorf("", "no <archive>/data.pkl entry: not a torch.save checkpoint")
	}
	if f.entries[f.Archive+"/constants.pkl"] != nil {
		return nil, f.errorf("", "a TorchScript archive (torch.jit.save), not a torch.save checkpoint")
	}
	if err := f.checkRecords(); err != nil {
		return nil, err
	}
	pklName := f.Archive + "/data.pkl"
	allow := newAllowList(opts)
	pzf := f.entries[pklName]
	if pzf.UncompressedSize64 > uint64(allow.maxPickle) {
		// Refused before inflating: a few megabytes of deflate can declare,
		// and inflate to, gigabytes.
		return nil, f.fileError(pklName, &refusal{
			msg:    fmt.Sprintf("the pickle is %d bytes, more than the %d a checkpoint's may have (real ones are kilobytes to a few megabytes): a corrupt or crafted file", pzf.UncompressedSize64, allow.maxPickle),
			option: "MaxPickleBytes", hint: "Options.MaxPickleBytes raises the limit"})
	}
	pkl, err := f.readEntry(pzf, -1)
	if err != nil {
		return nil, f.fileError(pklName, err)
	}
	root, err := unpickle(pkl, allow, f.persistentLoad)
	if err != nil {
		return nil, f.fileError(pklName, err)
	}
	f.Root = root
	return f, nil
}

// checkRecords checks the small records beside data.pkl: version (required,
// a positive integer) and byteorder (torch 2.x writes it; it must say little).
func (f *File) checkRecords() error {
	name := f.Archive + "/version"
	zf := f.entries[name]
	if zf == nil {
		return f.errorf(name, "missing (every torch.save archive has one)")
	}
	if zf.UncompressedSize64 > maxRecord {
		return f.errorf(name, "a %d-byte record (torch writes a few bytes)", zf.UncompressedSize64)
	}
	b, err := f.readEntry(zf, -1)
	if err != nil {
		return f.fileError(name, err)
	}
	if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || v < 1 {
		return f.errorf(name, "format version %q is not a positive integer", b)
	}
	name = f.Archive + "/byteorder"
	if zf := f.entries[name]; zf != nil {
		if zf.UncompressedSize64 > maxRecord {
			return f.errorf(name, "a %d-byte record (torch writes a few bytes)", zf.UncompressedSize64)
		}
		b, err := f.readEntry(zf, -1)
		if err != nil {
			return f.fileError(name, err)
		}
		if string(b) != "little" {
			return f.errorf(name, "byte order %q: only little-endian checkpoints are supported", b)
		}
	}
	return nil
}

// persistentLoad resolves a storage's persistent id
// ('storage', torch.FloatStorage, key, location, numel) to its *Storage,
// checking that data/<key> exists with the right size. Every reference to
// one key gets the same *Storage, so views stay views.
func (f *File) persistentLoad(pid []any) (*Storage, error) {
	if len(pid) != 5 || pid[0] != "storage" {
		return nil, fmt.Errorf("persistent id %s is not ('storage', type, key, location, numel)", describeArgs(pid))
	}
	g, ok := pid[1].(*global)
	key, ok2 := pid[2].(string)
	loc, ok3 := pid[3].(string)
	numel, ok4 := pid[4].(int64)
	if !ok || g.role != roleStorage || !ok2 || !ok3 || !ok4 || numel < 0 {
		return nil, fmt.Errorf("persistent id %s is not ('storage', type, key, location, numel)", describeArgs(pid))
	}
	if key == "" || key == "." || key == ".." || strings.ContainsAny(key, "/\\") {
		return nil, fmt.Errorf("storage key %q is not an entry name", key)
	}
	if s := f.byKey[key]; s != nil {
		if s.DType != g.dtype || s.Numel != numel {
			return nil, fmt.Errorf("storage %q is referenced as %d %s and as %d %s elements", key, s.Numel, s.DType, numel, g.dtype)
		}
		return s, nil
	}
	name := f.Archive + "/data/" + key
	zf := f.entries[name]
	if zf == nil {
		return nil, fmt.Errorf("storage entry %s is missing", name)
	}
	if numel > math.MaxInt64/g.dtype.Size() || zf.UncompressedSize64 != uint64(numel*g.dtype.Size()) {
		return nil, fmt.Errorf("storage entry %s holds %d bytes; the pickle says %d %s elements (%d bytes each)",
			name, zf.UncompressedSize64, numel, g.dtype, g.dtype.Size())
	}
	s := &Storage{DType: g.dtype, Numel: numel, Location: loc, Key: key}
	f.byKey[key] = s
	f.Storages = append(f.Storages, s)
	return s, nil
}

// LoadAll loads every storage.
func (f *File) LoadAll() error {
	for _, s := range f.Storages {
		if err := f.Load(s); err != nil {
			return err
		}
	}
	return nil
}

// Close closes the file Open opened (NewReader's reader is the caller's).
func (f *File) Close() error {
	for _, c := range f.cursors {
		if c.rc != nil {
			c.rc.Close()
			c.rc = nil
		}
	}
	if f.closer == nil {
		return nil
	}
	err := f.closer.Close()
	f.closer = nil
	return err
}

// ReadBytes reads a whole checkpoint held in memory, storages loaded.
func ReadBytes(b []byte, name string, opts Options) (any, error) {
	f, err := NewReader(bytes.NewReader(b), int64(len(b)), name, opts)
	if err != nil {
		return nil, err
	}
	if err := f.LoadAll(); err != nil {
		return nil, err
	}
	return f.Root, nil
}
