package ptfile

import (
	"archive/zip"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"strings"
)

// align is the payload alignment torch.save uses, so that storages can be
// memory-mapped in place.
const align = 64

// Write saves root as a torch.save checkpoint at path, crash-safely: it is
// written to path+".tmp", fsynced, renamed over path, and the directory is
// fsynced, so path holds either the old file or the whole new one. Every
// tensor's storage must be loaded or have a Source. Errors name the file.
// It is WriteFile with the default options.
func Write(path string, root any) error {
	_, err := WriteFile(path, root, WriteOptions{})
	return err
}

// Encode writes root as a torch.save checkpoint to w, with archive as the
// archive's directory name (see ArchiveName).
func Encode(w io.Writer, archive string, root any) error {
	pkl, storages, err := marshal(root)
	if err != nil {
		return fmt.Errorf("ptfile: %w", err)
	}
	if err := writeZip(w, archive, pkl, storages, nil); err != nil {
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
//
// Storages with a Source are read in pieces of len(*piece) bytes
// (allocated when *piece is nil; piece nil: a piece of its own).
func writeZip(w io.Writer, archive string, pkl []byte, storages []*Storage, piece *[]byte) error {
	if piece == nil {
		piece = new([]byte)
	}
	if archive == "" || strings.ContainsAny(archive, "/\\") {
		return fmt.Errorf("archive name %q: want one directory name", archive)
	}
	zw := zip.NewWriter(w)
	var off uint64 // bytes written so far; the local headers are ours to count
	add := func(name string, size int64, crc uint32, payload func(io.Writer) error) error {
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
			CRC32: crc, CompressedSize64: uint64(size), UncompressedSize64: uint64(size),
		})
		if err != nil {
			return err
		}
		if err := payload(fw); err != nil {
			return err
		}
		off = start + uint64(len(extra)) + uint64(size)
		return nil
	}
	addBytes := func(name string, data []byte) error {
		return add(name, int64(len(data)), crc32.ChecksumIEEE(data), func(w io.Writer) error {
			_, err := w.Write(data)
			return err
		})
	}
	if err := addBytes("data.pkl", pkl); err != nil {
		return err
	}
	if err := addBytes("byteorder", []byte("little")); err != nil {
		return err
	}
	for i, s := range storages {
		name := fmt.Sprintf("data/%d", i)
		if s.Data != nil {
			if err := addBytes(name, s.Data); err != nil {
				return err
			}
			continue
		}
		if v, ok := s.Src.(viewer); ok && v.view() != nil {
			if err := addBytes(name, v.view()); err != nil {
				return err
			}
			continue
		}
		// A source is read twice: for the CRC-32 the local header holds
		// before the payload, then to write it.
		if *piece == nil {
			*piece = make([]byte, sourcePiece)
		}
		var crc uint32
		err := eachPiece(s, *piece, func(b []byte) error {
			crc = crc32.Update(crc, crc32.IEEETable, b)
			return nil
		})
		if err == nil {
			err = add(name, s.NBytes(), crc, func(w io.Writer) error {
				return eachPiece(s, *piece, func(b []byte) error {
					_, err := w.Write(b)
					return err
				})
			})
		}
		if err != nil {
			return fmt.Errorf("storage %s: %w", name, err)
		}
	}
	if err := addBytes("version", []byte("3\n")); err != nil {
		return err
	}
	return zw.Close()
}

// eachPiece reads s's source in order, a piece at a time, into piece.
func eachPiece(s *Storage, piece []byte, fn func([]byte) error) error {
	n := s.NBytes()
	for off := int64(0); off < n; {
		b := piece[:min(int64(len(piece)), n-off)]
		if _, err := s.Src.ReadAt(b, off); err != nil {
			return fmt.Errorf("reading its source at byte %d: %w", off, err)
		}
		if err := fn(b); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}
