//go:build mpi

package mpi

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dszero/dszero/comm"
)

// benchBytes is the payload: the all-reduce buffer, the reduce-scatter
// input and the all-gather output of each rank (NCCL-tests' "size").
const benchBytes = 64 << 20

// Each benchmark reports, besides ns/op for one collective:
//
//	GB/s         payload / time (NCCL-tests' algbw)
//	memcpy-GB/s  one copy() of the same 64 MiB in the same process, timed
//	             after the collectives
//	xmemcpy      GB/s ÷ memcpy-GB/s
//
// `go test -tags mpi -run '^$' -bench . ./comm/mpi` runs them under
// `mpirun -np 2` by itself and prints rank 0's lines. Under mpirun every
// rank must run the same b.N, so the benchmark time must be a count
// (-test.benchtime 10x, the default here).
func BenchmarkAllReduce(b *testing.B) { benchCollective(b, "AllReduce", comm.KindAllReduce) }
func BenchmarkReduceScatter(b *testing.B) {
	benchCollective(b, "ReduceScatter", comm.KindReduceScatter)
}
func BenchmarkAllGather(b *testing.B) { benchCollective(b, "AllGather", comm.KindAllGather) }

func benchCollective(b *testing.B, name string, kind comm.Kind) {
	benchtime := "10x"
	if f := flag.Lookup("test.benchtime"); f != nil && strings.HasSuffix(f.Value.String(), "x") {
		benchtime = f.Value.String()
	}
	if world == nil {
		launchBench(b, name, benchtime)
		return
	}
	if !strings.HasSuffix(flag.Lookup("test.benchtime").Value.String(), "x") {
		b.Fatal("under mpirun -test.benchtime must be a count (e.g. 10x): every rank must run the same b.N")
	}
	ctx := context.Background()
	// A private communicator without Verify: the benchmark measures the
	// collective alone.
	c, err := world.Comm().Split(ctx, 0, world.Comm().Rank())
	if err != nil {
		b.Fatal(err)
	}
	c.(*communicator).verify = false
	n := c.Size()
	whole := benchBytes / 4
	part := whole / n
	big, small := filledWith(whole, 1), filledWith(part, 1) // touched: no page faults in the loop
	// One untimed call to size the scratch buffers.
	if err := c.AllReduce(ctx, comm.F32(big), comm.Sum).Wait(); err != nil {
		b.Fatal(err)
	}
	if err := c.Barrier(ctx).Wait(); err != nil {
		b.Fatal(err)
	}
	b.Run(fmt.Sprintf("ranks=%d/64MiB", n), func(b *testing.B) {
		b.SetBytes(benchBytes)
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			var h comm.Handle
			switch kind {
			case comm.KindAllReduce:
				h = c.AllReduce(ctx, comm.F32(big), comm.Sum)
			case comm.KindReduceScatter:
				h = c.ReduceScatter(ctx, comm.F32(small), comm.F32(big), comm.Sum)
			case comm.KindAllGather:
				h = c.AllGather(ctx, comm.F32(big), comm.F32(small))
			}
			if err := h.Wait(); err != nil {
				b.Fatal(err)
			}
		}
		elapsed := time.Since(start)
		b.StopTimer()
		dst := filledWith(whole, 0)
		cstart := time.Now()
		for range b.N {
			copy(dst, big)
		}
		copyGBs := float64(benchBytes) * float64(b.N) / time.Since(cstart).Seconds() / 1e9
		gbs := float64(benchBytes) * float64(b.N) / elapsed.Seconds() / 1e9
		b.ReportMetric(gbs, "GB/s")
		b.ReportMetric(copyGBs, "memcpy-GB/s")
		b.ReportMetric(gbs/copyGBs, "xmemcpy")
		// Keep the ranks together between b.Run's rounds.
		if err := c.Barrier(ctx).Wait(); err != nil {
			b.Fatal(err)
		}
	})
}

// launchBench runs one benchmark under mpirun -np 2 and prints rank 0's
// result lines; the launching process's own benchmark is then skipped.
func launchBench(b *testing.B, name, benchtime string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := mpirun(ctx, b, 2, "-test.run", "^$", "-test.bench", "^Benchmark"+name+"$", "-test.benchtime", benchtime)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("%v: %v\n%s", cmd, err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "Benchmark") {
			fmt.Println(sc.Text())
		}
	}
	b.Skip("ran under mpirun -np 2: the lines above are rank 0's")
}

func filledWith(n int, v float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = v
	}
	return x
}
