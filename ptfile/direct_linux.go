package ptfile

import (
	"errors"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openForWrite creates path for writing, with O_DIRECT when direct is set
// and the filesystem takes it (tmpfs and some others refuse it: EINVAL),
// and says whether it got it.
func openForWrite(path string, direct bool) (*os.File, bool, error) {
	const flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if direct {
		f, err := os.OpenFile(path, flags|unix.O_DIRECT, 0o644)
		if err == nil {
			return f, true, nil
		}
		if !isInvalid(err) {
			return nil, false, err
		}
	}
	f, err := os.OpenFile(path, flags, 0o644)
	return f, false, err
}

// clearDirect turns O_DIRECT off on f.
func clearDirect(f *os.File) error {
	fd := int(f.Fd())
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_DIRECT)
	return err
}

func isInvalid(err error) bool { return errors.Is(err, syscall.EINVAL) }

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
