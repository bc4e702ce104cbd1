package stage3_test

import (
	"testing"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/train"
	"github.com/dszero/dszero/zero"
)

// gradProbe records rank 0's live gradient-partition bytes at the end of
// each forward (BeforeBackward of the last unit) and the end of each
// backward (AfterBackward of unit 0).
type gradProbe struct {
	model.UnitHooks
	acct           *mem.Accountant
	last           int
	fwdEnd, bwdEnd []int64
}

// live is the gradient-partition bytes accounted now, in every tier.
func (p *gradProbe) live() int64 {
	s := p.acct.Snapshot()
	return s.LiveBytes(mem.Device, mem.Grads) + s.LiveBytes(mem.PinnedHost, mem.Grads)
}

func (p *gradProbe) BeforeBackward(u int) error {
	if u == p.last {
		p.fwdEnd = append(p.fwdEnd, p.live())
	}
	return p.UnitHooks.BeforeBackward(u)
}

func (p *gradProbe) AfterBackward(u int) error {
	err := p.UnitHooks.AfterBackward(u)
	if u == 0 {
		p.bwdEnd = append(p.bwdEnd, p.live())
	}
	return err
}

// TestGradPartitionsReleased: the gradient partitions are resident only
// between a step's first reductions and its optimizer step. At the end of
// every forward of a step's first micro-step a rank accounts none of
// them, at the end of its backward all of them (acquired as each unit's
// reduction is issued), and they are held across the
// micro-steps of a step — on the device, in pinned host memory with
// offload_optimizer cpu, and split between them with partial offload.
func TestGradPartitionsReleased(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		t.Fatal(err)
	}
	const world = 2
	var part int64
	for _, sp := range d.Layout.Specs {
		part += int64((sp.Numel + world - 1) / world)
	}
	for _, tc := range []struct {
		name    string
		offload string
		tiers   []mem.Tier // where the partitions peak
	}{
		{"device", "", []mem.Tier{mem.Device}},
		{"offload cpu", `, "offload_optimizer": {"device": "cpu"}`, []mem.Tier{mem.PinnedHost}},
		{"partial offload", `, "sub_group_size": 500, "offload_optimizer": {"device": "cpu", "ratio": 0.5}`, []mem.Tier{mem.PinnedHost, mem.Device}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := `{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0` + tc.offload + `}}`
			plan, err := ztest.Plan(js, world)
			if err != nil {
				t.Fatal(err)
			}
			var probe *gradProbe
			devs := []train.Device{{Acct: mem.NewAccountant(0), Gemm: gemm}, {Acct: mem.NewAccountant(1), Gemm: gemm}}
			cfg := train.Config{Plan: plan, Model: d.Cfg, Init: d.Init, Batches: mlpSamples{d}, Steps: 3, Devices: devs, Workers: 1,
				Hooks: func(rank int, eng *zero.Engine) model.UnitHooks {
					if rank != 0 {
						return eng.Strategy()
					}
					probe = &gradProbe{UnitHooks: eng.Strategy(), acct: devs[0].Acct, last: len(d.Layout.Units) - 1}
					return probe
				}}
			if _, err := train.Run(cfg, func(train.Record) error { return nil }); err != nil {
				t.Fatal(err)
			}
			// Three steps of two micro-steps: forward ends with none, then
			// all of them (the first micro-step's reductions landed).
			wantFwd := []int64{0, 4 * part, 0, 4 * part, 0, 4 * part}
			if len(probe.fwdEnd) != len(wantFwd) {
				t.Fatalf("%d forwards, want %d", len(probe.fwdEnd), len(wantFwd))
			}
			for i, w := range wantFwd {
				if probe.fwdEnd[i] != w {
					t.Errorf("micro-step %d: %d bytes of gradient partitions live at the end of forward, want %d", i, probe.fwdEnd[i], w)
				}
			}
			var peak int64
			for _, tier := range tc.tiers {
				p := devs[0].Acct.Snapshot().PeakBytes(tier, mem.Grads)
				if p == 0 {
					t.Errorf("no gradient partitions in %v", tier)
				}
				peak += p
			}
			if peak != 4*part {
				t.Errorf("peak gradient partitions %d bytes over %v, want the whole partition, %d", peak, tc.tiers, 4*part)
			}
			for i, b := range probe.bwdEnd {
				if b != 4*part {
					t.Errorf("micro-step %d: %d bytes of gradient partitions live at the end of backward, want all %d", i, b, 4*part)
				}
			}
		})
	}
}
