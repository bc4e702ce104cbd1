package stage1_test

import (
	"fmt"
	"testing"

	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
)

// TestMemoryFormula trains the MLP with Adam in fp32 on 1 to 4 ranks and
// checks each rank's peak bytes by category against ZeRO-1's model-state
// formula, Ψ parameters over N ranks:
//
//	working parameters 4Ψ, gradients 4Ψ, fp32 master 4Ψ/N, Adam 8Ψ/N
//
// plus padding only: Ψ is padded to a multiple of 2N, Padded = Ψ + pad,
// and each term holds Padded (or Padded/N) elements; the reduction and the
// all-gather work in place, so nothing is held for communication.
func TestMemoryFormula(t *testing.T) {
	d := ztest.MustLoadMLP(t, "../model/mlp/testdata")
	psi := int64(d.Layout.Numel)
	for world := 1; world <= 4; world++ {
		run, pad, err := ztest.StageRun(d, 1, 1000, false, world)
		if err != nil {
			t.Fatal(err)
		}
		n := int64(world)
		if pad < 0 || pad >= 2*n {
			t.Fatalf("world %d: padding %d, want [0, %d)", world, pad, 2*n)
		}
		want := map[mem.Category]int64{
			mem.Params16:     4 * (psi + pad),
			mem.Grads:        4 * (psi + pad),
			mem.MasterParams: 4 * (psi + pad) / n,
			mem.OptimState:   8 * (psi + pad) / n,
			mem.Comm:         0,
		}
		for r, a := range run.Accts {
			got := ztest.CheckPeaks(t, fmt.Sprintf("world %d rank %d", world, r), a, want)
			states := got[mem.Params16] + got[mem.Grads] + got[mem.MasterParams] + got[mem.OptimState]
			formula := 8*float64(psi) + 12*float64(psi)/float64(n)
			if r == 0 {
				t.Logf("world %d: model states %d bytes, formula 8Ψ+12Ψ/N = %.0f, ratio %.5f (padding %d elements)",
					world, states, formula, float64(states)/formula, pad)
			}
		}
	}
}
