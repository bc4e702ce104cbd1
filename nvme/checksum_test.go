package nvme

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
)

// overwrite changes bytes [off, off+n) of the file at path behind the
// swapper's back: what a bad disk or another process does.
func overwrite(t *testing.T, fsys FS, path string, off int64, n int) {
	t.Helper()
	f, err := fsys.OpenFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Whole aligned blocks, so that OSFS's O_DIRECT takes them: read,
	// change, write back.
	lo, hi := off/Align*Align, roundUp(off+int64(n))
	buf := alignedBytes(int(hi - lo))
	if got, err := f.ReadAt(buf, lo); got != len(buf) {
		t.Fatalf("reading %s to corrupt it: %d bytes, %v", path, got, err)
	}
	for i := off - lo; i < off-lo+int64(n); i++ {
		buf[i] ^= 0xa5
	}
	if _, err := f.WriteAt(buf, lo); err != nil {
		t.Fatal(err)
	}
}

// TestChecksum: bytes of a swap file changed between its write and a read
// fail the read, by every path that reads (SwapIn, Read, Prefetch), with
// an *IOError naming the key, the file, the block's byte range, and the
// fix; the caller's slice is left alone; a rewrite makes the key good
// again. The blocks are 8192 bytes; the key holds 20000 bytes, 20480
// padded: blocks at 0, 8192 and 16384 (4096 long).
func TestChecksum(t *testing.T) {
	const n = 5000
	for _, tc := range []struct {
		name     string
		off      int64 // first byte changed
		len      int
		blockOff int64 // the block reported
		blockLen int64
	}{
		{"first byte", 0, 1, 0, 8192},
		{"middle block", 9000, 3, 8192, 8192},
		{"last ragged block", 19999, 1, 16384, 4096},
		{"padding", 20100, 1, 16384, 4096},
		{"two blocks", 8000, 500, 0, 8192}, // the lowest offset is reported
	} {
		for fsName, mk := range filesystems(t) {
			t.Run(tc.name+"/"+fsName, func(t *testing.T) {
				fsys, root := mk(t)
				s, _ := newSwapper(t, fsys, testOptions(root))
				src := randomF32(rand.New(rand.NewPCG(5, 6)), n)
				if err := s.SwapOut("sg1.master", src).Wait(); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(s.Dir(), "sg1.master.swp")
				overwrite(t, fsys, path, tc.off, tc.len)

				dst := make([]float32, n)
				errs := map[string]error{"SwapIn": s.SwapIn("sg1.master", dst).Wait()}
				h, err := s.Prefetch("sg1.master")
				if err != nil {
					t.Fatal(err)
				}
				errs["Prefetch"] = h.Wait()
				s.Release(h.Buffer())
				for via, err := range errs {
					var ioe *IOError
					if !errors.As(err, &ioe) || !errors.Is(err, ErrChecksum) {
						t.Fatalf("%s of a corrupted file = %v, want an *IOError wrapping ErrChecksum", via, err)
					}
					if ioe.Op != "read" || ioe.Key != "sg1.master" || ioe.Path != path || ioe.Offset != tc.blockOff || ioe.Len != tc.blockLen {
						t.Errorf("%s: %s of %q in %s at offset %d (%d bytes), want read at %d (%d bytes)", via, ioe.Op, ioe.Key, ioe.Path, ioe.Offset, ioe.Len, tc.blockOff, tc.blockLen)
					}
					msg := err.Error()
					for _, want := range []string{path, `"sg1.master"`, "offset", "checksum mismatch", "corruption", "checkpoints saved before this error are intact"} {
						if !strings.Contains(msg, want) {
							t.Errorf("%s: message %q lacks %q", via, msg, want)
						}
					}
				}
				for i := range dst {
					if dst[i] != 0 {
						t.Fatalf("SwapIn copied into the destination from a file that failed its checksum (element %d)", i)
					}
				}
				// A rewrite replaces the file and its sums.
				if err := s.SwapOut("sg1.master", src).Wait(); err != nil {
					t.Fatal(err)
				}
				if err := s.SwapIn("sg1.master", dst).Wait(); err != nil {
					t.Fatalf("read after the rewrite: %v", err)
				}
				sameBits(t, "after the rewrite", dst, src)
			})
		}
	}
}

