package nvme

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
)

// MemFS is a filesystem in memory, for tests: directories and files in a
// map, with an optional capacity after which writes fail with ENOSPC the way
// a full disk does (the bytes that fit are written first). The root ("/"
// or ".") always exists.
type MemFS struct {
	mu       sync.Mutex
	dirs     map[string]bool
	files    map[string]*memData
	capacity int64 // bytes; ≤ 0 is unlimited
	used     int64 // bytes held by all files
}

type memData struct {
	b       []byte
	removed bool // counts no more against the capacity
}

// NewMemFS returns an empty in-memory filesystem that holds at most
// capacity bytes of file data (≤ 0: unlimited).
func NewMemFS(capacity int64) *MemFS {
	return &MemFS{dirs: map[string]bool{}, files: map[string]*memData{}, capacity: capacity}
}

var _ FS = (*MemFS)(nil)

func (m *MemFS) isDir(name string) bool {
	return name == "/" || name == "." || m.dirs[name]
}

// Mkdir implements FS.
func (m *MemFS) Mkdir(name string) error {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.isDir(name):
		return nil
	case m.files[name] != nil:
		return &fs.PathError{Op: "mkdir", Path: name, Err: syscall.EEXIST}
	case m.files[filepath.Dir(name)] != nil:
		return &fs.PathError{Op: "mkdir", Path: name, Err: syscall.ENOTDIR}
	case !m.isDir(filepath.Dir(name)):
		return &fs.PathError{Op: "mkdir", Path: name, Err: syscall.ENOENT}
	}
	m.dirs[name] = true
	return nil
}

// ReadDir implements FS.
func (m *MemFS) ReadDir(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.isDir(dir) {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: syscall.ENOENT}
	}
	var names []string
	for d := range m.dirs {
		if filepath.Dir(d) == dir && d != dir {
			names = append(names, filepath.Base(d))
		}
	}
	for f := range m.files {
		if filepath.Dir(f) == dir {
			names = append(names, filepath.Base(f))
		}
	}
	sort.Strings(names)
	return names, nil
}

// OpenFile implements FS.
func (m *MemFS) OpenFile(name string, create bool) (File, error) {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.files[name]
	switch {
	case d != nil:
	case m.isDir(name):
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	case !create:
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.ENOENT}
	case !m.isDir(filepath.Dir(name)):
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.ENOENT}
	default:
		d = &memData{}
		m.files[name] = d
	}
	return &memFile{fs: m, name: name, d: d}, nil
}

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if d := m.files[name]; d != nil {
		m.used -= int64(len(d.b))
		d.removed = true
		delete(m.files, name)
		return nil
	}
	if !m.dirs[name] {
		return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOENT}
	}
	for p := range m.dirs {
		if filepath.Dir(p) == name {
			return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
		}
	}
	for p := range m.files {
		if filepath.Dir(p) == name {
			return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
		}
	}
	delete(m.dirs, name)
	return nil
}

// DirectIO implements FS: memory has no page cache to bypass.
func (m *MemFS) DirectIO() error { return errMemFS }

var errMemFS = errors.New("an in-memory filesystem has no O_DIRECT")

// Used is the number of bytes all files hold.
func (m *MemFS) Used() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used
}

// Files lists the paths of every file, sorted.
func (m *MemFS) Files() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for f := range m.files {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// memFile is one open file of a MemFS. A removed file stays readable and
// writable through the handles open on it, as on Unix.
type memFile struct {
	fs     *MemFS
	name   string
	d      *memData
	closed bool
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: os.ErrClosed}
	}
	if off >= int64(len(f.d.b)) {
		return 0, io.EOF
	}
	n := copy(p, f.d.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: os.ErrClosed}
	}
	end := off + int64(len(p))
	var full bool
	if grow := end - int64(len(f.d.b)); grow > 0 && !f.d.removed {
		if c := f.fs.capacity; c > 0 && f.fs.used+grow > c {
			end -= f.fs.used + grow - c
			full = true
		}
	}
	if end > int64(len(f.d.b)) {
		if !f.d.removed {
			f.fs.used += end - int64(len(f.d.b))
		}
		if end > int64(cap(f.d.b)) {
			nb := make([]byte, end, max(end, 2*int64(cap(f.d.b))))
			copy(nb, f.d.b)
			f.d.b = nb
		}
		f.d.b = f.d.b[:end]
	}
	n := 0
	if end > off {
		n = copy(f.d.b[off:end], p)
	}
	if full {
		return n, &fs.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
	}
	return n, nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &fs.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	f.closed = true
	return nil
}
