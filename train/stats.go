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
	cats       []mem.Category // mem.Categories(), listed once (it allocates)
	mine       []float32      // this rank's record: gas losses, then peaks
	all        []float32      // every rank's, in rank order
}

func newStats(gas, world int) *stats {
	s := &stats{gas: gas, world: world, cats: mem.Categories()}
	n := gas + 2*s.numPeaks()
	s.mine, s.all = make([]float32, n), make([]float32, n*world)
	return s
}

// numPeaks is the number of peaks in a record: one per category, then the
// total.
func (s *stats) numPeaks() int { return len(s.cats) + 1 }

// gather fills in this rank's peaks (its losses are in already) and
// all-gathers every rank's record.
func (s *stats) gather(ctx context.Context, c comm.Comm, a *mem.Accountant) error {
	snap := a.Snapshot()
	peaks := s.mine[s.gas:]
	for i, cat := range s.cats {
		putBytes(peaks[2*i:], snap.PeakBytes(mem.Device, cat))
	}
	putBytes(peaks[2*len(s.cats):], snap.PeakTotal[mem.Device])
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
		for i := 0; i < s.numPeaks(); i++ {
			v := getBytes(peaks[2*i:])
			name := "total"
			if i < len(s.cats) {
				name = s.cats[i].String()
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

// micro is every rank's micro-step losses of the step, [rank][micro].
func (s *stats) micro() [][]float32 {
	n := len(s.mine)
	out := make([][]float32, s.world)
	for r := range out {
		out[r] = append([]float32(nil), s.all[r*n:r*n+s.gas]...)
	}
	return out
}
