package estimate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/google/go-cmp/cmp"
)

// TestActivationsMeasuredSP: a forward and backward of the tiny GPT on 2
// and 4 sequence-parallel ranks (B 2, T 32), with and without
// checkpointing, peaks at exactly ActivationsSP's bytes of
// mem.Activations per tier on every rank; and those are about 1/sp of one
// rank's (the exchange buffers and the all-token q|k|v copy are what is
// beyond it).
func TestActivationsMeasuredSP(t *testing.T) {
	cfg, _ := gpt.Preset("tiny")
	const B, T = 2, 32
	for _, sp := range []int{2, 4} {
		for _, ck := range []bool{false, true} {
			t.Run(fmt.Sprintf("sp%d/checkpoint=%v", sp, ck), func(t *testing.T) {
				want := sum(ActivationsSP(cfg, B, T, sp, ck, false))
				err := inproc.New(sp, inproc.Options{}).Run(func(c comm.Comm) error {
					gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
					if err != nil {
						return err
					}
					acct := mem.NewAccountant(c.Rank())
					m, err := gpt.New(cfg, gpt.Options{Gemm: gemm, Acct: acct, Checkpoint: ck, Workers: 1, SeqParallel: c})
					if err != nil {
						return err
					}
					defer m.Close()
					params, grads := make([]float32, m.NumParams()), make([]float32, m.NumParams())
					m.Layout().InitRange(7, params, 0)
					if err := m.Bind(params, grads); err != nil {
						return err
					}
					n := B * T / sp
					tokens, targets := make([]int32, n), make([]int32, n)
					for i := range tokens {
						tokens[i], targets[i] = int32(i*7%cfg.Vocab), int32(i*11%cfg.Vocab)
					}
					if _, err := m.Forward(model.Batch{Tokens: tokens, B: B, Targets: targets}); err != nil {
						return err
					}
					if err := m.Backward(1); err != nil {
						return err
					}
					s := acct.Snapshot()
					got := Tiers{Device: s.PeakBytes(mem.Device, mem.Activations), PinnedHost: s.PeakBytes(mem.PinnedHost, mem.Activations)}
					if d := cmp.Diff(want, got); d != "" {
						t.Errorf("rank %d: (-estimate +measured)\n%s", c.Rank(), d)
					}
					// The all_gather scratch where the backend has no native
					// all_to_all (sp × the send buffer), else nothing.
					if got, want := s.PeakBytes(mem.Device, mem.Comm), int64(4*comm.AllToAllScratch(c, 3*B*(T/sp)*cfg.Dim)); got != want {
						t.Errorf("rank %d: comm peak %d bytes, want the all_gather scratch's %d", c.Rank(), got, want)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				one := sum(Activations(cfg, B, T, ck, false))
				if r := float64(want.Device) / float64(one.Device); r > 1.5/float64(sp) {
					t.Errorf("sp %d: %d bytes per rank, %d with whole sequences: %.2f×, want about 1/%d", sp, want.Device, one.Device, r, sp)
				}
			})
		}
	}
}

// TestEstimateSeqParallel: with sequence_parallel_size the estimate's
// states partition over every rank and a note gives the activation
// saving; heads not divisible by it are an error naming the key.
func TestEstimateSeqParallel(t *testing.T) {
	cfg, _ := gpt.Preset("tiny")
	layout := cfg.Layout()
	js := `{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "sequence_parallel_size": %d, "zero_optimization": {"stage": 3}}`
	for _, tc := range []struct {
		world, sp int
		want      string
	}{
		{4, 2, "sequence_parallel_size 2 (Ulysses): each rank holds 16 of the 32 tokens"},
		{3, 3, "sequence_parallel_size 3 does not divide the GPT's 4 attention heads"},
	} {
		plan, err := dsconfig.Load(fmt.Sprintf(js, tc.sp), dsconfig.Options{WorldSize: tc.world})
		if err != nil {
			t.Fatal(err)
		}
		r, err := Compute(Input{Model: "tiny", Layout: &layout, Hardware: Hardware{GPUsPerNode: tc.world, Nodes: 1, BufferFactor: 1.5}, Plan: &plan, GPT: &cfg, SeqLen: 32})
		var got string
		if err != nil {
			got = err.Error()
		} else {
			got = strings.Join(r.Dszero.Notes, "\n")
			if r.Dszero.Ranks != tc.world {
				t.Errorf("world %d sp %d: states over %d ranks, want %d", tc.world, tc.sp, r.Dszero.Ranks, tc.world)
			}
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("world %d sp %d: %q, want %q", tc.world, tc.sp, got, tc.want)
		}
	}
}

// TestEstimateRefusesUnknownStage: a hand-built plan with a stage outside
// 0–3 is an error naming the field, not an index panic.
func TestEstimateRefusesUnknownStage(t *testing.T) {
	cfg, _ := gpt.Preset("tiny")
	layout := cfg.Layout()
	plan, err := dsconfig.Load(`{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}}`, dsconfig.Options{WorldSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, stage := range []int{4, -1} {
		plan.Zero.Stage = stage
		_, err := Compute(Input{Model: "tiny", Layout: &layout, Hardware: Hardware{GPUsPerNode: 2, Nodes: 1, BufferFactor: 1.5}, Plan: &plan, GPT: &cfg, SeqLen: 32})
		if err == nil || !strings.Contains(err.Error(), "zero_optimization.stage") {
			t.Errorf("stage %d: error %v, want one naming zero_optimization.stage", stage, err)
		}
	}
}
