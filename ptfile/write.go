package ptfile

import (
	"archive/zip"
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// align is the payload alignment torch.save uses, so that storages can be
// memory-mapped in place.
const align = 64

// Write saves root as a torch.save checkpoint at path, crash-safely: it is
// written to path+".tmp", fsynced, renamed over path, and the directory is
// fsynced, so path holds either the old file or the whole new one. Every
// tensor's storage must be loaded. Errors name the file.
func Write(path string, root any) error {
	pkl, storages, err := marshal(root)
	if err != nil {
		return fmt.Errorf("ptfile: write %s: %w", path, err)
	}
	tmp := path + ".tmp"
	fail := func(err error) error {
		os.Remove(tmp)
		return fmt.Errorf("ptfile: write %s: %w", path, err)
	}
	fd, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fail(err)
	}
	bw := bufio.NewWriterSize(fd, 1<<20)
	err = writeZip(bw, ArchiveName(path), pkl, storages)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = fd.Sync()
	}
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fail(err)
	}
	if dir, err := os.Open(filepath.Dir(path)); err == nil {
		err = dir.Sync()
		dir.Close()
		if err != nil {
			return fmt.Errorf("ptfile: write %s: sync directory: %w", path, err)
		}
	}
	return nil
}

// Encode writes root as a torch.save checkpoint to w, with archive as the
// archive's directory name (see ArchiveName).
func Encode(w io.Writer, archive string, root any) error {
	pkl, storages, err := marshal(root)
	if err != nil {
		return fmt.Errorf("ptfile: %w", err)
	}
	if err := writeZip(w, archive, pkl, storages); err != nil {
		return fmt.Errorf("ptfile: %w", err)
	}
	return nil
}

// ArchiveName is the directory torch.save names inside the zip for path:
// the base name without its last extension ("mp_rank_00_model_states"
// for ".../mp_rank_00_model_states.pt"), or "archive" when that is empty.
func ArchiveName(path string) string {
	base := filepath.Base(path)
	if i := strings.LastIndexByte(base, '.'); i >= 0 {
		base = base[:i]
	}
	if base == "" || base == "/" {
		return "archive"
	}
	return base
}

// writeZip lays out the archive as torch 2.x does: data.pkl, byteorder,
// data/0..N-1, version; every entry stored uncompressed with its payload
// at a multiple of 64 bytes (padding in an "FB" extra field, as torch's
// writer pads).
func writeZip(w io.Writer, archive string, pkl []byte, storages []*Storage) error {
	if archive == "" || strings.ContainsAny(archive, "/\\") {
		return fmt.Errorf("archive name %q: want one directory name", archive)
	}
	zw := zip.NewWriter(w)
	var off uint64 // bytes written so far; the local headers are ours to count
	add := func(name string, data []byte) error {
		name = archive + "/" + name
		start := off + 30 + uint64(len(name))
		var extra []byte
		if pad := (align - start%align) % align; pad != 0 {
			if pad < 4 {
				pad += align
			}
			extra = make([]byte, pad)
			copy(extra, "FB")
			binary.LittleEndian.PutUint16(extra[2:], uint16(pad-4))
		}
		fw, err := zw.CreateRaw(&zip.FileHeader{
			Name: name, Method: zip.Store, ReaderVersion: 20, CreatorVersion: 20, Extra: extra,
			CRC32: crc32.ChecksumIEEE(data), CompressedSize64: uint64(len(data)), UncompressedSize64: uint64(len(data)),
		})
		if err != nil {
			return err
		}
		if _, err := fw.Write(data); err != nil {
			return err
		}
		off = start + uint64(len(extra)) + uint64(len(data))
		return nil
	}
	if err := add("data.pkl", pkl); err != nil {
		return err
	}
	if err := add("byteorder", []byte("little")); err != nil {
		return err
	}
	for i, s := range storages {
		if err := add(fmt.Sprintf("data/%d", i), s.Data); err != nil {
			return err
		}
	}
	if err := add("version", []byte("3\n")); err != nil {
		return err
	}
	return zw.Close()
}
