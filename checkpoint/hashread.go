package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
)

// hashingReader reads a checkpoint file for ptfile (an io.ReaderAt) and
// computes its sha256 from the reads themselves, so that a load reads
// each byte from the disk once: the reads that continue where the hash
// is (hashed) extend it, the bytes they skip — zip headers, the pickle
// of a storage read later — read and hashed first when there are at most
// hashGap of them. Reads elsewhere (zip's central directory at the end,
// a tensor read out of the file's order) are served as they are; sum
// reads and hashes whatever the reads left. A loader that reads a file's
// tensors in their order in the file (readOptim) reads the file once.
// Not safe for concurrent use, as ptfile's File is not.
type hashingReader struct {
	f       *os.File
	size    int64
	h       hash.Hash
	hashed  int64  // bytes [0, hashed) are in h
	extra   int64  // bytes read only to hash them (gaps, and sum's)
	scratch []byte // for those reads
}

// hashGap is the most bytes a read may skip for them to be hashed first.
const hashGap = 1 << 20

func newHashingReader(f *os.File, size int64) *hashingReader {
	return &hashingReader{f: f, size: size, h: sha256.New()}
}

func (r *hashingReader) ReadAt(p []byte, off int64) (int, error) {
	if off > r.hashed && off-r.hashed <= hashGap {
		if err := r.hashTo(off); err != nil {
			return 0, err
		}
	}
	n, err := r.f.ReadAt(p, off)
	if off <= r.hashed && off+int64(n) > r.hashed {
		r.h.Write(p[r.hashed-off : n])
		r.hashed = off + int64(n)
	}
	return n, err
}

// hashTo reads and hashes bytes [hashed, end) of the file.
func (r *hashingReader) hashTo(end int64) error {
	if r.scratch == nil && r.hashed < end {
		r.scratch = make([]byte, min(digestPiece, r.size))
	}
	for r.hashed < end {
		b := r.scratch[:min(int64(len(r.scratch)), end-r.hashed)]
		n, err := r.f.ReadAt(b, r.hashed)
		r.h.Write(b[:n])
		r.hashed += int64(n)
		r.extra += int64(n)
		if err == io.EOF && r.hashed < end {
			return fmt.Errorf("checkpoint: %s ends at byte %d, its size was %d: the file changed while it was read", r.f.Name(), r.hashed, r.size)
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("checkpoint: reading %s: %w", r.f.Name(), err)
		}
	}
	return nil
}

// sum hashes what the reads left and returns the file's sha256, hex.
func (r *hashingReader) sum() (string, error) {
	if err := r.hashTo(r.size); err != nil {
		return "", err
	}
	var one [1]byte
	if n, _ := r.f.ReadAt(one[:], r.size); n > 0 {
		return "", fmt.Errorf("checkpoint: %s grew past its %d bytes while it was read", r.f.Name(), r.size)
	}
	return hex.EncodeToString(r.h.Sum(nil)), nil
}
