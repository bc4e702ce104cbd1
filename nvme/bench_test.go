//go:build linux

package nvme

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dszero/dszero/mem"
)

// benchDir is a directory on a real disk for BenchmarkSwap:
// $DSZERO_NVME_BENCH_DIR, or the temp directory unless it is tmpfs (which
// measures memory, not a disk).
func benchDir(b *testing.B) string {
	parent := os.Getenv("DSZERO_NVME_BENCH_DIR")
	if parent == "" {
		parent = os.TempDir()
		var st syscall.Statfs_t
		if err := syscall.Statfs(parent, &st); err == nil && st.Type == 0x01021994 { // TMPFS_MAGIC
			b.Skipf("%s is tmpfs; set DSZERO_NVME_BENCH_DIR to a directory on the disk to measure", parent)
		}
	}
	dir, err := os.MkdirTemp(parent, "dszero_nvme_bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// BenchmarkSwap measures, in the same run and on the same disk, raw
// sequential O_DIRECT bandwidth of one file (raw: one thread, 64 MiB
// aligned writes and reads; deep: 8 threads of 1 MiB I/Os) and the
// swapper's bandwidth moving the same bytes as 64 MiB keys through buffers
// with DeepSpeed's default aio settings (block_size 1 MiB, queue_depth 8,
// intra_op_parallelism 1, 4 buffers), and reports swapper ÷ raw as
// write_ratio and read_ratio (and ÷ deep as *_ratio_deep). Run it with
//
//	DSZERO_NVME_BENCH_DIR=/local_nvme go test -run '^$' -bench Swap -benchtime 4x ./nvme
func BenchmarkSwap(b *testing.B) {
	for _, size := range []struct {
		name        string
		total, item int64
	}{
		{"256MiB", 256 << 20, 64 << 20},
		{"1GiB", 1 << 30, 64 << 20},
	} {
		b.Run(size.name, func(b *testing.B) {
			benchSwap(b, benchDir(b), size.total, size.item)
		})
	}
}

func benchSwap(b *testing.B, dir string, total, item int64) {
	keys := int(total / item)
	raw := alignedBytes(int(item))
	rand.Read(raw)
	rawPath := filepath.Join(dir, "raw.bin")

	o := DefaultOptions()
	o.Path, o.BufferBytes = dir, item
	fsys := NewOSFS()
	s, err := New(fsys, mem.NewAccountant(0), o)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var bufs []*Buffer // random contents, kept by the pool
	for range o.BufferCount {
		buf, err := s.Acquire(int(item))
		if err != nil {
			b.Fatal(err)
		}
		rand.Read(buf.Bytes())
		bufs = append(bufs, buf)
	}
	for _, buf := range bufs {
		s.Release(buf)
	}
	key := func(i int) string { return "bench" + string(rune('a'+i%26)) + string(rune('a'+i/26)) }

	swapWrite := func() time.Duration {
		start := time.Now()
		hs := make([]*Handle, 0, keys)
		for i := range keys {
			buf, err := s.Acquire(int(item))
			if err != nil {
				b.Fatal(err)
			}
			hs = append(hs, s.Write(key(i), buf))
		}
		if err := WaitAll(hs...); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	swapRead := func() time.Duration {
		start := time.Now()
		var window []*Handle
		done := func(h *Handle) {
			if err := h.Wait(); err != nil {
				b.Fatal(err)
			}
			s.Release(h.Buffer())
		}
		for i := range keys {
			if len(window) == o.BufferCount {
				done(window[0])
				window = window[1:]
			}
			h, err := s.Prefetch(key(i))
			if err != nil {
				b.Fatal(err)
			}
			window = append(window, h)
		}
		for _, h := range window {
			done(h)
		}
		return time.Since(start)
	}

	// Warm up: create every file once, so that both sides overwrite.
	rawIO(b, rawPath, raw, total, true, 1, int(item))
	swapWrite()
	if s.Stats().DirectIO != nil {
		b.Fatalf("the swapper fell back to buffered I/O: %v", s.Stats().DirectIO)
	}

	// raw: one stream of item-sized I/Os; deep: 8 streams of 1 MiB I/Os
	// (fio's bs=1M iodepth=8), in case one stream does not fill the disk.
	// The order alternates between iterations: a virtual disk's host cache
	// favours whatever was written last.
	var rw, dw, sw, rr, dr, sr time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			rw += rawIO(b, rawPath, raw, total, true, 1, int(item))
			dw += rawIO(b, rawPath, raw, total, true, 8, 1<<20)
			sw += swapWrite()
			rr += rawIO(b, rawPath, raw, total, false, 1, int(item))
			dr += rawIO(b, rawPath, raw, total, false, 8, 1<<20)
			sr += swapRead()
		} else {
			sw += swapWrite()
			dw += rawIO(b, rawPath, raw, total, true, 8, 1<<20)
			rw += rawIO(b, rawPath, raw, total, true, 1, int(item))
			sr += swapRead()
			dr += rawIO(b, rawPath, raw, total, false, 8, 1<<20)
			rr += rawIO(b, rawPath, raw, total, false, 1, int(item))
		}
	}
	if st := s.Stats(); st.BytesRead != int64(b.N)*total || st.BytesWritten != int64(b.N+1)*total {
		b.Fatalf("the swapper moved %d bytes in and %d out, want %d and %d", st.BytesRead, st.BytesWritten, int64(b.N)*total, int64(b.N+1)*total)
	}
	mbps := func(d time.Duration) float64 { return float64(b.N) * float64(total) / 1e6 / d.Seconds() }
	b.ReportMetric(mbps(rw), "raw_write_MB/s")
	b.ReportMetric(mbps(dw), "deep_write_MB/s")
	b.ReportMetric(mbps(sw), "swap_write_MB/s")
	b.ReportMetric(rw.Seconds()/sw.Seconds(), "write_ratio")
	b.ReportMetric(dw.Seconds()/sw.Seconds(), "write_ratio_deep")
	b.ReportMetric(mbps(rr), "raw_read_MB/s")
	b.ReportMetric(mbps(dr), "deep_read_MB/s")
	b.ReportMetric(mbps(sr), "swap_read_MB/s")
	b.ReportMetric(rr.Seconds()/sr.Seconds(), "read_ratio")
	b.ReportMetric(dr.Seconds()/sr.Seconds(), "read_ratio_deep")
}

// rawIO writes or reads total bytes of path with O_DIRECT: depth
// goroutines take the next chunk of the file in turn, each from its own
// part of buf (depth × chunk bytes, aligned). With depth 1 it is one
// stream of large sequential I/Os.
func rawIO(b *testing.B, path string, buf []byte, total int64, write bool, depth, chunk int) time.Duration {
	flag := os.O_RDONLY
	if write {
		flag = os.O_WRONLY | os.O_CREATE
	}
	f, err := os.OpenFile(path, flag|oDirect, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var next atomic.Int64
	errs := make(chan error, depth)
	start := time.Now()
	var wg sync.WaitGroup
	for g := range depth {
		p := buf[g*chunk : (g+1)*chunk]
		wg.Go(func() {
			for {
				off := next.Add(int64(chunk)) - int64(chunk)
				if off >= total {
					return
				}
				var err error
				if write {
					_, err = f.WriteAt(p, off)
				} else {
					_, err = f.ReadAt(p, off)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return elapsed
}

// BenchmarkChecksum measures what the blocks' CRC-32C costs: the same
// bytes written and read back as 64 MiB keys, with DeepSpeed's default
// aio settings, by one swapper that in turn sums and checks every block
// and does not (Options.noChecksum), alternating which goes first, on the
// same files. It reports each side's bandwidth and checked ÷ unchecked
// time as write_ratio and read_ratio (1.05: 5% slower). On "mem" (MemFS:
// a memory copy, no disk) the ratio is the worst case, the sums' cost
// against the cheapest I/O there is; "disk" is the temp directory or
// $DSZERO_NVME_BENCH_DIR with O_DIRECT, as BenchmarkSwap. Run it with
//
//	go test -run '^$' -bench Checksum -benchtime 8x ./nvme
func BenchmarkChecksum(b *testing.B) {
	const total, item = 256 << 20, 64 << 20
	for _, where := range []struct {
		name string
		fs   func(b *testing.B) (FS, string)
	}{
		{"mem", func(b *testing.B) (FS, string) {
			m := NewMemFS(0)
			if err := m.Mkdir("/nvme"); err != nil {
				b.Fatal(err)
			}
			return m, "/nvme"
		}},
		{"disk", func(b *testing.B) (FS, string) { return NewOSFS(), benchDir(b) }},
	} {
		b.Run(where.name, func(b *testing.B) {
			fsys, dir := where.fs(b)
			o := DefaultOptions()
			o.Path, o.BufferBytes = dir, item
			bs := newBenchSwapper(b, fsys, o, total/item)
			bs.write() // warm up: create every file once
			// side 0 sums, side 1 does not; a read checks what the
			// write before it summed.
			side := func(k int) (w, r time.Duration) {
				bs.s.mu.Lock()
				bs.s.opts.noChecksum = k == 1
				bs.s.mu.Unlock()
				return bs.write(), bs.read()
			}
			var w, r [2]time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				for j := range 2 {
					k := (i + j) % 2 // alternate which side goes first
					dw, dr := side(k)
					w[k] += dw
					r[k] += dr
				}
			}
			mbps := func(d time.Duration) float64 { return float64(b.N) * total / 1e6 / d.Seconds() }
			b.ReportMetric(mbps(w[0]), "sum_write_MB/s")
			b.ReportMetric(mbps(w[1]), "nosum_write_MB/s")
			b.ReportMetric(w[0].Seconds()/w[1].Seconds(), "write_ratio")
			b.ReportMetric(mbps(r[0]), "sum_read_MB/s")
			b.ReportMetric(mbps(r[1]), "nosum_read_MB/s")
			b.ReportMetric(r[0].Seconds()/r[1].Seconds(), "read_ratio")
		})
	}
}

// benchSwapper writes and reads keys keys of one buffer each.
type benchSwapper struct {
	b    *testing.B
	s    *Swapper
	keys int
}

func newBenchSwapper(b *testing.B, fsys FS, o Options, keys int) *benchSwapper {
	s, err := New(fsys, mem.NewAccountant(0), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	var bufs []*Buffer // random contents, kept by the pool
	for range o.BufferCount {
		buf, err := s.Acquire(s.BufferBytes())
		if err != nil {
			b.Fatal(err)
		}
		rand.Read(buf.Bytes())
		bufs = append(bufs, buf)
	}
	for _, buf := range bufs {
		s.Release(buf)
	}
	return &benchSwapper{b: b, s: s, keys: keys}
}

func (bs *benchSwapper) key(i int) string { return "bench" + string(rune('a'+i)) }

// write writes every key from pool buffers and waits.
func (bs *benchSwapper) write() time.Duration {
	start := time.Now()
	hs := make([]*Handle, 0, bs.keys)
	for i := range bs.keys {
		buf, err := bs.s.Acquire(bs.s.BufferBytes())
		if err != nil {
			bs.b.Fatal(err)
		}
		hs = append(hs, bs.s.Write(bs.key(i), buf))
	}
	if err := WaitAll(hs...); err != nil {
		bs.b.Fatal(err)
	}
	return time.Since(start)
}

// read reads every key ahead into the pool, as a stage's sub-group loop
// does, and waits.
func (bs *benchSwapper) read() time.Duration {
	start := time.Now()
	var window []*Handle
	done := func(h *Handle) {
		if err := h.Wait(); err != nil {
			bs.b.Fatal(err)
		}
		bs.s.Release(h.Buffer())
	}
	for i := range bs.keys {
		if len(window) == bs.s.BufferCount() {
			done(window[0])
			window = window[1:]
		}
		h, err := bs.s.Prefetch(bs.key(i))
		if err != nil {
			bs.b.Fatal(err)
		}
		window = append(window, h)
	}
	for _, h := range window {
		done(h)
	}
	return time.Since(start)
}
