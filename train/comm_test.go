package train

import (
	"slices"
	"sync"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/lrsched"
)

// TestExternalComm: each rank calling Run with Config.Comm (here inproc's
// goroutines stand in for mpirun's processes) trains bit for bit like Run's
// own in-process ranks, rank 0 alone calls onStep, and a communicator of
// the wrong size is refused.
func TestExternalComm(t *testing.T) {
	g := loadGPT(t)
	const world, steps = 2, 3
	js := harnessJSON(2, 2, 2, 20000, true)
	want, wantW := runGPT(t, g, js, world, steps, lrsched.DeepSpeed0195)
	plan, err := dsconfig.Load(js, dsconfig.Options{WorldSize: world})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		recs   []Record
		finals [world][]float32
	)
	err = inproc.New(world, inproc.Options{}).Run(func(c comm.Comm) error {
		final, err := Run(Config{Plan: plan, Model: g.cfg, Init: g.init, Batches: Tokens(gptSamples{g.tokens, 2, 2, world}, 32), SeqLen: 32, Steps: steps,
			ReturnParams: true, Devices: []Device{{mem.NewAccountant(c.Rank()), g.gemm}}, Version: lrsched.DeepSpeed0195, Workers: 1, Comm: c},
			func(r Record) error {
				if c.Rank() != 0 {
					t.Errorf("onStep called on rank %d", c.Rank())
				}
				mu.Lock()
				recs = append(recs, r)
				mu.Unlock()
				return nil
			})
		finals[c.Rank()] = final
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != steps {
		t.Fatalf("%d records, want %d", len(recs), steps)
	}
	for i := range recs {
		if recs[i].Loss != want[i].Loss || recs[i].GradNorm != want[i].GradNorm {
			t.Errorf("step %d: loss %.9g grad norm %.9g, in-process ranks %.9g %.9g", i+1, recs[i].Loss, recs[i].GradNorm, want[i].Loss, want[i].GradNorm)
		}
	}
	for r, w := range finals {
		if !slices.Equal(w, wantW) {
			t.Errorf("rank %d: final weights differ from the in-process ranks'", r)
		}
	}

	err = inproc.New(3, inproc.Options{}).Run(func(c comm.Comm) error {
		_, err := Run(Config{Plan: plan, Model: g.cfg, Init: g.init, Batches: Tokens(gptSamples{g.tokens, 2, 2, world}, 32), SeqLen: 32, Steps: 1,
			Devices: []Device{{mem.NewAccountant(c.Rank()), g.gemm}}, Comm: c}, nil)
		return err
	})
	if err == nil {
		t.Error("a plan for 2 ranks ran on a communicator of 3")
	}
}
