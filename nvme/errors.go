package nvme

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"syscall"

	"github.com/dszero/dszero/mem"
)

var (
	// ErrClosed: the swapper was used after Close.
	ErrClosed = errors.New("nvme: swapper closed")
	// ErrNoBuffer: every swap buffer is held by callers (Acquire or
	// Prefetch without Release), so waiting for one would never end.
	ErrNoBuffer = errors.New("nvme: every swap buffer is held")
	// ErrUnknownKey: a key was read before anything was written to it.
	ErrUnknownKey = errors.New("nvme: key was never written")
	// ErrShortWrite: the disk took fewer bytes than it was given and said
	// nothing (pwrite(2) on a full disk).
	ErrShortWrite = errors.New("short write")
	// ErrShortRead: a swap file ended before the bytes written to it
	// (something outside the swapper changed it).
	ErrShortRead = errors.New("short read")
)

// IOError is a swap that failed: the key, its file, and the byte range of
// the I/O that failed first.
type IOError struct {
	Op     string // "open", "write", "read", "close"
	Key    string
	Path   string
	Offset int64 // of the failed I/O in the file
	Len    int64 // its length
	Err    error
}

func (e *IOError) Error() string {
	msg := fmt.Sprintf("nvme: %s of key %q, file %s", e.Op, e.Key, e.Path)
	if e.Len > 0 {
		msg += fmt.Sprintf(", offset %d (%d bytes)", e.Offset, e.Len)
	}
	msg += ": " + bare(e.Err).Error()
	if fix := fixFor(e.Err); fix != "" {
		msg += "; " + fix
	}
	return msg
}

func (e *IOError) Unwrap() error { return e.Err }

// bare drops the *fs.PathError around an error, whose path the message
// already names.
func bare(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}

// fixFor is what to do about an I/O error, or "".
func fixFor(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, ErrShortWrite):
		return "the disk under nvme_path is full: free space there or point nvme_path at a larger disk"
	case errors.Is(err, syscall.EIO):
		return "the disk reported an I/O error: check it (dmesg, smartctl) or point nvme_path at another disk"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EROFS):
		return "make nvme_path writable by this process or choose another"
	case errors.Is(err, ErrChecksum):
		return "the file's bytes changed on disk after dszero wrote them (disk or filesystem corruption, or another process writing under nvme_path): check the disk (dmesg, smartctl) or point nvme_path at another; " + resumeFix
	case errors.Is(err, ErrShortRead), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, fs.ErrNotExist):
		return "the file (or its folder) was cut short or deleted while dszero ran, and swap files must not be touched then; " + resumeFix
	}
	return ""
}

// resumeFix is what to do after a swap file turned out not to hold what
// was written: the read failed, so nothing was trained on its bytes or
// saved from them.
const resumeFix = "nothing was trained on or saved from that file's bytes, so checkpoints saved before this error are intact: resume from the latest one"

// PreflightError is a swap directory that cannot hold what the run needs,
// found before training starts.
type PreflightError struct {
	Key     string // the config key of the path ("zero_optimization.offload_optimizer.nvme_path")
	Path    string // nvme_path
	Rank    int
	Needed  int64 // bytes the preflight tried to write (0: none asked)
	Written int64 // bytes written before it failed
	Problem string
	Fix     string
	Err     error
}

func (e *PreflightError) Error() string {
	msg := fmt.Sprintf("nvme: %s %q %s", e.Key, e.Path, e.Problem)
	if e.Needed > 0 {
		msg += fmt.Sprintf(" (rank %d needs %s = %d bytes there", e.Rank, mem.FormatBytes(e.Needed), e.Needed)
		if e.Written > 0 {
			msg += fmt.Sprintf("; %d were written", e.Written)
		}
		msg += ")"
	}
	return msg + ": " + e.Err.Error() + "; fix: " + e.Fix
}

func (e *PreflightError) Unwrap() error { return e.Err }

// preflightError classifies err, met while setting up or writing the
// preflight file under o.Path.
func preflightError(o Options, written int64, err error) *PreflightError {
	e := &PreflightError{Key: o.key("nvme_path"), Path: o.Path, Rank: o.Rank, Needed: o.Preflight, Written: written, Err: err}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		e.Problem = "does not exist"
		e.Fix = "create it (mkdir -p) or mount the NVMe drive there; dszero does not create nvme_path itself, so that a missing mount is not filled on the wrong disk"
	case errors.Is(err, syscall.ENOTDIR):
		e.Problem = "is not a directory"
		e.Fix = "point nvme_path at a directory"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EROFS):
		e.Problem = "is not writable by this process"
		e.Fix = "make it writable (chown/chmod, or remount read-write) or choose another nvme_path"
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, ErrShortWrite):
		e.Problem = "is too small"
		e.Fix = "free space on that disk, point nvme_path at a larger disk, or offload less to NVMe"
	case errors.Is(err, syscall.EIO):
		e.Problem = "is on a disk that reports I/O errors"
		e.Fix = "check the disk (dmesg, smartctl) or point nvme_path at another"
	default:
		e.Problem = "cannot hold the swap files"
		e.Fix = "point nvme_path at a writable directory on a local disk"
	}
	return e
}
