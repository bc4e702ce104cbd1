package ptfile

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
)

// Writing a file at disk speed. WriteFile writes the archive through one
// I/O buffer of WriteOptions.BufferSize bytes, in two halves: while one
// half is on its way to the disk (a background write), the next is filled
// and hashed, so the sha256 of the file costs no time of its own. The
// halves are aligned to 4 KiB and written whole with O_DIRECT where the
// filesystem allows it (Linux; not tmpfs), so the bytes go from the buffer
// to the disk without filling the page cache, in writes as large as half
// the buffer; the file's tail, under 4 KiB, is written without O_DIRECT.
// Where O_DIRECT is refused — at open or at the first write (EINVAL) — the
// file is written through the page cache with the same large writes:
// nothing else changes. The file is fsynced once, at its end.
//
// Storages with a Source are read from it in pieces of sourcePiece bytes
// (once for the entry's CRC-32, once to write it); a Float32Source on a
// little-endian host is hashed and copied from its own memory. A write's
// memory is therefore the pickle, the I/O buffer and one piece
// (ScratchBytes), whatever the size of the tensors.

// WriteOptions tune WriteFile; the zero value is the default.
type WriteOptions struct {
	// BufferSize is the I/O buffer's size in bytes, rounded up to a
	// multiple of 8 KiB (default DefaultBufferSize): each write the disk
	// sees is half of it.
	BufferSize int
	// NoDirect writes through the page cache, never with O_DIRECT.
	NoDirect bool
}

// DefaultBufferSize is WriteOptions.BufferSize's default.
const DefaultBufferSize = 4 << 20

// sourcePiece is the piece a Source is read in.
const sourcePiece = 4 << 20

// directAlign is the alignment of an O_DIRECT write's buffer, offset and
// length: 4 KiB, a multiple of every disk's logical block.
const directAlign = 4096

func (o WriteOptions) bufferSize() int {
	n := o.BufferSize
	if n <= 0 {
		n = DefaultBufferSize
	}
	return (n + 2*directAlign - 1) / (2 * directAlign) * (2 * directAlign)
}

// ScratchBytes is the memory WriteFile allocates besides the pickle: the
// I/O buffer, its alignment slack and one piece for reading sources.
func ScratchBytes(o WriteOptions) int64 {
	return int64(o.bufferSize()+2*directAlign) + sourcePiece
}

// Written describes a file WriteFile wrote.
type Written struct {
	Bytes  int64    // the file's size
	SHA256 [32]byte // of the whole file, computed as it was written
	// Direct says the payload (all but the tail under 4 KiB) was written
	// with O_DIRECT.
	Direct bool
}

// Writer writes checkpoint files one after another through one I/O
// buffer and one source piece, allocated at its first file and reused:
// a rank's saver keeps one. It is not safe for concurrent use.
type Writer struct {
	o     WriteOptions
	buf   []byte // the I/O buffer, aligned
	piece []byte
}

// NewWriter returns a writer with options o.
func NewWriter(o WriteOptions) *Writer { return &Writer{o: o} }

// WriteFile saves root as a torch.save checkpoint at path, crash-safely
// as Write does (path+".tmp", fsync, rename, fsync of the directory), and
// returns its size and sha256. Every tensor's storage must be loaded or
// have a Source; the archive's bytes are those Encode writes. Errors name
// the file.
func WriteFile(path string, root any, o WriteOptions) (Written, error) {
	return NewWriter(o).WriteFile(path, root)
}

