package nvme

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"
)

// Align is the byte alignment of every swap buffer, file offset and I/O
// length: the logical block size O_DIRECT demands on 4Kn NVMe drives (and a
// multiple of the 512 bytes older disks demand).
const Align = 4096

// FS is the filesystem the swapper keeps its files in. OSFS is the real
// one; MemFS keeps files in memory and FaultFS wraps either to inject
// faults. The swapper passes buffers aligned to Align, and offsets and
// lengths that are multiples of it.
type FS interface {
	// Mkdir creates the directory name. Its parent must exist: a missing
	// nvme_path is an error to report, not a directory to create. An
	// existing directory is not an error.
	Mkdir(name string) error
	// ReadDir returns the names of the entries of the directory dir.
	ReadDir(dir string) ([]string, error)
	// OpenFile opens name for reading and writing, creating it (mode
	// 0600) when create is set. It never truncates.
	OpenFile(name string, create bool) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// DirectIO is nil while every file opened so far bypasses the page
	// cache (O_DIRECT), and otherwise says why it does not.
	DirectIO() error
}

// File is an open swap file.
type File interface {
	// ReadAt reads len(p) bytes at off. Fewer bytes come with an error,
	// io.EOF at the end of the file.
	ReadAt(p []byte, off int64) (int, error)
	// WriteAt writes p at off. Like pwrite(2) on a full disk it may write
	// fewer bytes without an error; the swapper reports that as a short
	// write.
	WriteAt(p []byte, off int64) (int, error)
	Close() error
}

// OSFS is the operating system's filesystem. On Linux it opens files with
// O_DIRECT, so swap traffic bypasses the page cache as DeepSpeed's libaio
// handle does; where the filesystem refuses O_DIRECT (tmpfs before Linux
// 6.6, some FUSE and network filesystems) it opens the file buffered and
// records the first refusal, which DirectIO returns. Other systems always
// use buffered I/O.
type OSFS struct {
	open func(name string, flag int, perm os.FileMode) (*os.File, error) // os.OpenFile; tests refuse O_DIRECT with it

	mu       sync.Mutex
	fallback error // the first O_DIRECT refusal
}

// NewOSFS returns the operating system's filesystem.
func NewOSFS() *OSFS { return &OSFS{open: os.OpenFile} }

var _ FS = (*OSFS)(nil)

// Mkdir implements FS.
func (o *OSFS) Mkdir(name string) error {
	err := os.Mkdir(name, 0o700)
	if errors.Is(err, fs.ErrExist) {
		if fi, serr := os.Stat(name); serr == nil && fi.IsDir() {
			return nil
		}
	}
	return err
}

// ReadDir implements FS.
func (o *OSFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// OpenFile implements FS.
func (o *OSFS) OpenFile(name string, create bool) (File, error) {
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE
	}
	if oDirect == 0 {
		o.refused(errors.New(noDirectReason))
		return o.open(name, flag, 0o600)
	}
	f, err := o.open(name, flag|oDirect, 0o600)
	if err == nil || !errors.Is(err, syscall.EINVAL) {
		return f, err
	}
	o.refused(fmt.Errorf("O_DIRECT refused for %s, so swap files go through the page cache: %w", name, err))
	return o.open(name, flag, 0o600)
}

func (o *OSFS) refused(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fallback == nil {
		o.fallback = err
	}
}

// Remove implements FS.
func (o *OSFS) Remove(name string) error { return os.Remove(name) }

// DirectIO implements FS.
func (o *OSFS) DirectIO() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.fallback
}
