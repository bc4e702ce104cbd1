package nvme

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/dszero/dszero/mem"
)

// testOptions are small options that still cut requests into several
// blocks and run several workers.
func testOptions(path string) Options {
	o := DefaultOptions()
	o.Path = path
	o.Name = "optimizer"
	o.Source = "zero_optimization.offload_optimizer"
	o.BufferCount = 4
	o.BufferBytes = 64 << 10
	o.BlockSize = 2 * Align
	o.QueueDepth = 4
	o.IntraOpParallelism = 2
	return o
}

// newSwapper makes a swapper closed at the end of the test.
func newSwapper(t *testing.T, fsys FS, o Options) (*Swapper, *mem.Accountant) {
	t.Helper()
	acct := mem.NewAccountant(o.Rank)
	s, err := New(fsys, acct, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Error(err)
		}
	})
	return s, acct
}

// randomF32 returns n floats of random bits, NaN payloads included: the
// swap must be bit-exact.
func randomF32(r *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(r.Uint32())
	}
	return out
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %#x, want %#x", what, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
		}
	}
}

// Sizes in float32s: empty, under one alignment unit, exactly one, one
// more, several blocks with a ragged end, a full buffer.
var roundTripSizes = []int{0, 1, 3, Align / 4, Align/4 + 1, 5*Align/4 + 7, 16 << 10}

func TestRoundTrip(t *testing.T) {
	for name, mk := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			fsys, root := mk(t)
			s, _ := newSwapper(t, fsys, testOptions(root))
			r := rand.New(rand.NewPCG(1, 2))
			want := map[string][]float32{}
			var hs []*Handle
			for _, n := range roundTripSizes {
				key := fmt.Sprintf("sg%d.exp_avg", n)
				want[key] = randomF32(r, n)
				hs = append(hs, s.SwapOut(key, want[key]))
			}
			if err := WaitAll(hs...); err != nil {
				t.Fatal(err)
			}
			for key, w := range want {
				got := make([]float32, len(w))
				if err := s.SwapIn(key, got).Wait(); err != nil {
					t.Fatal(err)
				}
				sameBits(t, "SwapIn "+key, got, w)

				h, err := s.Prefetch(key)
				if err != nil {
					t.Fatal(err)
				}
				if err := h.Wait(); err != nil {
					t.Fatal(err)
				}
				sameBits(t, "Prefetch "+key, h.Buffer().F32(), w)
				s.Release(h.Buffer())
			}
			st := s.Stats()
			if st.Keys != len(roundTripSizes) || st.Writes != int64(len(roundTripSizes)) || st.Reads != 2*int64(len(roundTripSizes)) {
				t.Errorf("stats = %+v", st)
			}
			if name == "mem" && st.DirectIO == nil {
				t.Error("MemFS must say it has no O_DIRECT")
			}
		})
	}
}

// TestRoundTripLarge swaps keys of several default-sized (1 MiB) blocks
// through the OS filesystem.
func TestRoundTripLarge(t *testing.T) {
	o := DefaultOptions()
	o.Path, o.BufferBytes, o.BufferCount = t.TempDir(), 4<<20, 2
	s, _ := newSwapper(t, NewOSFS(), o)
	r := rand.New(rand.NewPCG(3, 4))
	want := [][]float32{randomF32(r, 1<<20), randomF32(r, 7<<17+5), randomF32(r, 1<<18-1)}
	var hs []*Handle
	for i, w := range want {
		hs = append(hs, s.SwapOut(fmt.Sprint("big", i), w))
	}
	if err := WaitAll(hs...); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		got := make([]float32, len(w))
		if err := s.SwapIn(fmt.Sprint("big", i), got).Wait(); err != nil {
			t.Fatal(err)
		}
		sameBits(t, fmt.Sprint("big", i), got, w)
	}
}

// TestBufferViews writes 16-bit values through a buffer, zero-copy, and
// reads them back.
func TestBufferViews(t *testing.T) {
	fsys, root := filesystems(t)["mem"](t)
	s, _ := newSwapper(t, fsys, testOptions(root))
	b, err := s.Acquire(2 * 1001)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.U16()) != 1001 || len(b.F32()) != 500 || len(b.Bytes()) != 2002 || b.Cap() != 64<<10 {
		t.Fatalf("views: %d u16, %d f32, %d bytes, cap %d", len(b.U16()), len(b.F32()), len(b.Bytes()), b.Cap())
	}
	for i := range b.U16() {
		b.U16()[i] = uint16(i*31 + 7)
	}
	if err := s.Write("param7", b).Wait(); err != nil {
		t.Fatal(err)
	}
	h, err := s.Prefetch("param7")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	for i, v := range h.Buffer().U16() {
		if v != uint16(i*31+7) {
			t.Fatalf("element %d = %d", i, v)
		}
	}
	if h.Buffer().Len() != 2002 {
		t.Errorf("Len = %d", h.Buffer().Len())
	}
	s.Release(h.Buffer())
}