// WriteFile is the package's WriteFile through w's buffers.
func (w *Writer) WriteFile(path string, root any) (Written, error) {
	pkl, storages, err := marshal(root)
	if err != nil {
		return Written{}, fmt.Errorf("ptfile: write %s: %w", path, err)
	}
	tmp := path + ".tmp"
	fail := func(err error) (Written, error) {
		os.Remove(tmp)
		return Written{}, fmt.Errorf("ptfile: write %s: %w", path, err)
	}
	if w.buf == nil {
		w.buf = alignedBuffer(w.o.bufferSize())
	}
	o, err := createOut(tmp, w.buf, !w.o.NoDirect)
	if err != nil {
		return fail(err)
	}
	err = writeZip(o, ArchiveName(path), pkl, storages, &w.piece)
	if cerr := o.close(); err == nil {
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
			return Written{}, fmt.Errorf("ptfile: write %s: sync directory: %w", path, err)
		}
	}
	res := Written{Bytes: o.size, Direct: o.directBytes > 0}
	o.sha.Sum(res.SHA256[:0])
	return res, nil
}

// out is the file being written: see the comment at the top of the file.
type out struct {
	f      *os.File
	direct bool
	halves [2][]byte
	cur, n int // the half being filled, and its bytes
	sha    hash.Hash
	size   int64
	// directBytes were written with O_DIRECT.
	directBytes int64
	// The background write of the other half, when pending.
	pending bool
	done    chan error
	err     error // the first error: every later call returns it
}

// createOut creates path, written through buf (aligned, its halves
// multiples of directAlign).
func createOut(path string, buf []byte, direct bool) (*out, error) {
	f, direct, err := openForWrite(path, direct)
	if err != nil {
		return nil, err
	}
	w := &out{f: f, direct: direct, sha: sha256.New(), done: make(chan error, 1)}
	h := len(buf) / 2
	w.halves[0], w.halves[1] = buf[:h:h], buf[h:]
	return w, nil
}

// alignedBuffer is n bytes starting at a multiple of directAlign.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+directAlign)
	off := 0
	if r := int(addrOf(b) % directAlign); r != 0 {
		off = directAlign - r
	}
	return b[off : off+n : off+n]
}

func (w *out) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.size += int64(len(p))
	total := len(p)
	for len(p) > 0 {
		// Hashed a half's worth at a time, as it is copied: the hashing of
		// one half overlaps the disk's write of the other.
		k := copy(w.halves[w.cur][w.n:], p)
		w.sha.Write(p[:k])
		w.n += k
		p = p[k:]
		if w.n == len(w.halves[w.cur]) {
			if err := w.submit(); err != nil {
				return total - len(p), err
			}
		}
	}
	return total, nil
}

// submit hands the full half to a background write and switches to the
// other, once the other's write is done.
func (w *out) submit() error {
	if err := w.wait(); err != nil {
		return err
	}
	b := w.halves[w.cur]
	w.pending = true
	go func() { w.done <- w.writeBlock(b) }()
	w.cur, w.n = 1-w.cur, 0
	return nil
}

func (w *out) wait() error {
	if w.pending {
		w.pending = false
		if err := <-w.done; err != nil && w.err == nil {
			w.err = err
		}
	}
	return w.err
}

// writeBlock writes a whole half: with O_DIRECT when the file has it,
// falling back to the page cache when the filesystem refuses.
func (w *out) writeBlock(b []byte) error {
	_, err := w.f.Write(b)
	if err == nil && w.direct {
		w.directBytes += int64(len(b))
	}
	if err != nil && w.direct && isInvalid(err) {
		// The filesystem takes O_DIRECT at open but not at write (or not
		// with these alignments): write through the page cache.
		if cerr := clearDirect(w.f); cerr != nil {
			return errors.Join(err, cerr)
		}
		w.direct = false
		_, err = w.f.Write(b)
	}
	return err
}

// close writes the tail, fsyncs once and closes the file.
func (w *out) close() error {
	err := w.wait()
	if err == nil && w.n > 0 {
		tail := w.halves[w.cur][:w.n]
		if w.direct && len(tail)%directAlign != 0 {
			if err = clearDirect(w.f); err == nil {
				w.direct = false
			}
		}
		if err == nil {
			err = w.writeBlock(tail)
		}
	}
	if err == nil {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}
