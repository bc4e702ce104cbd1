package ptfile

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"sync/atomic"
)

// Writing a file at disk speed. WriteFile writes the archive through one
// I/O buffer of WriteOptions.BufferSize bytes, cut into a ring of
// ringBlocks blocks, in a pipeline of three goroutines: the caller copies
// the archive's bytes into a free block; a hasher adds each full block to
// the file's sha256; a writer writes the hashed blocks in order and hands
// them back to be filled again. Copying, hashing and the disk's writes
// thus overlap, and the sha256 of the file costs no time of its own where
// the disk is slower than the hash. The blocks are aligned to 4 KiB and
// written whole with O_DIRECT where the filesystem allows it (Linux; not
// tmpfs), so the bytes go from the buffer to the disk without filling the
// page cache, in writes of a block each; the file's tail, under a block
// and not a multiple of 4 KiB, is written without O_DIRECT. Where O_DIRECT
// is refused — at open or at the first write (EINVAL) — the file is
// written through the page cache with the same large writes: nothing else
// changes. The writer keeps the first error, writes nothing after it and
// goes on handing blocks back, so the caller's next Write returns the
// error and close never waits on a stuck pipeline. The file is fsynced
// once, at its end.
//
// Storages with a Source are read from it in pieces of sourcePiece bytes
// (once for the entry's CRC-32, once to write it); a Float32Source on a
// little-endian host is hashed and copied from its own memory. A write's
// memory is therefore the pickle, the I/O buffer and one piece
// (ScratchBytes), whatever the size of the tensors.

// WriteOptions tune WriteFile; the zero value is the default.
type WriteOptions struct {
	// BufferSize is the I/O buffer's size in bytes, rounded up to a
	// multiple of ringBlocks×4 KiB (default DefaultBufferSize): each write
	// the disk sees is a ringBlocks-th of it.
	BufferSize int
	// NoDirect writes through the page cache, never with O_DIRECT.
	NoDirect bool
}

// DefaultBufferSize is WriteOptions.BufferSize's default.
const DefaultBufferSize = 16 << 20

// ringBlocks is the number of blocks the I/O buffer is cut into: one
// being filled, one being hashed, one being written and one spare, so a
// stage that runs ahead does not wait for the next.
const ringBlocks = 4

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
	const unit = ringBlocks * directAlign
	return (n + unit - 1) / unit * unit
}

// ScratchBytes is the memory WriteFile allocates besides the pickle: the
// I/O buffer, its alignment slack and one piece for reading sources.
func ScratchBytes(o WriteOptions) int64 {
	return int64(o.bufferSize()+directAlign) + sourcePiece
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
	f    *os.File
	cur  []byte // the block being filled, nil until the first byte
	n    int    // its bytes
	size int64
	// free holds the blocks ready to fill; hash and write are the
	// pipeline's queues; done carries the writer's first error when it
	// has stopped.
	free, hash, write chan []byte
	done              chan error
	failed            atomic.Pointer[error] // the writer's first error, as soon as it has one
	err               error                 // that error, once Write has returned it
	sha               hash.Hash             // the hasher's; read after done
	// Owned by the writer goroutine; read after done.
	direct      bool
	directBytes int64
}

// createOut creates path, written through buf (aligned, a multiple of
// ringBlocks×directAlign), and starts the hasher and the writer.
func createOut(path string, buf []byte, direct bool) (*out, error) {
	f, direct, err := openForWrite(path, direct)
	if err != nil {
		return nil, err
	}
	w := &out{f: f, direct: direct, sha: sha256.New(),
		free: make(chan []byte, ringBlocks), hash: make(chan []byte, ringBlocks),
		write: make(chan []byte, ringBlocks), done: make(chan error, 1)}
	bs := len(buf) / ringBlocks
	for i := range ringBlocks {
		w.free <- buf[i*bs : (i+1)*bs : (i+1)*bs]
	}
	go w.hasher()
	go w.writer()
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
	total := len(p)
	for len(p) > 0 {
		if w.cur == nil {
			w.cur, w.n = <-w.free, 0
			if e := w.failed.Load(); e != nil {
				w.err = *e
				return total - len(p), w.err
			}
		}
		k := copy(w.cur[w.n:], p)
		w.n += k
		w.size += int64(k)
		p = p[k:]
		if w.n == len(w.cur) {
			w.hash <- w.cur
			w.cur = nil
		}
	}
	return total, nil
}

// hasher adds each block to the sha256 and passes it on to the writer.
func (w *out) hasher() {
	for b := range w.hash {
		w.sha.Write(b)
		w.write <- b
	}
	close(w.write)
}

// writer writes the blocks in order until the first error, and hands
// every block back to be filled.
func (w *out) writer() {
	var err error
	for b := range w.write {
		if err == nil {
			if err = w.writeBlock(b); err != nil {
				w.failed.Store(&err)
			}
		}
		w.free <- b[:cap(b)]
	}
	w.done <- err
}

// writeBlock writes a block: with O_DIRECT when the file has it and the
// block is whole multiples of directAlign, through the page cache
// otherwise, and when the filesystem refuses O_DIRECT's writes.
func (w *out) writeBlock(b []byte) error {
	if w.direct && len(b)%directAlign != 0 {
		// The tail: O_DIRECT takes only whole multiples of the alignment.
		if err := clearDirect(w.f); err != nil {
			return err
		}
		w.direct = false
	}
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

// close sends the tail down the pipeline, waits for the writer, fsyncs
// once and closes the file. It returns the writer's first error.
func (w *out) close() error {
	if w.cur != nil {
		if w.n > 0 && w.err == nil {
			w.hash <- w.cur[:w.n]
		} else {
			w.free <- w.cur
		}
		w.cur = nil
	}
	close(w.hash)
	err := <-w.done
	if err == nil {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}
