package stage2_test

import (
	"fmt"
	"testing"

	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
)

// TestMemoryFormula trains the MLP with Adam in fp32 on 1 to 4 ranks and
// checks each rank's peak bytes by category against ZeRO-2's model-state
// formula, Ψ parameters over N ranks:
//
//	working parameters 4Ψ, gradient partition 4Ψ/N, fp32 master 4Ψ/N, Adam 8Ψ/N
//
// plus padding only (see stage1's test), and the live gradients
// (mem.Comm) against what the buckets allow. The MLP's units in backward
// order are fc3 (520 elements), fc2 (4160) and fc1 (1088). With buckets
// of 1000 elements, fc3 waits in its bucket while fc2 is computed; when
// fc2 completes, fc3's bucket is reduced and fc2, a full bucket alone, at
// once: the peak is 520 + 4160 elements. With overlap_comm fc2's
// reduction is still in flight while fc1 is computed: 4160 + 1088. With
// buckets larger than the model nothing is reduced before the end of
// backward: all Ψ are live.
func TestMemoryFormula(t *testing.T) {
	d := ztest.MustLoadMLP(t, "../model/mlp/testdata")
	psi := int64(d.Layout.Numel)
	for _, tc := range []struct {
		bucket  int
		overlap bool
		live    int64 // peak live gradient elements
	}{
		{1000, false, 520 + 4160},
		{1000, true, 4160 + 1088},
		{500000000, false, psi},
	} {
		for world := 1; world <= 4; world++ {
			run, pad, err := ztest.StageRun(d, 2, tc.bucket, tc.overlap, world)
			if err != nil {
				t.Fatal(err)
			}
			n := int64(world)
			want := map[mem.Category]int64{
				mem.Params16:     4 * (psi + pad),
				mem.Grads:        4 * (psi + pad) / n,
				mem.MasterParams: 4 * (psi + pad) / n,
				mem.OptimState:   8 * (psi + pad) / n,
				mem.Comm:         4 * tc.live,
			}
			for r, a := range run.Accts {
				got := ztest.CheckPeaks(t, fmt.Sprintf("bucket %d overlap %v world %d rank %d", tc.bucket, tc.overlap, world, r), a, want)
				if live := a.Snapshot().LiveBytes(mem.Device, mem.Comm); live != 0 {
					t.Errorf("world %d rank %d: %d bytes of gradients still live after the run", world, r, live)
				}
				states := got[mem.Params16] + got[mem.Grads] + got[mem.MasterParams] + got[mem.OptimState]
				formula := 4*float64(psi) + 16*float64(psi)/float64(n)
				if r == 0 && tc.bucket == 1000 && !tc.overlap {
					t.Logf("world %d: model states %d bytes, formula 4Ψ+16Ψ/N = %.0f, ratio %.5f (padding %d elements); live gradients %d bytes",
						world, states, formula, float64(states)/formula, pad, got[mem.Comm])
				}
			}
		}
	}
}
