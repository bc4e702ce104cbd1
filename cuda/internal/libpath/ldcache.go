package libpath

import (
	"bytes"
	"encoding/binary"
)

// LDCacheEntry is one library the dynamic loader's cache knows.
type LDCacheEntry struct {
	Name string // the soname, e.g. "libcuda.so.1"
	Path string // where it lives, e.g. "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
}

// The glibc ≥ 2.32 ld.so.cache format ("new format", elf/dl-cache.h):
//
//	header (48 bytes): magic "glibc-ld.so.cache" (17), version "1.1" (3),
//	  nlibs uint32, len_strings uint32, flags uint8, 3 unused, extension
//	  offset uint32, 3 unused uint32
//	nlibs entries (24 bytes): flags int32, key uint32, value uint32,
//	  osversion uint32, hwcap uint64
//
// key and value are offsets of NUL-terminated strings (the soname and the
// path) from the start of the file. The low byte of flags is the ELF class
// (3: libc6), the next byte the architecture; older combined files start
// with the "ld.so-1.7.0" format and are not read (the dynamic loader's own
// search still covers them).
const (
	ldCacheMagic     = "glibc-ld.so.cache1.1"
	ldCacheHeader    = 48
	ldCacheEntrySize = 24
)

// ldCacheArch is the flags value of a 64-bit libc6 library per GOARCH
// (FLAG_ELF_LIBC6 | FLAG_X8664_LIB64, FLAG_AARCH64_LIB64).
var ldCacheArch = map[string]int32{"amd64": 0x0303, "arm64": 0x0a03}

// ReadLDCache returns the entries of an ld.so.cache image for arch (a
// GOARCH; entries of other architectures are skipped, all are kept for an
// unknown arch). A file in another format, or truncated, gives what could
// be read, possibly nothing: the cache is a hint, never required.
func ReadLDCache(data []byte, arch string) []LDCacheEntry {
	if len(data) < ldCacheHeader || string(data[:len(ldCacheMagic)]) != ldCacheMagic {
		return nil
	}
	le := binary.LittleEndian
	n := int(le.Uint32(data[20:]))
	want, filter := ldCacheArch[arch]
	var out []LDCacheEntry
	for i := range n {
		off := ldCacheHeader + i*ldCacheEntrySize
		if off+ldCacheEntrySize > len(data) {
			break
		}
		flags := int32(le.Uint32(data[off:]))
		if filter && flags != want {
			continue
		}
		name, ok1 := cString(data, le.Uint32(data[off+4:]))
		path, ok2 := cString(data, le.Uint32(data[off+8:]))
		if ok1 && ok2 {
			out = append(out, LDCacheEntry{Name: name, Path: path})
		}
	}
	return out
}

func cString(data []byte, off uint32) (string, bool) {
	if int64(off) >= int64(len(data)) {
		return "", false
	}
	end := bytes.IndexByte(data[off:], 0)
	if end < 0 {
		return "", false
	}
	return string(data[off : int(off)+end]), true
}
