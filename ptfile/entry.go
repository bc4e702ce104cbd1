package ptfile

import (
	"archive/zip"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
)

// Reading entries. Every byte that leaves this package has been checked
// against its entry's CRC-32, or is checked before the read that passes
// the entry's end returns: Load and the records check the whole entry as
// they read it; ReadAt streams a storage in pieces and keeps a running
// CRC-32 of the bytes from the start of the entry, so that pieces read in
// order are hashed once, as they are read, a piece that skips ahead first
// hashes what it skips, and the piece that reaches the entry's end
// compares the CRC with the archive's. Verify hashes the rest of a
// storage that was not read to its end.
//
// archive/zip checks CRCs only when the recorded CRC is nonzero; the
// checks here compare always.

// maxRecord bounds the version and byteorder records ("3\n", "little").
const maxRecord = 1 << 10

// checkBounds checks that an entry's data lies inside the file: what a
// stored entry may cost to read is then bounded by the file's size.
func (f *File) checkBounds(zf *zip.File) error {
	off, err := zf.DataOffset()
	if err != nil {
		return err
	}
	if zf.CompressedSize64 > uint64(f.size) || uint64(off)+zf.CompressedSize64 > uint64(f.size) {
		return fmt.Errorf("entry data runs past the end of the file (truncated?)")
	}
	if zf.Method == zip.Store && zf.CompressedSize64 != zf.UncompressedSize64 {
		return fmt.Errorf("stored entry of %d bytes claims %d uncompressed", zf.CompressedSize64, zf.UncompressedSize64)
	}
	return nil
}

// readEntry reads a whole entry, checking its CRC-32. want, when not -1,
// is the size the entry must have. It allocates the entry's recorded
// size: a stored entry lies inside the file (checkBounds), a compressed
// one may declare anything, so its size is bounded before it is read —
// the pickle's by Options.MaxPickleBytes, the records' by maxRecord, a
// storage's by its pickle's numel, which Load's caller checks against
// what it needs.
func (f *File) readEntry(zf *zip.File, want int64) ([]byte, error) {
	n := zf.UncompressedSize64
	if want >= 0 && n != uint64(want) {
		return nil, fmt.Errorf("entry holds %d bytes, want %d", n, want)
	}
	if err := f.checkBounds(zf); err != nil {
		return nil, err
	}
	if n > math.MaxInt {
		return nil, fmt.Errorf("entry size %d", n)
	}
	rc, err := zf.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	buf, err := readN(rc, int(n), zf.Method == zip.Store)
	if err == nil {
		if got := crc32.ChecksumIEEE(buf); got != zf.CRC32 {
			return nil, checksumError(got, zf.CRC32)
		}
		err = atEnd(rc)
	}
	if err != nil {
		return nil, fmt.Errorf("reading entry: %w", err)
	}
	return buf, nil
}

// readN reads n bytes from r. A stored entry's n bytes are in the file;
// an inflating stream may end sooner than it declared, so its buffer
// grows with what arrives rather than being allocated whole up front.
func readN(r io.Reader, n int, stored bool) ([]byte, error) {
	if stored {
		buf := make([]byte, n)
		_, err := io.ReadFull(r, buf)
		return buf, err
	}
	var buf []byte
	for len(buf) < n {
		k := min(n-len(buf), max(len(buf), 1<<20))
		buf = slices.Grow(buf, k)
		m, err := io.ReadFull(r, buf[len(buf):len(buf)+k])
		buf = buf[:len(buf)+m]
		if err != nil {
			return buf, inflateError(err)
		}
	}
	return buf, nil
}

// atEnd checks that an entry's reader, having given the recorded size,
// is at its end: nothing may follow.
func atEnd(r io.Reader) error {
	var one [1]byte
	switch _, err := io.ReadFull(r, one[:]); {
	case err == io.EOF:
		return nil
	case err == nil, errors.Is(err, zip.ErrFormat): // archive/zip's "more than recorded"
		return errors.New("the entry is longer than its recorded size")
	default:
		return err
	}
}

func checksumError(got, want uint32) error {
	return fmt.Errorf("%w: its bytes hash to %08x, the archive recorded %08x when it was written: the file is corrupted (restore it from a good copy)", ErrChecksum, got, want)
}

// storageEntry is s's archive entry, s being one of f's storages.
func (f *File) storageEntry(s *Storage) (*zip.File, string, error) {
	if f.byKey[s.Key] != s {
		return nil, "", fmt.Errorf("ptfile: %s: storage %q is not from this file", f.Name, s.Key)
	}
	name := f.Archive + "/data/" + s.Key
	return f.entries[name], name, nil
}

// Load reads one storage's bytes (checking size and CRC-32) into s.Data.
// It allocates s.NBytes(), the size the pickle declares: a caller reading
// files it did not write checks that against what it needs first.
func (f *File) Load(s *Storage) error {
	if s.Data != nil {
		return nil
	}
	zf, name, err := f.storageEntry(s)
	if err != nil {
		return err
	}
	b, err := f.readEntry(zf, s.NBytes())
	if err != nil {
		return f.fileError(name, err)
	}
	s.Data = b
	f.cursorOf(s).checked = true
	return nil
}

