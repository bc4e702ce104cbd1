package train

import (
	"context"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/mem"
)

// stats is what the ranks tell each other after a step: each rank's
// micro-step losses and its device peaks, all-gathered in one float32
// collective. A byte count travels as two floats, the high and the low 24
// bits, both exact in float32 (counts below 2^48).
type stats struct {
	gas, world int
	mine       []float32 // this rank's record: gas losses, then peaks
	all        []float32 // every rank's, in rank order
}

// The peaks in a record: one per category, then the total.
var numPeaks = len(mem.Categories()) + 1

func newStats(gas, world int) *stats {
	n := gas + 2*numPeaks
	return &stats{gas: gas, world: world, mine: make([]float32, n), all: make([]float32, n*world)}
}

// gather fills in this rank's peaks (its losses are in already) and
// all-gathers every rank's record.
func (s *stats) gather(ctx context.Context, c comm.Comm, a *mem.Accountant) error {
	snap := a.Snapshot()
	peaks := s.mine[s.gas:]
	for i, cat := range mem.Categories() {
		putBytes(peaks[2*i:], snap.PeakBytes(mem.Device, cat))
	}
	putBytes(peaks[2*(numPeaks-1):], snap.PeakTotal[mem.Device])
	return c.AllGather(ctx, comm.F32(s.all), comm.F32(s.mine)).Wait()
}

// loss is the mean of the micro-step losses over the world, summed in
// micro-batch order (mb = micro·world + rank), so that a world of one with
// world×GAS micro-steps adds the same numbers in the same order.
func (s *stats) loss() float64 {
	n := len(s.mine)
	sum := 0.0
	for micro := 0; micro < s.gas; micro++ {
		for r := 0; r < s.world; r++ {
			sum += float64(s.all[r*n+micro])
		}
	}
	return sum / float64(s.gas*s.world)
}

// peaks returns rank 0's peaks and the largest over the ranks, by category
// name and "total"; categories never used are left out.
func (s *stats) peaks() (rank0, most map[string]int64) {
	n := len(s.mine)
	rank0, most = map[string]int64{}, map[string]int64{}
	for r := 0; r < s.world; r++ {
		peaks := s.all[r*n+s.gas : (r+1)*n]
		for i := 0; i < numPeaks; i++ {
			v := getBytes(peaks[2*i:])
			name := "total"
			if i < numPeaks-1 {
				name = mem.Categories()[i].String()
			}
			if v == 0 && name != "total" {
				continue
			}
			if r == 0 {
				rank0[name] = v
			}
			most[name] = max(most[name], v)
		}
	}
	return rank0, most
}

func putBytes(dst []float32, b int64) {
	dst[0], dst[1] = float32(b>>24), float32(b&(1<<24-1))
}

func getBytes(src []float32) int64 { return int64(src[0])<<24 | int64(src[1]) }
