package ptfile

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkWriteFile writes a 256 MiB float32 storage (a view, as a
// checkpoint's partitions are) with WriteFile in $DSZERO_BENCH_DIR
// (default: a temporary directory), with and without O_DIRECT and with
// I/O buffers of 4, 16 (the default) and 64 MiB; MB/s is over the file's bytes.
func BenchmarkWriteFile(b *testing.B) {
	dir := os.Getenv("DSZERO_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	v := make([]float32, 64<<20)
	for i := range v {
		v[i] = float32(i)
	}
	root := DictOf("w", ViewFloat32([]int64{int64(len(v))}, v))
	for _, c := range []struct {
		name string
		o    WriteOptions
	}{
		{"direct/16MiB", WriteOptions{}},
		{"direct/4MiB", WriteOptions{BufferSize: 4 << 20}},
		{"direct/64MiB", WriteOptions{BufferSize: 64 << 20}},
		{"cached/16MiB", WriteOptions{NoDirect: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := filepath.Join(dir, "bench.pt")
			defer os.Remove(p)
			w := NewWriter(c.o)
			var n int64
			t0 := time.Now()
			for range b.N {
				res, err := w.WriteFile(p, root)
				if err != nil {
					b.Fatal(err)
				}
				n = res.Bytes
			}
			b.ReportMetric(float64(n)*float64(b.N)/time.Since(t0).Seconds()/1e6, "MB/s")
		})
	}
}