// TestChecksumSilentRead: a read the disk corrupts in flight (a bit
// flipped, no error reported) fails; the file itself is good, so the
// next read succeeds.
func TestChecksumSilentRead(t *testing.T) {
	s, _ := faultSwapper(t, Fault{Ops: OpRead, Path: "sg0", From: 8193, Corrupt: true, Times: 1})
	src := randomF32(rand.New(rand.NewPCG(7, 8)), 5000)
	if err := s.SwapOut("sg0.exp_avg_sq", src).Wait(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(src))
	err := s.SwapIn("sg0.exp_avg_sq", got).Wait()
	var ioe *IOError
	if !errors.Is(err, ErrChecksum) || !errors.As(err, &ioe) || ioe.Offset != 8192 {
		t.Fatalf("a read flipped in flight = %v, want a checksum mismatch at offset 8192", err)
	}
	if err := s.SwapIn("sg0.exp_avg_sq", got).Wait(); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "the next read", got, src)
}

// TestChecksumAfterOrder: a read issued after a write of another length
// checks against that write (the sums go with the latest write started),
// and reads on other keys are unaffected by one key's corruption.
func TestChecksumAfterOrder(t *testing.T) {
	fsys, root := filesystems(t)["mem"](t)
	s, _ := newSwapper(t, fsys, testOptions(root))
	r := rand.New(rand.NewPCG(9, 10))
	a, b := randomF32(r, 9000), randomF32(r, 100)
	h1 := s.SwapOut("k", a)
	h2 := s.SwapOut("k", b) // shorter: one block
	got := make([]float32, len(b))
	h3 := s.SwapIn("k", got)
	h4 := s.SwapOut("other", a)
	if err := WaitAll(h1, h2, h3, h4); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "k", got, b)
	overwrite(t, fsys, filepath.Join(s.Dir(), "k.swp"), 10, 1)
	if err := s.SwapIn("k", got).Wait(); !errors.Is(err, ErrChecksum) {
		t.Errorf("read of the corrupted key = %v", err)
	}
	other := make([]float32, len(a))
	if err := s.SwapIn("other", other).Wait(); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "other", other, a)
}

// TestDeletedSwapFile: a swap file deleted, or its folder, under a
// running swapper fails the next read with an *IOError naming the file
// and saying what happened.
func TestDeletedSwapFile(t *testing.T) {
	for name, mk := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			fsys, root := mk(t)
			s, _ := newSwapper(t, fsys, testOptions(root))
			if err := s.SwapOut("sg0.master", make([]float32, 3000)).Wait(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(s.Dir(), "sg0.master.swp")
			if err := fsys.Remove(path); err != nil {
				t.Fatal(err)
			}
			err := s.SwapIn("sg0.master", make([]float32, 3000)).Wait()
			var ioe *IOError
			if !errors.As(err, &ioe) || !errors.Is(err, fs.ErrNotExist) || ioe.Path != path {
				t.Fatalf("read of a deleted swap file = %v", err)
			}
			for _, want := range []string{path, "deleted while dszero ran", "resume from the latest one"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q lacks %q", err, want)
				}
			}
		})
	}
}

// TestNoChecksumBaseline: with the sums off (BenchmarkChecksum's
// baseline) a corrupted file reads back corrupted and unreported — what
// the sums are for.
func TestNoChecksumBaseline(t *testing.T) {
	fsys, root := filesystems(t)["mem"](t)
	o := testOptions(root)
	o.noChecksum = true
	s, _ := newSwapper(t, fsys, o)
	if err := s.SwapOut("k", make([]float32, 100)).Wait(); err != nil {
		t.Fatal(err)
	}
	overwrite(t, fsys, filepath.Join(s.Dir(), "k.swp"), 0, 4)
	got := make([]float32, 100)
	if err := s.SwapIn("k", got).Wait(); err != nil || got[0] == 0 {
		t.Errorf("unchecked read of a corrupted file: %v, first value %v", err, got[0])
	}
}
