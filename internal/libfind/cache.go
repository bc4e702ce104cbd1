package libfind

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// CacheEntry is one library the dynamic loader's cache knows: its soname
// and the path the loader would open.
type CacheEntry struct {
	Name string // libcuda.so.1
	Path string // /usr/lib/x86_64-linux-gnu/libcuda.so.1
}

// The loader cache's format (glibc's dl-cache.h, "new" format, written by
// ldconfig since glibc 2.32 alone and before that after the old one):
//
//	magic   "glibc-ld.so.cache1.1"       20 bytes
//	nlibs, len_strings                   uint32 each
//	flags, 3 padding, extension_offset,  12 bytes of unused: 20 bytes
//	nlibs entries of 24 bytes: flags int32, key uint32, value uint32,
//	        osversion uint32, hwcap uint64
//	the string table
//
// key and value are offsets of NUL-terminated strings (soname, path) from
// the start of the magic. The byte order is the machine's; ldconfig
// writes little-endian on every platform dszero runs on.
const (
	cacheMagic      = "glibc-ld.so.cache1.1"
	cacheHeaderSize = 48
	cacheEntrySize  = 24
)

// cachePath is where ldconfig writes the cache.
const cachePath = "/etc/ld.so.cache"

// cacheEntries reads Root's loader cache; a missing or unreadable cache
// has no entries (the other searches still run).
func (f Finder) cacheEntries() []CacheEntry {
	b, err := os.ReadFile(f.path(cachePath))
	if err != nil {
		return nil
	}
	es, _ := ParseCache(b)
	return es
}

// ParseCache reads a loader cache (/etc/ld.so.cache).
func ParseCache(b []byte) ([]CacheEntry, error) {
	at := bytes.Index(b, []byte(cacheMagic)) // after the old format's table, if any
	if at < 0 {
		return nil, errors.New("ld.so.cache: no glibc-ld.so.cache1.1 header (a format this reader does not know)")
	}
	c := b[at:]
	if len(c) < cacheHeaderSize {
		return nil, errors.New("ld.so.cache: truncated header")
	}
	le := binary.LittleEndian
	n := int(le.Uint32(c[20:]))
	if n < 0 || n > (len(c)-cacheHeaderSize)/cacheEntrySize {
		return nil, fmt.Errorf("ld.so.cache: %d entries do not fit %d bytes", n, len(c))
	}
	str := func(off uint32) (string, bool) {
		if int(off) >= len(c) {
			return "", false
		}
		end := bytes.IndexByte(c[off:], 0)
		if end < 0 {
			return "", false
		}
		return string(c[off : int(off)+end]), true
	}
	out := make([]CacheEntry, 0, n)
	for i := 0; i < n; i++ {
		e := c[cacheHeaderSize+i*cacheEntrySize:]
		name, ok1 := str(le.Uint32(e[4:]))
		path, ok2 := str(le.Uint32(e[8:]))
		if !ok1 || !ok2 {
			return out, fmt.Errorf("ld.so.cache: entry %d points outside the file", i)
		}
		out = append(out, CacheEntry{Name: name, Path: path})
	}
	return out, nil
}

// WriteCache returns a loader cache listing entries, in the format
// ParseCache reads: a fake /etc/ld.so.cache for tests.
func WriteCache(entries []CacheEntry) []byte {
	le := binary.LittleEndian
	strBase := cacheHeaderSize + len(entries)*cacheEntrySize
	var strs []byte
	table := make([]byte, len(entries)*cacheEntrySize)
	for i, e := range entries {
		t := table[i*cacheEntrySize:]
		le.PutUint32(t[0:], 0x0303) // ELF, x86-64 libc6
		le.PutUint32(t[4:], uint32(strBase+len(strs)))
		strs = append(append(strs, e.Name...), 0)
		le.PutUint32(t[8:], uint32(strBase+len(strs)))
		strs = append(append(strs, e.Path...), 0)
	}
	h := make([]byte, cacheHeaderSize)
	copy(h, cacheMagic)
	le.PutUint32(h[20:], uint32(len(entries)))
	le.PutUint32(h[24:], uint32(len(strs)))
	return append(append(h, table...), strs...)
}
