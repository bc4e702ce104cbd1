// Package strategytest is the conformance suite every ZeRO strategy
// passes: the contract of zero.Strategy checked by behaviour, on the
// harness's TinyMLP, the same way for stage 0, 1, 2, 3 and their
// variants (hybrid sharding, offload, sub-groups, buckets). A new
// strategy runs Run on its plans; a stage that breaks the contract fails
// it with the rule it broke.
//
// The rules:
//
//  1. Buffers: ModelBuffers are Layout().Numel long, and the working
//     parameters start as the initial weights.
//  2. Training: the same data gives the same losses and final weights as
//     stage 0 on one rank, within 2e-6 relative (the stages reduce in
//     other pieces, which changes the last bits only).
//  3. Gathering: GatherMaster gives every rank the same full fp32 master.
//  4. State: a state exported after some steps and imported into a fresh
//     engine continues bit for bit: the next step's loss and the final
//     master equal those of the engine that never stopped.
//  5. Memory: Close hands every byte the strategy accounted back.
package strategytest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/fdiff"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/zero"
	"github.com/dszero/dszero/zero/lrsched"
)

// Variant is one strategy configuration under test.
type Variant struct {
	Name string
	// JSON is the ds_config; World its number of ranks.
	JSON  string
	World int
	// Tweak adjusts each rank's engine options (nil: none).
	Tweak func(*zero.Options)
}

const steps = 4

// Run checks v against every rule, with d the MLP's data and initial
// weights (ztest.LoadMLP).
func Run(t *testing.T, d ztest.MLPData, v Variant) {
	t.Helper()
	plan, err := dsconfig.Load(v.JSON, dsconfig.Options{WorldSize: v.World})
	if err != nil {
		t.Fatalf("%s: %v", v.Name, err)
	}
	ref := reference(t, d, plan)

	// Rules 1, 2, 3 and 5 in one run; rule 4 by a second run that stops
	// after two steps and resumes from the exported state.
	got := run(t, d, plan, v, -1)
	for s := range ref.losses {
		if rel := fdiff.MaxRel([]float64{got.losses[s]}, []float64{ref.losses[s]}); rel > 2e-6 {
			t.Errorf("%s: rule 2: step %d loss %.9g, stage 0 on one rank %.9g (%.2g relative)", v.Name, s+1, got.losses[s], ref.losses[s], rel)
		}
	}
	if _, rel := fdiff.Weights(got.final, ref.final); rel > 2e-6 {
		t.Errorf("%s: rule 2: final weights %.2g relative from stage 0's", v.Name, rel)
	}
	resumed := run(t, d, plan, v, 2)
	for s := 2; s < steps; s++ {
		if resumed.losses[s] != got.losses[s] {
			t.Errorf("%s: rule 4: step %d after resuming from exported state: loss %.9g, without stopping %.9g", v.Name, s+1, resumed.losses[s], got.losses[s])
		}
	}
	if !bitsEqual(resumed.final, got.final) {
		t.Errorf("%s: rule 4: the final master after resuming from exported state differs from the run that never stopped", v.Name)
	}
}

type result struct {
	losses []float64
	final  []float32
}

