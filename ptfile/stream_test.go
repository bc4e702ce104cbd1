package ptfile

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// rawEntry is an archive entry written as given: its payload (deflated
// when method is zip.Deflate), and the CRC-32 and uncompressed size the
// directory records, true or not.
type rawEntry struct {
	name   string
	method uint16
	data   []byte // the payload as stored
	crc    uint32
	size   uint64 // the recorded uncompressed size
}

func zipRaw(t testing.TB, es ...rawEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range es {
		w, err := zw.CreateRaw(&zip.FileHeader{Name: e.name, Method: e.method, CRC32: e.crc,
			CompressedSize64: uint64(len(e.data)), UncompressedSize64: e.size})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(e.data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func deflate(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestSpeed)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rezip rewrites an archive's entries as they are, each stored or
// deflated as deflated says, with true CRCs and sizes.
func rezip(t testing.TB, b []byte, deflated func(name string) bool) []byte {
	var es []rawEntry
	for _, e := range entriesOf(t, b) {
		r := rawEntry{name: e.name, method: zip.Store, data: e.data, crc: crc32.ChecksumIEEE(e.data), size: uint64(len(e.data))}
		if deflated(e.name) {
			r.method, r.data = zip.Deflate, deflate(t, e.data)
		}
		es = append(es, r)
	}
	return zipRaw(t, es...)
}

// bigFile is a checkpoint with one 64 KiB float32 storage "w" of
// pseudo-random bytes (archive "ckpt"), and those bytes.
func bigFile(t testing.TB) ([]byte, []byte) {
	data := make([]byte, 64<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	root := NewDict()
	root.Set("w", NewTensor(Float32, []int64{int64(len(data) / 4)}, data))
	var buf bytes.Buffer
	if err := Encode(&buf, "ckpt", root); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), data
}

// readPieces reads storage s of b in pieces of n bytes, in the order
// given by perm (piece indices), returning what it read.
func readPieces(f *File, s *Storage, n int, perm []int) ([]byte, error) {
	out := make([]byte, s.NBytes())
	for _, i := range perm {
		lo := int64(i * n)
		hi := min(lo+int64(n), s.NBytes())
		if err := f.ReadAt(s, out[lo:hi], lo); err != nil {
			return out, err
		}
	}
	return out, nil
}

func inOrder(k int) []int {
	p := make([]int, k)
	for i := range p {
		p[i] = i
	}
	return p
}

// TestStreamedReadsCheckCRC: ReadAt, which dszero export streams storages
// with, checks every byte against its entry's CRC-32, as Load does —
// whether the pieces come in order, skip ahead, go back, or stop short of
// the end (Verify reads the rest) — for stored and deflated entries, and
// names the corrupted entry.
func TestStreamedReadsCheckCRC(t *testing.T) {
	good, data := bigFile(t)
	const piece = 5000 // not a divisor of the entry: the last piece is short
	k := (len(data) + piece - 1) / piece
	shuffled := rand.New(rand.NewPCG(3, 4)).Perm(k)
	skipping := []int{0, 3, 4, 9, 1, 2, k - 1}
	for _, deflated := range []bool{false, true} {
		file := good
		if deflated {
			file = rezip(t, good, func(name string) bool { return name == "ckpt/data/0" })
		}
		open := func(t *testing.T, b []byte) (*File, *Storage) {
			t.Helper()
			f, err := NewReader(bytes.NewReader(b), int64(len(b)), "stream.pt", Options{})
			if err != nil {
				t.Fatal(err)
			}
			return f, f.Storages[0]
		}
		// One bit of the storage's payload flipped: in place for a stored
		// entry; before deflating, with the original CRC, for a deflated one.
		bad := bytes.Clone(good)
		zr, _ := zip.NewReader(bytes.NewReader(bad), int64(len(bad)))
		for _, zf := range zr.File {
			if zf.Name == "ckpt/data/0" {
				off, _ := zf.DataOffset()
				bad[off+int64(len(data))-7] ^= 1 // near the end: only a read reaching it can tell
			}
		}
		if deflated {
			var es []rawEntry
			for _, e := range entriesOf(t, bad) {
				r := rawEntry{name: e.name, method: zip.Store, data: e.data, crc: crc32.ChecksumIEEE(e.data), size: uint64(len(e.data))}
				if e.name == "ckpt/data/0" {
					r.method, r.data, r.crc = zip.Deflate, deflate(t, e.data), crc32.ChecksumIEEE(data)
				}
				es = append(es, r)
			}
			bad = zipRaw(t, es...)
		}
		name := map[bool]string{false: "stored", true: "deflated"}[deflated]
		for _, order := range []struct {
			name string
			perm []int
		}{{"in order", inOrder(k)}, {"shuffled", shuffled}, {"skipping", skipping}} {
			t.Run(name+"/"+order.name, func(t *testing.T) {
				f, s := open(t, file)
				got, err := readPieces(f, s, piece, order.perm)
				if err == nil {
					err = f.Verify(s)
				}
				if err != nil {
					t.Fatal(err)
				}
				for _, i := range order.perm {
					lo, hi := i*piece, min((i+1)*piece, len(data))
					if !bytes.Equal(got[lo:hi], data[lo:hi]) {
						t.Fatalf("piece %d differs", i)
					}
				}
				f, s = open(t, bad)
				_, err = readPieces(f, s, piece, order.perm)
				if err == nil {
					err = f.Verify(s)
				}
				var pe *Error
				if !errors.Is(err, ErrChecksum) || !errors.As(err, &pe) || pe.Entry != "ckpt/data/0" || pe.File != "stream.pt" {
					t.Fatalf("corrupted entry: got %v, want a checksum error naming stream.pt and ckpt/data/0", err)
				}
			})
		}
	}
	// The read that reaches the end of the entry is the one that fails:
	// nothing that reads a whole storage returns without the check.
	bad := bytes.Clone(good)
	off, _ := func() (int64, error) {
		zr, _ := zip.NewReader(bytes.NewReader(bad), int64(len(bad)))
		for _, zf := range zr.File {
			if zf.Name == "ckpt/data/0" {
				return zf.DataOffset()
			}
		}
		return 0, nil
	}()
	bad[off] ^= 0x80
	f, err := NewReader(bytes.NewReader(bad), int64(len(bad)), "stream.pt", Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := f.Storages[0]
	if err := f.ReadAt(s, make([]byte, 100), 0); err != nil {
		t.Fatalf("a first piece cannot know yet: %v", err)
	}
	if err := f.ReadAt(s, make([]byte, 100), s.NBytes()-100); !errors.Is(err, ErrChecksum) {
		t.Fatalf("the read reaching the end: %v, want a checksum error", err)
	}
}

// TestZeroCRCIsChecked: a directory recording CRC-32 0 for data whose CRC
// is not 0 (archive/zip skips the check then) is a checksum error for
// every way of reading.
func TestZeroCRCIsChecked(t *testing.T) {
	var es []rawEntry
	for _, e := range entriesOf(t, small(t)) {
		r := rawEntry{name: e.name, method: zip.Store, data: e.data, crc: crc32.ChecksumIEEE(e.data), size: uint64(len(e.data))}
		if e.name == "ckpt/data/0" {
			r.crc = 0
		}
		es = append(es, r)
	}
	b := zipRaw(t, es...)
	_, err := ReadBytes(b, "zero.pt", Options{})
	if !errors.Is(err, ErrChecksum) {
		t.Errorf("Load: %v, want a checksum error", err)
	}
	f, err := NewReader(bytes.NewReader(b), int64(len(b)), "zero.pt", Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Storages {
		if s.Key == "0" {
			if err := f.ReadAt(s, make([]byte, s.NBytes()), 0); !errors.Is(err, ErrChecksum) {
				t.Errorf("ReadAt: %v, want a checksum error", err)
			}
		}
	}
}