// TestOrderPerKey issues writes and reads of one key without waiting in
// between, with slow writes: each read sees the write issued before it.
func TestOrderPerKey(t *testing.T) {
	ffs := NewFaultFS(NewMemFS(0), Fault{Ops: OpWrite, Delay: 2e6})
	ffs.inner.Mkdir("/nvme")
	s, _ := newSwapper(t, ffs, testOptions("/nvme"))
	var hs []*Handle
	var gots [][]float32
	for i := range 5 {
		src := make([]float32, 3000)
		for j := range src {
			src[j] = float32(i*10000 + j)
		}
		hs = append(hs, s.SwapOut("k", src))
		got := make([]float32, len(src))
		gots = append(gots, got)
		hs = append(hs, s.SwapIn("k", got))
	}
	if err := WaitAll(hs...); err != nil {
		t.Fatal(err)
	}
	for i, got := range gots {
		if got[0] != float32(i*10000) || got[2999] != float32(i*10000+2999) {
			t.Fatalf("read %d saw %v…%v", i, got[0], got[2999])
		}
	}
}

// TestConcurrent runs swaps from many goroutines over fewer buffers.
func TestConcurrent(t *testing.T) {
	for name, mk := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			fsys, root := mk(t)
			o := testOptions(root)
			o.BufferCount = 3
			s, acct := newSwapper(t, fsys, o)
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 9))
					for it := range 10 {
						key := fmt.Sprintf("g%d.k%d", g, it%3)
						src := randomF32(r, 1+r.IntN(16<<10))
						if err := s.SwapOut(key, src).Wait(); err != nil {
							errs <- err
							return
						}
						got := make([]float32, len(src))
						if err := s.SwapIn(key, got).Wait(); err != nil {
							errs <- err
							return
						}
						for i := range got {
							if math.Float32bits(got[i]) != math.Float32bits(src[i]) {
								errs <- fmt.Errorf("%s: element %d differs", key, i)
								return
							}
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if got := acct.Snapshot().LiveBytes(mem.NVMe, mem.OptimState); got != s.Stats().FileBytes || got == 0 {
				t.Errorf("NVMe bytes accounted %d, files hold %d", got, s.Stats().FileBytes)
			}
		})
	}
}

// TestDoubleBuffering runs the optimizer-step pattern of the package
// documentation: read sub-group i+1 while i steps, write i while i+1
// steps, with every buffer reused.
func TestDoubleBuffering(t *testing.T) {
	fsys, root := filesystems(t)["mem"](t)
	o := testOptions(root)
	o.BufferCount = 2
	s, _ := newSwapper(t, fsys, o)
	const groups, n = 6, 5000
	key := func(i int) string { return fmt.Sprintf("subgroup%d", i) }
	for i := range groups {
		src := make([]float32, n)
		for j := range src {
			src[j] = float32(i)
		}
		if err := s.SwapOut(key(i), src).Wait(); err != nil {
			t.Fatal(err)
		}
	}
	for step := range 3 {
		next, err := s.Prefetch(key(0))
		if err != nil {
			t.Fatal(err)
		}
		var writes []*Handle
		for i := range groups {
			cur := next
			if i+1 < groups {
				// Two buffers: one is being stepped, the other read
				// ahead; the write of i-1 must hand its buffer back first.
				if next, err = s.Prefetch(key(i + 1)); err != nil {
					t.Fatal(err)
				}
			}
			if err := cur.Wait(); err != nil {
				t.Fatal(err)
			}
			x := cur.Buffer().F32()
			if x[0] != float32(i+step) || x[n-1] != float32(i+step) {
				t.Fatalf("step %d: sub-group %d holds %v", step, i, x[0])
			}
			for j := range x {
				x[j]++
			}
			writes = append(writes, s.Write(key(i), cur.Buffer()))
		}
		if err := WaitAll(writes...); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNoBuffer(t *testing.T) {
	fsys, root := filesystems(t)["mem"](t)
	o := testOptions(root)
	o.BufferCount = 2
	s, _ := newSwapper(t, fsys, o)
	a, err := s.Acquire(10)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(10); !errors.Is(err, ErrNoBuffer) || !strings.Contains(err.Error(), "buffer_count") {
		t.Errorf("Acquire with every buffer held = %v, want ErrNoBuffer naming buffer_count", err)
	}
	if _, err := s.Prefetch("x"); !errors.Is(err, ErrNoBuffer) {
		t.Errorf("Prefetch with every buffer held = %v", err)
	}
	if _, err := s.Acquire(s.BufferBytes() + 1); err == nil || !strings.Contains(err.Error(), "65537 bytes do not fit") {
		t.Errorf("Acquire beyond a buffer = %v", err)
	}
	// A write gives its buffer back to the pool: Acquire waits for it.
	h := s.Write("k", a)
	c, err := s.Acquire(10)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	s.Release(b)
	s.Release(c)
}

func TestBufferMisuse(t *testing.T) {
	fsys, root := filesystems(t)["mem"](t)
	s, _ := newSwapper(t, fsys, testOptions(root))
	panics := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", what)
			}
		}()
		f()
	}
	b, _ := s.Acquire(8)
	s.Release(b)
	panics("Release twice", func() { s.Release(b) })
	panics("Write of a released buffer", func() { s.Write("k", b) })
	panics("a key with a slash", func() { s.SwapOut("a/b", nil) })
	panics("a key starting with a dot", func() { s.SwapOut(".preflight", nil) })

	if err := s.SwapIn("never", make([]float32, 1)).Wait(); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("SwapIn of an unknown key = %v", err)
	}
	if err := s.SwapOut("k", make([]float32, 4)).Wait(); err != nil {
		t.Fatal(err)
	}
	if err := s.SwapIn("k", make([]float32, 5)).Wait(); err == nil || !strings.Contains(err.Error(), "16 bytes") {
		t.Errorf("SwapIn into the wrong length = %v", err)
	}
}