// reference is stage 0 on one rank with the same global batches.
func reference(t *testing.T, d ztest.MLPData, plan dsconfig.Plan) result {
	t.Helper()
	js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": %d, "gradient_clipping": %v,
  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3, "weight_decay": 0.01}}}`,
		plan.Batch.TrainMicroBatchSizePerGPU, plan.Batch.GradientAccumulationSteps*int64(plan.WorldSize), plan.GradientClipping)
	p0, err := dsconfig.Load(js, dsconfig.Options{WorldSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	return run(t, d, p0, Variant{Name: "stage 0 reference", World: 1}, -1)
}

// run trains steps steps; with stopAt ≥ 0 it exports the state after
// stopAt steps, builds fresh engines, imports it and goes on.
func run(t *testing.T, d ztest.MLPData, plan dsconfig.Plan, v Variant, stopAt int) result {
	t.Helper()
	world := plan.WorldSize
	B, gas := int(plan.Batch.TrainMicroBatchSizePerGPU), int(plan.Batch.GradientAccumulationSteps)
	G := B * gas * world
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		t.Fatal(err)
	}
	res := result{losses: make([]float64, steps), final: make([]float32, d.Layout.Numel)}
	var mu sync.Mutex
	micro := make([][]float32, steps) // [step][micro·world + rank]
	for s := range micro {
		micro[s] = make([]float32, gas*world)
	}
	err = inproc.New(world, inproc.Options{}).Run(func(c comm.Comm) error {
		r := c.Rank()
		build := func() (*zero.Engine, *mem.Accountant, error) {
			acct := mem.NewAccountant(r)
			o := zero.Options{Acct: acct, Layout: &d.Layout, Init: d.Init, Workers: 1, Version: lrsched.DeepSpeed0195,
				Comm: c, Ctx: context.Background(), SwapFS: nvme.NewMemFS(0)}
			if v.Tweak != nil {
				v.Tweak(&o)
			}
			eng, err := zero.NewEngine(plan, o)
			return eng, acct, err
		}
		eng, acct, err := build()
		if err != nil {
			return err
		}
		// Rule 1.
		params, grads := eng.ModelBuffers()
		if len(params) != d.Layout.Numel || len(grads) != d.Layout.Numel {
			return fmt.Errorf("%s: rule 1: ModelBuffers are %d and %d long, the layout %d", v.Name, len(params), len(grads), d.Layout.Numel)
		}
		for s := 0; s < steps; s++ {
			if s == stopAt {
				st, err := eng.ExportState()
				if err != nil {
					return fmt.Errorf("%s: rule 4: ExportState: %w", v.Name, err)
				}
				st = cloneState(st)
				eng.Close()
				if eng, acct, err = build(); err != nil {
					return err
				}
				if err := eng.ImportState(st); err != nil {
					return fmt.Errorf("%s: rule 4: ImportState: %w", v.Name, err)
				}
			}
			m, err := mlpModel(d, eng, acct, gemm)
			if err != nil {
				return err
			}
			x, y := make([]float32, B*16), make([]float32, B*8)
			if eng.OverwriteGrads() {
				m.OverwriteGrads()
			}
			for mi := 0; mi < gas; mi++ {
				mb := mi*world + r
				for b := 0; b < B; b++ {
					n := (s*G + mb*B + b) % ztest.MLPSamples
					copy(x[b*16:(b+1)*16], d.X[n*16:])
					copy(y[b*8:(b+1)*8], d.Y[n*8:])
				}
				loss, err := m.Forward(model.Batch{X: x, B: B, Y: y})
				if err != nil {
					return err
				}
				mu.Lock()
				micro[s][mb] = loss
				mu.Unlock()
				if err := m.Backward(eng.GradScale()); err != nil {
					return err
				}
			}
			if _, err := eng.Step(); err != nil {
				return err
			}
			m.Close()
		}
		// Rule 3.
		full := make([]float32, d.Layout.Numel)
		if err := eng.GatherMaster(full); err != nil {
			return err
		}
		all := make([]float32, world*len(full))
		if err := c.AllGather(context.Background(), comm.F32(all), comm.F32(full)).Wait(); err != nil {
			return err
		}
		for q := 1; q < world; q++ {
			if !bitsEqual(all[q*len(full):(q+1)*len(full)], all[:len(full)]) {
				return fmt.Errorf("%s: rule 3: rank %d's GatherMaster differs from rank 0's", v.Name, q)
			}
		}
		if r == 0 {
			copy(res.final, full)
		}
		// Rule 5.
		eng.Close()
		if live := liveBytes(acct); live != 0 {
			return fmt.Errorf("%s: rule 5: %d bytes still accounted after Close", v.Name, live)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for s := range micro {
		sum := 0.0
		for _, l := range micro[s] {
			sum += float64(l)
		}
		res.losses[s] = sum / float64(len(micro[s]))
	}
	return res
}

func mlpModel(d ztest.MLPData, eng *zero.Engine, acct *mem.Accountant, gemm model.Gemmer) (model.Model, error) {
	m, err := d.Cfg.Build(model.BuildOptions{Gemm: gemm, Acct: acct, Hooks: eng.Strategy(), DType: eng.DType()})
	if err != nil {
		return nil, err
	}
	if err := m.Bind(eng.ModelBuffers()); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// liveBytes is what acct holds now, every tier and category.
func liveBytes(acct *mem.Accountant) int64 {
	s := acct.Snapshot()
	var n int64
	for _, t := range []mem.Tier{mem.Device, mem.PinnedHost} {
		n += s.LiveTotal[t]
	}
	return n
}

// cloneState copies the float slices of an exported state, so that an
// engine closed after exporting cannot change what is imported.
func cloneState(st zero.State) zero.State {
	ss := st.Strategy
	ss.Groups = slices.Clone(ss.Groups)
	for i := range ss.Groups {
		g := &ss.Groups[i]
		g.Master = slices.Clone(g.Master)
		state := make(map[string][]float32, len(g.Optim.State))
		for k, v := range g.Optim.State {
			state[k] = slices.Clone(v)
		}
		g.Optim.State = state
	}
	st.Strategy = ss
	return st
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}
