package checkpoint_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero"
)

// benchSizes are BenchmarkSaveLoad's models: 25M parameters always, and
// with DSZERO_BENCH_LARGE set (to 1 for both, or to one's name) gpt2's
// 124M and gpt2-medium's 355M (the counts, not the shapes): checkpoints of
// 1.5 GB and 4.3 GB that need about 4 GB and 10 GB of memory.
var benchSizes = []struct {
	name              string
	units, rows, cols int
	large             bool
}{
	{"25M", 6, 2048, 2048, false},
	{"gpt2", 12, 768, 13498, true},         // 124.4M, gpt2's 124.4M
	{"gpt2-medium", 24, 1024, 14449, true}, // 355.0M, gpt2-medium's 354.8M
}

// BenchmarkSaveLoad saves and loads a stage-3 fp32 AdamW checkpoint of 2
// in-process ranks (the fp32 master partitions and both moments: 12
// bytes a parameter) in $DSZERO_BENCH_DIR (default: a temporary
// directory), reporting each's throughput over the checkpoint's bytes
// (MB/s) and seconds per save or load. Compare it with dd on the same
// directory, run back to back (scripts/bench_save.sh):
//
//	dd if=/dev/zero of=DIR/dd bs=16M count=256 oflag=direct conv=fsync
//	dd if=DIR/dd of=/dev/null bs=16M iflag=direct
//	go test ./checkpoint -run '^$' -bench 'SaveLoad' -benchtime 3x
//
// Each load reads the files from the disk: they are dropped from the page
// cache first (on Linux; evictCache). A load also reports the process's
// resident set before it (rss-MB), its peak during the load
// (load-peak-rss-MB: VmHWM, reset before the load; Linux only) and their
// difference (load-extra-rss-MB, both ranks').
//
// DSZERO_BENCH_OFFLOAD=cpu offloads the optimizer state and parameters to
// the CPU; =nvme to swap files in the benchmark's directory
// (sub_group_size 1e7): a load then reads each file and writes its
// tensors to the swap files (O_DIRECT where the filesystem has it), the
// same bytes again.
func BenchmarkSaveLoad(b *testing.B) {
	base := os.Getenv("DSZERO_BENCH_DIR")
	offload := os.Getenv("DSZERO_BENCH_OFFLOAD")
	for _, sz := range benchSizes {
		if large := os.Getenv("DSZERO_BENCH_LARGE"); sz.large && large != "1" && large != sz.name {
			continue
		}
		l := bigLayout(sz.units, sz.rows, sz.cols)
		dir := b.TempDir()
		if base != "" {
			var err error
			if dir, err = os.MkdirTemp(base, "bench"); err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
		}
		js := stageJSON(3, "fp32", 0)
		switch offload {
		case "":
		case "cpu":
			js = strings.Replace(js, `"stage": 3`, `"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}`, 1)
		case "nvme":
			swap := filepath.Join(dir, "swap")
			if err := os.Mkdir(swap, 0o755); err != nil {
				b.Fatal(err)
			}
			q := strconv.Quote(swap)
			js = strings.Replace(js, `"stage": 3`, `"stage": 3, "sub_group_size": 10000000, "offload_optimizer": {"device": "nvme", "nvme_path": `+q+`}, "offload_param": {"device": "nvme", "nvme_path": `+q+`}`, 1)
		default:
			b.Fatalf("DSZERO_BENCH_OFFLOAD=%q: want cpu or nvme, or unset", offload)
		}
		plan, err := ztest.Plan(js, 2)
		if err != nil {
			b.Fatal(err)
		}
		ckBytes := func() int64 {
			var n int64
			ents, _ := os.ReadDir(filepath.Join(dir, "global_step0"))
			for _, e := range ents {
				if fi, err := e.Info(); err == nil {
					n += fi.Size()
				}
			}
			return n
		}
		b.Run("save/"+sz.name, func(b *testing.B) {
			var took atomic.Int64
			err := bigRanks(plan, &l, true, func(r int, eng *zero.Engine, c comm.Comm, _ *mem.Accountant) error {
				for range b.N {
					if err := c.Barrier(context.Background()).Wait(); err != nil {
						return err
					}
					t0 := time.Now()
					if err := checkpoint.Save(dir, "", eng, checkpoint.Options{Layout: &l, Comm: c}); err != nil {
						return err
					}
					if r == 0 {
						took.Add(int64(time.Since(t0)))
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			report(b, ckBytes(), time.Duration(took.Load()))
		})
		b.Run("load/"+sz.name, func(b *testing.B) {
			if _, err := os.Stat(filepath.Join(dir, "latest")); err != nil {
				b.Skip("no checkpoint saved (run save/ first)")
			}
			if !evictsCache {
				b.Log("the checkpoint's files may be in the page cache: the load's MB/s is not the disk's")
			}
			var took, cpu time.Duration
			var before, peak int64
			for range b.N {
				// From the disk, as a resumed run reads it: not from the
				// page cache the save (or the previous load) filled.
				if err := evictCache(dir); err != nil {
					b.Fatal(err)
				}
				var t atomic.Int64
				err := bigRanks(plan, &l, false, func(r int, eng *zero.Engine, c comm.Comm, _ *mem.Accountant) error {
					if err := c.Barrier(context.Background()).Wait(); err != nil {
						return err
					}
					if r == 0 {
						// The heap an earlier save or load freed goes back to
						// the system: the load's RSS is then its own.
						debug.FreeOSMemory()
						if err := resetPeakRSS(); err != nil {
							return err
						}
						before, _ = peakRSS()
					}
					if err := c.Barrier(context.Background()).Wait(); err != nil {
						return err
					}
					t0, c0 := time.Now(), cpuTime()
					if err := checkpoint.Load(dir, "", eng, checkpoint.Options{Layout: &l, Comm: c}); err != nil {
						return err
					}
					if err := c.Barrier(context.Background()).Wait(); err != nil {
						return err
					}
					if r == 0 {
						t.Store(int64(time.Since(t0)))
						cpu += cpuTime() - c0
						_, peak = peakRSS()
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				took += time.Duration(t.Load())
			}
			report(b, ckBytes(), took)
			// The process's CPU time during the loads (every rank's: the
			// sha256s, CRC-32s and copies): on a busy machine a load with
			// less CPU than it needs falls behind the disk.
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
			// The last load's.
			b.ReportMetric(float64(before)/1e6, "rss-MB")
			b.ReportMetric(float64(peak)/1e6, "load-peak-rss-MB")
			b.ReportMetric(float64(peak-before)/1e6, "load-extra-rss-MB")
		})
	}
}

func report(b *testing.B, bytes int64, took time.Duration) {
	per := took.Seconds() / float64(b.N)
	b.ReportMetric(float64(bytes)/per/1e6, "MB/s")
	b.ReportMetric(per, "s/op")
	b.ReportMetric(float64(bytes)/1e6, "MB")
}