// cursor follows the streamed reads of one storage.
type cursor struct {
	crc      uint32 // CRC-32 of the entry's bytes [0, hashed)
	hashed   int64
	checked  bool // every byte hashed, and the CRC-32 matched
	inBounds bool // checkBounds passed
	// A compressed entry is read through its inflating stream, at pos
	// (never past hashed); a read behind pos reopens it.
	rc  io.ReadCloser
	pos int64
}

func (f *File) cursorOf(s *Storage) *cursor {
	c := f.cursors[s]
	if c == nil {
		c = &cursor{}
		f.cursors[s] = c
	}
	return c
}

// ReadAt reads bytes [off, off+len(p)) of storage s without loading it:
// streaming a large storage a piece at a time (dszero export). Pieces are
// checked against the entry's CRC-32 as described above: the read that
// reaches the end of the entry fails if any byte of it differs, and
// Verify checks a storage not read to its end. A compressed entry is
// inflated as it is read; reading it out of order re-inflates from its
// start.
func (f *File) ReadAt(s *Storage, p []byte, off int64) error {
	zf, name, err := f.storageEntry(s)
	if err != nil {
		return err
	}
	if off < 0 || off+int64(len(p)) > s.NBytes() {
		return f.errorf(name, "bytes [%d, %d) of a %d-byte storage", off, off+int64(len(p)), s.NBytes())
	}
	c := f.cursorOf(s)
	if err := f.hashTo(zf, c, off); err != nil {
		return f.fileError(name, err)
	}
	if err := f.readRaw(zf, c, p, off); err != nil {
		return f.fileError(name, err)
	}
	if end := off + int64(len(p)); end > c.hashed {
		c.crc = crc32.Update(c.crc, crc32.IEEETable, p[c.hashed-off:])
		c.hashed = end
	}
	if err := f.settle(zf, c); err != nil {
		return f.fileError(name, err)
	}
	return nil
}

// Verify checks the CRC-32 of a storage's whole entry, hashing whatever
// ReadAt has not read yet (nothing, for a storage read to its end or
// loaded).
func (f *File) Verify(s *Storage) error {
	zf, name, err := f.storageEntry(s)
	if err != nil {
		return err
	}
	c := f.cursorOf(s)
	if c.checked {
		return nil
	}
	if err := f.hashTo(zf, c, int64(zf.UncompressedSize64)); err != nil {
		return f.fileError(name, err)
	}
	if err := f.settle(zf, c); err != nil {
		return f.fileError(name, err)
	}
	return nil
}

// hashTo extends c's running CRC-32 to byte off of the entry.
func (f *File) hashTo(zf *zip.File, c *cursor, off int64) error {
	if c.hashed >= off {
		return nil
	}
	if f.scratch == nil {
		f.scratch = make([]byte, 256<<10)
	}
	for c.hashed < off {
		b := f.scratch[:min(int64(len(f.scratch)), off-c.hashed)]
		if err := f.readRaw(zf, c, b, c.hashed); err != nil {
			return err
		}
		c.crc = crc32.Update(c.crc, crc32.IEEETable, b)
		c.hashed += int64(len(b))
	}
	return nil
}

// readRaw reads the entry's bytes [off, off+len(p)), unchecked.
func (f *File) readRaw(zf *zip.File, c *cursor, p []byte, off int64) error {
	if !c.inBounds {
		if err := f.checkBounds(zf); err != nil {
			return err
		}
		c.inBounds = true
	}
	if zf.Method == zip.Store {
		base, err := zf.DataOffset()
		if err != nil {
			return err
		}
		_, err = f.ra.ReadAt(p, base+off)
		return err
	}
	if c.rc == nil || off < c.pos {
		if c.rc != nil {
			c.rc.Close()
		}
		rc, err := zf.Open()
		if err != nil {
			return err
		}
		c.rc, c.pos = rc, 0
	}
	if _, err := io.CopyN(io.Discard, c.rc, off-c.pos); err != nil {
		return inflateError(err)
	}
	c.pos = off
	if _, err := io.ReadFull(c.rc, p); err != nil {
		return inflateError(err)
	}
	c.pos += int64(len(p))
	return nil
}

func inflateError(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return errors.New("the entry inflates to fewer bytes than its recorded size")
	}
	return fmt.Errorf("inflating the entry: %w", err)
}

// settle compares the CRC-32 once every byte of the entry is hashed.
func (f *File) settle(zf *zip.File, c *cursor) error {
	if c.checked || c.hashed < int64(zf.UncompressedSize64) {
		return nil
	}
	if c.crc != zf.CRC32 {
		return checksumError(c.crc, zf.CRC32)
	}
	if c.rc != nil {
		err := atEnd(c.rc)
		c.rc.Close()
		c.rc = nil
		if err != nil {
			return err
		}
	}
	c.checked = true
	return nil
}
