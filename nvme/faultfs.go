package nvme

import (
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"
)

// Op is a filesystem operation a Fault can hit, as a bit mask.
type Op uint8

const (
	OpMkdir Op = 1 << iota
	OpReadDir
	OpOpen
	OpWrite
	OpRead
	OpRemove
)

var opNames = [...]string{"mkdir", "readdir", "open", "write", "read", "remove"}

func (o Op) String() string {
	var parts []string
	for i, name := range opNames {
		if o&(1<<i) != 0 {
			parts = append(parts, name)
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("Op(%d)", uint8(o))
	}
	return strings.Join(parts, "|")
}

// Fault is one failure FaultFS injects: into the operations in Ops on the
// paths that contain Path, from byte From of a file on.
type Fault struct {
	Ops  Op     // the operations it hits
	Path string // hits paths containing this; "" hits every path
	// From: reads and writes are hit only when they reach past this file
	// offset (a disk that fills up at From bytes); 0 hits every one.
	From int64
	// Err is returned by a hit operation, which does nothing else
	// (syscall.EIO, syscall.ENOSPC, syscall.EACCES …). A hit write with
	// From > 0 first writes the bytes before From, as a full disk does.
	Err error
	// Short makes a hit write store only the bytes before From (half of
	// them when From is 0) and report success with the smaller count:
	// what pwrite(2) does when a disk fills up mid-write.
	Short bool
	// Corrupt makes a hit read succeed with one bit of what it read
	// flipped (the middle byte's bit 4): silent corruption, a disk or
	// filesystem that returns other bytes than it was given and reports
	// nothing.
	Corrupt bool
	// Delay makes a hit operation sleep first: slow I/O. With Err nil,
	// Short and Corrupt false the operation then succeeds.
	Delay time.Duration
	// Times is how many operations it hits; 0 hits all of them.
	Times int
}

// FaultFS wraps a filesystem and injects Faults into it, for tests: the
// first fault that matches an operation decides what happens to it.
type FaultFS struct {
	inner  FS
	mu     sync.Mutex
	faults []Fault
	hits   []int
}

// NewFaultFS wraps inner with the given faults.
func NewFaultFS(inner FS, faults ...Fault) *FaultFS {
	return &FaultFS{inner: inner, faults: faults, hits: make([]int, len(faults))}
}

var _ FS = (*FaultFS)(nil)

// Inject adds faults from now on: a disk that fails in the middle of a
// run.
func (f *FaultFS) Inject(faults ...Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, faults...)
	f.hits = append(f.hits, make([]int, len(faults))...)
}

// Hits is how many operations fault i has hit so far.
func (f *FaultFS) Hits(i int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[i]
}

// match finds the fault that hits op on path over [off, off+n), counts
// the hit and returns it; ok is false when none does.
func (f *FaultFS) match(op Op, path string, off, n int64) (Fault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, ft := range f.faults {
		if ft.Ops&op == 0 || !strings.Contains(path, ft.Path) {
			continue
		}
		if op&(OpRead|OpWrite) != 0 && ft.From > 0 && off+n <= ft.From {
			continue
		}
		if ft.Times > 0 && f.hits[i] >= ft.Times {
			continue
		}
		f.hits[i]++
		return ft, true
	}
	return Fault{}, false
}

// hit applies a matched fault that has no partial effect: it sleeps, and
// returns the fault's error.
func hit(ft Fault) error {
	if ft.Delay > 0 {
		time.Sleep(ft.Delay)
	}
	return ft.Err
}

// Mkdir implements FS.
func (f *FaultFS) Mkdir(name string) error {
	if ft, ok := f.match(OpMkdir, name, 0, 0); ok {
		if err := hit(ft); err != nil {
			return pathErr("mkdir", name, err)
		}
	}
	return f.inner.Mkdir(name)
}

// ReadDir implements FS.
func (f *FaultFS) ReadDir(dir string) ([]string, error) {
	if ft, ok := f.match(OpReadDir, dir, 0, 0); ok {
		if err := hit(ft); err != nil {
			return nil, pathErr("readdir", dir, err)
		}
	}
	return f.inner.ReadDir(dir)
}

// OpenFile implements FS.
func (f *FaultFS) OpenFile(name string, create bool) (File, error) {
	if ft, ok := f.match(OpOpen, name, 0, 0); ok {
		if err := hit(ft); err != nil {
			return nil, pathErr("open", name, err)
		}
	}
	file, err := f.inner.OpenFile(name, create)
	if err != nil {
		return nil, err
	}
	return &faultFile{fs: f, name: name, inner: file}, nil
}

// Remove implements FS.
func (f *FaultFS) Remove(name string) error {
	if ft, ok := f.match(OpRemove, name, 0, 0); ok {
		if err := hit(ft); err != nil {
			return pathErr("remove", name, err)
		}
	}
	return f.inner.Remove(name)
}

// DirectIO implements FS: that of the wrapped filesystem.
func (f *FaultFS) DirectIO() error { return f.inner.DirectIO() }

type faultFile struct {
	fs    *FaultFS
	name  string
	inner File
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	ft, ok := f.fs.match(OpRead, f.name, off, int64(len(p)))
	if !ok {
		return f.inner.ReadAt(p, off)
	}
	if ft.Delay > 0 {
		time.Sleep(ft.Delay)
	}
	if ft.Err != nil {
		return 0, pathErr("read", f.name, ft.Err)
	}
	n, err := f.inner.ReadAt(p, off)
	if ft.Corrupt && n > 0 {
		p[n/2] ^= 1 << 4
	}
	return n, err
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	ft, ok := f.fs.match(OpWrite, f.name, off, int64(len(p)))
	if !ok {
		return f.inner.WriteAt(p, off)
	}
	if ft.Delay > 0 {
		time.Sleep(ft.Delay)
	}
	if ft.Err == nil && !ft.Short {
		return f.inner.WriteAt(p, off)
	}
	// The bytes before From land; with From 0 a short write stores half.
	keep := int64(0)
	switch {
	case ft.From > off:
		keep = ft.From - off
	case ft.Short && ft.From == 0:
		keep = int64(len(p)) / 2
	}
	n, err := 0, error(nil)
	if keep > 0 {
		n, err = f.inner.WriteAt(p[:keep], off)
		if err != nil {
			return n, err
		}
	}
	if ft.Short {
		return n, nil
	}
	return n, pathErr("write", f.name, ft.Err)
}

func (f *faultFile) Close() error { return f.inner.Close() }

func pathErr(op, path string, err error) error {
	return &fs.PathError{Op: op, Path: path, Err: err}
}
