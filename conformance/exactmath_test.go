package conformance

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/train"
)

// TestRunsExactMath: conformance trains with the exact kernels, never the
// fast path that dszero train uses by default. The GPT case z0_fp32, run
// for three steps as conformance runs it, ends with the final weights of
// the same training through train.Run with FastMath false bit for bit,
// and not with those of FastMath true (which the option does change).
func TestRunsExactMath(t *testing.T) {
	c := Case{Dir: filepath.Join(ref, "gpt", "z0_fp32")}
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	d, err := readModel(&c)
	if err != nil {
		t.Fatal(err)
	}
	a, err := buildArch(&c, d)
	if err != nil {
		t.Fatal(err)
	}
	init, err := a.loadData(&c, d)
	if err != nil {
		t.Fatal(err)
	}
	world := c.WorldSize()
	plan, err := dsconfig.Load(string(c.DSConfig()), dsconfig.Options{WorldSize: world})
	if err != nil {
		t.Fatal(err)
	}
	const steps = 3
	v := versions["0.14.5"]
	got, err := a.train(plan, steps, v, init, ckpt{})
	if err != nil {
		t.Fatal(err)
	}
	direct := func(fast bool) []float32 {
		gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
		if err != nil {
			t.Fatal(err)
		}
		devs := make([]train.Device, world)
		for r := range devs {
			devs[r] = train.Device{Acct: mem.NewAccountant(r), Gemm: gemm}
		}
		final, err := train.Run(train.Config{Plan: plan, Model: a.gpt, Init: init, Batches: caseBatches{a: a, gas: int(plan.Batch.GradientAccumulationSteps), world: world},
			SeqLen: a.seqLen, Steps: steps, ReturnParams: true, Devices: devs, Workers: 1, Version: v, Timeout: time.Minute, FastMath: fast}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return final
	}
	same := func(x, y []float32) bool {
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				return false
			}
		}
		return len(x) == len(y)
	}
	if exact := direct(false); !same(got.Final, exact) {
		t.Error("conformance's final weights differ from the exact path's")
	}
	if fast := direct(true); same(got.Final, fast) {
		t.Error("conformance's final weights equal the fast path's bit for bit: the test cannot tell the two apart")
	}
}
