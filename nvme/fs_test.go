package nvme

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// filesystems is every FS implementation with a fresh root directory.
func filesystems(t *testing.T) map[string]func(t *testing.T) (FS, string) {
	return map[string]func(t *testing.T) (FS, string){
		"os": func(t *testing.T) (FS, string) { return NewOSFS(), t.TempDir() },
		"mem": func(t *testing.T) (FS, string) {
			m := NewMemFS(0)
			if err := m.Mkdir("/nvme"); err != nil {
				t.Fatal(err)
			}
			return m, "/nvme"
		},
		"fault": func(t *testing.T) (FS, string) { return NewFaultFS(NewOSFS()), t.TempDir() },
	}
}

// TestFS is the conformance suite every FS passes.
func TestFS(t *testing.T) {
	for name, mk := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			fsys, root := mk(t)
			dir := filepath.Join(root, "d")
			if err := fsys.Mkdir(dir); err != nil {
				t.Fatal(err)
			}
			if err := fsys.Mkdir(dir); err != nil {
				t.Errorf("Mkdir of an existing directory: %v", err)
			}
			if err := fsys.Mkdir(filepath.Join(root, "no", "such")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Mkdir with a missing parent = %v, want ErrNotExist", err)
			}
			if _, err := fsys.OpenFile(filepath.Join(dir, "x"), false); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("OpenFile of a missing file without create = %v, want ErrNotExist", err)
			}
			name := filepath.Join(dir, "x.swp")
			f, err := fsys.OpenFile(name, true)
			if err != nil {
				t.Fatal(err)
			}
			data := alignedBytes(3 * Align)
			for i := range data {
				data[i] = byte(i * 7)
			}
			if n, err := f.WriteAt(data[Align:], Align); err != nil || n != 2*Align {
				t.Fatalf("WriteAt = %d, %v", n, err)
			}
			if n, err := f.WriteAt(data[:Align], 0); err != nil || n != Align {
				t.Fatalf("WriteAt = %d, %v", n, err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			f, err = fsys.OpenFile(name, false)
			if err != nil {
				t.Fatal(err)
			}
			got := alignedBytes(4 * Align)
			n, err := f.ReadAt(got, 0)
			if n != 3*Align || !errors.Is(err, io.EOF) {
				t.Errorf("ReadAt past the end = %d, %v; want %d, EOF", n, err, 3*Align)
			}
			if !bytes.Equal(got[:n], data) {
				t.Error("read back different bytes")
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			names, err := fsys.ReadDir(dir)
			if err != nil || len(names) != 1 || names[0] != "x.swp" {
				t.Errorf("ReadDir = %v, %v", names, err)
			}
			if err := fsys.Remove(dir); !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
				t.Errorf("Remove of a non-empty directory = %v", err)
			}
			if err := fsys.Remove(name); err != nil {
				t.Fatal(err)
			}
			if err := fsys.Remove(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := fsys.ReadDir(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("ReadDir of a removed directory = %v", err)
			}
		})
	}
}

func TestMemFSCapacity(t *testing.T) {
	m := NewMemFS(10)
	f, err := m.OpenFile("/a", true)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.WriteAt([]byte("0123456789abc"), 0); n != 10 || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("WriteAt past the capacity = %d, %v; want 10, ENOSPC", n, err)
	}
	if n, err := f.WriteAt([]byte("xy"), 3); n != 2 || err != nil {
		t.Errorf("overwrite inside a full disk = %d, %v", n, err)
	}
	if err := m.Remove("/a"); err != nil || m.Used() != 0 {
		t.Errorf("Remove = %v, used %d", err, m.Used())
	}
}

func TestOSFSDirect(t *testing.T) {
	o := NewOSFS()
	f, err := o.OpenFile(filepath.Join(t.TempDir(), "x"), true)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Logf("DirectIO on the test directory: %v", o.DirectIO())
	if oDirect == 0 && o.DirectIO() == nil {
		t.Error("without O_DIRECT, DirectIO must say why")
	}
}

// TestOSFSFallback: a filesystem that refuses O_DIRECT (EINVAL at open, as
// tmpfs before Linux 6.6 does) gets buffered I/O, and the reason is kept.
func TestOSFSFallback(t *testing.T) {
	if oDirect == 0 {
		t.Skip("no O_DIRECT on " + runtime.GOOS)
	}
	o := NewOSFS()
	o.open = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		if flag&oDirect != 0 {
			return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EINVAL}
		}
		return os.OpenFile(name, flag, perm)
	}
	s, _ := newSwapper(t, o, testOptions(t.TempDir()))
	src := []float32{1, 2, 3}
	if err := s.SwapOut("k", src).Wait(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 3)
	if err := s.SwapIn("k", got).Wait(); err != nil || got[2] != 3 {
		t.Fatalf("round trip through buffered I/O: %v, %v", got, err)
	}
	if err := s.Stats().DirectIO; !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "page cache") {
		t.Errorf("DirectIO = %v, want the recorded EINVAL", err)
	}
}

func TestFaultFS(t *testing.T) {
	ffs := NewFaultFS(NewMemFS(0),
		Fault{Ops: OpWrite, Path: "a", From: 100, Err: syscall.ENOSPC, Times: 1},
		Fault{Ops: OpWrite, Path: "b", Short: true},
		Fault{Ops: OpRead | OpOpen, Path: "c", Err: syscall.EIO},
	)
	a, _ := ffs.OpenFile("/a", true)
	if n, err := a.WriteAt(make([]byte, 50), 0); n != 50 || err != nil {
		t.Errorf("write before From = %d, %v", n, err)
	}
	if n, err := a.WriteAt(make([]byte, 100), 50); n != 50 || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write across From = %d, %v; want 50, ENOSPC", n, err)
	}
	if n, err := a.WriteAt(make([]byte, 100), 50); n != 100 || err != nil {
		t.Errorf("write after Times ran out = %d, %v", n, err)
	}
	b, _ := ffs.OpenFile("/b", true)
	if n, err := b.WriteAt(make([]byte, 64), 0); n != 32 || err != nil {
		t.Errorf("short write = %d, %v; want 32, nil", n, err)
	}
	if _, err := ffs.OpenFile("/c", true); !errors.Is(err, syscall.EIO) {
		t.Errorf("open = %v, want EIO", err)
	}
	if ffs.Hits(0) != 1 || ffs.Hits(1) != 1 || ffs.Hits(2) != 1 {
		t.Errorf("hits = %d %d %d", ffs.Hits(0), ffs.Hits(1), ffs.Hits(2))
	}
	if got := (OpRead | OpWrite).String(); got != "write|read" {
		t.Errorf("Op.String = %q", got)
	}
}
