package inproc

import (
	"context"
	"fmt"
	"testing"

	"github.com/dszero/dszero/comm"
)

// BenchmarkCompressedAllReduce times one compressed all-reduce of an fp32
// buffer (Compressor.AllReduce: the signs, scales and error feedback, an
// all_to_all and an all_gather) against the fp32 AllReduce(Avg) of the
// same buffer, on the same ranks, in the same run: sub-benchmarks
// kind=compressed and kind=fp32, 4M elements (16 MiB) a rank. In-process
// ranks share memory, so this measures the compression arithmetic's cost,
// not a network's saving.
func BenchmarkCompressedAllReduce(b *testing.B) {
	const N = 4 << 20
	for _, n := range []int{2, 4} {
		for _, kind := range []string{"fp32", "compressed"} {
			b.Run(fmt.Sprintf("ranks=%d/kind=%s/16MiB", n, kind), func(b *testing.B) {
				bufs := make([][]float32, n)
				for r := range bufs {
					bufs[r] = filledWith(N, float32(r+1))
				}
				w := New(n, Options{})
				ctx := context.Background()
				b.SetBytes(4 * N)
				b.ResetTimer()
				err := w.Run(func(c comm.Comm) error {
					x := bufs[c.Rank()]
					ef := comm.NewErrorFeedback(N, n, c.Rank())
					z := comm.NewCompressor(c)
					for range b.N {
						var err error
						if kind == "compressed" {
							err = z.AllReduce(ctx, x, &ef)
						} else {
							err = c.AllReduce(ctx, comm.F32(x), comm.Avg).Wait()
						}
						if err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