func TestAccountingAndClose(t *testing.T) {
	for name, mk := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			fsys, root := mk(t)
			o := testOptions(root)
			o.Rank = 3
			acct := mem.NewAccountant(3)
			s, err := New(fsys, acct, o)
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(root, "dszero_rank3", "optimizer"); s.Dir() != want {
				t.Errorf("Dir = %s, want %s", s.Dir(), want)
			}
			snap := acct.Snapshot()
			if got := snap.LiveBytes(mem.PinnedHost, mem.OptimState); got != 4*64<<10 {
				t.Errorf("pinned buffers accounted %d", got)
			}
			for i, n := range []int{1, 1024, 1500} {
				if err := s.SwapOut(fmt.Sprint("k", i), make([]float32, n)).Wait(); err != nil {
					t.Fatal(err)
				}
			}
			// Padded to 4096: 4096 + 4096 + 8192; rewriting smaller keeps the file.
			if err := s.SwapOut("k2", make([]float32, 1)).Wait(); err != nil {
				t.Fatal(err)
			}
			if got := acct.Snapshot().LiveBytes(mem.NVMe, mem.OptimState); got != 16384 {
				t.Errorf("NVMe accounted %d, want 16384", got)
			}
			names, _ := fsys.ReadDir(s.Dir())
			if len(names) != 3 {
				t.Errorf("swap folder holds %v", names)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := fsys.ReadDir(filepath.Join(root, "dszero_rank3")); err == nil {
				t.Error("Close left the rank folder")
			}
			snap = acct.Snapshot()
			for _, tier := range mem.Tiers() {
				if snap.LiveTotal[tier] != 0 {
					t.Errorf("tier %s still has %d bytes after Close", tier, snap.LiveTotal[tier])
				}
			}
			if err := s.Close(); !errors.Is(err, ErrClosed) {
				t.Errorf("second Close = %v", err)
			}
			if err := s.SwapOut("k", nil).Wait(); !errors.Is(err, ErrClosed) {
				t.Errorf("SwapOut after Close = %v", err)
			}
			if _, err := s.Acquire(1); !errors.Is(err, ErrClosed) {
				t.Errorf("Acquire after Close = %v", err)
			}
		})
	}
}

// TestStaleFiles: a new swapper removes the swap files of an earlier run,
// and only those.
func TestStaleFiles(t *testing.T) {
	for name, mk := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			fsys, root := mk(t)
			dir := filepath.Join(root, "dszero_rank0", "optimizer")
			for _, d := range []string{filepath.Dir(dir), dir} {
				if err := fsys.Mkdir(d); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range []string{"sg0.swp", ".preflight.swp", "notes.txt"} {
				fh, err := fsys.OpenFile(filepath.Join(dir, f), true)
				if err != nil {
					t.Fatal(err)
				}
				fh.WriteAt(alignedBytes(Align), 0)
				fh.Close()
			}
			s, _ := newSwapper(t, fsys, testOptions(root))
			names, _ := fsys.ReadDir(dir)
			if len(names) != 1 || names[0] != "notes.txt" {
				t.Errorf("after New the folder holds %v, want [notes.txt]", names)
			}
			if got := s.Stats().StaleRemoved; got != 2 {
				t.Errorf("StaleRemoved = %d", got)
			}
			// A stale file is never read: the key is unknown until written.
			if err := s.SwapIn("sg0", make([]float32, 1024)).Wait(); !errors.Is(err, ErrUnknownKey) {
				t.Errorf("SwapIn of a stale key = %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if names, _ := fsys.ReadDir(dir); len(names) != 1 {
				t.Errorf("Close must leave files it does not own: %v", names)
			}
		})
	}
}
