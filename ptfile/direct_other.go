//go:build !linux

package ptfile

import (
	"os"
	"unsafe"
)

// openForWrite creates path for writing; O_DIRECT is Linux's.
func openForWrite(path string, _ bool) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	return f, false, err
}

func clearDirect(*os.File) error { return nil }

func isInvalid(error) bool { return false }

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
