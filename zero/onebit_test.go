package zero_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/zero/lrsched"
	"github.com/dszero/dszero/zero/optim"
)

func oneBitJSON(freeze int) string {
	return fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
  "optimizer": {"type": "OneBitAdam", "params": {"lr": 1e-3, "freeze_step": %d, "comm_backend_name": "nccl"}}}`, freeze)
}

const plainAdamJSON = `{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
  "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}}`

// TestOneBitAdamTrainsMLP: a ds_config naming OneBitAdam trains the MLP on
// 2 and 3 in-process ranks through warm-up and the compressed phase; the
// first step is DeepSpeed's initialization pass, which changes nothing.
// (The losses rise after the freeze: the MLP's dead ReLU units have a zero
// variance, and 1-bit compression cannot send their zero momentum — the
// case DeepSpeed's exp_avg_mask exists for; DeepSpeed's OnebitAdam does the
// same in conformance/reference/onebit_adam_ref.py with eps 1e-8.)
func TestOneBitAdamTrainsMLP(t *testing.T) {
	d := loadMLP(t)
	for _, world := range []int{2, 3} {
		t.Run(fmt.Sprintf("world%d", world), func(t *testing.T) {
			one := runMLP(t, oneBitJSON(3), world, 1, d)
			for i, w := range one.Final {
				if w != d.Init[i] {
					t.Fatalf("weight %d changed at the initialization step: %g → %g", i, d.Init[i], w)
				}
			}
			r := runMLP(t, oneBitJSON(3), world, 8, d)
			for s, l := range r.Losses {
				if math.IsNaN(l) || math.IsInf(l, 0) {
					t.Fatalf("step %d: loss %g", s+1, l)
				}
			}
			// One all_to_all per tensor at the initialization step and at
			// each step after the freeze (steps 4..8).
			if got, want := r.Traffic[0].Of(comm.KindAllToAll).Calls, int64((1+8-3)*len(d.Layout.Specs)); got != want {
				t.Errorf("%d all_to_all calls, want %d", got, want)
			}
		})
	}
}

// TestOneBitAdamTraffic: after the freeze, a step of 1-bit Adam sends the
// packed signs and scales of each tensor (padded as DeepSpeed pads it)
// and no gradients: ≈ 1/32 of the plain Adam step's fp32 gradient
// all-reduce, plus the per-chunk scales and the padding of small tensors.
func TestOneBitAdamTraffic(t *testing.T) {
	d := loadMLP(t)
	const world, steps, freeze = 2, 6, 2
	plain := runMLP(t, plainAdamJSON, world, steps, d)
	onebit := runMLP(t, oneBitJSON(freeze), world, steps, d)
	for r := range world {
		pt, ot := plain.Traffic[r], onebit.Traffic[r]
		normBytes, _ := comm.NominalTraffic(comm.KindAllReduce, world, r, 0, 4) // the clipping norm, every step
		gradStep := (pt.Of(comm.KindAllReduce).Sent - steps*normBytes) / steps
		if want, _ := comm.NominalTraffic(comm.KindAllReduce, world, r, 0, 4*int64(d.Layout.Numel)); gradStep != want {
			t.Fatalf("rank %d: plain Adam sends %d gradient bytes a step, want %d", r, gradStep, want)
		}
		// 1-bit: gradients all-reduced at the warm-up steps 1..freeze only.
		if got, want := ot.Of(comm.KindAllReduce).Sent, freeze*gradStep+steps*normBytes; got != want {
			t.Errorf("rank %d: 1-bit Adam all_reduce sent %d bytes, want %d (gradients at the %d warm-up steps, norms)", r, got, want, freeze)
		}
		// The compressed exchange: the initialization step and each step after the freeze.
		var perStep int64
		for _, sp := range d.Layout.Specs {
			w := int64(comm.CompressedWords(optim.OneBitPadded(sp.Numel, world), world))
			a2a, _ := comm.NominalTraffic(comm.KindAllToAll, world, r, 0, int64(world)*w*2)
			ag, _ := comm.NominalTraffic(comm.KindAllGather, world, r, 0, int64(world)*w*2)
			perStep += a2a + ag
		}
		exchanges := int64(1 + steps - freeze)
		// (minus the loop's own all_gathers, which plain Adam's run makes too)
		got := ot.Of(comm.KindAllToAll).Sent + ot.Of(comm.KindAllGather).Sent - pt.Of(comm.KindAllGather).Sent
		if got != exchanges*perStep {
			t.Errorf("rank %d: compressed exchange sent %d bytes, want %d (%d exchanges of %d)", r, got, exchanges*perStep, exchanges, perStep)
		}
		ratio := float64(perStep) / float64(gradStep)
		t.Logf("rank %d: per step after the freeze %d bytes vs plain Adam's %d: ratio %.4f (1/32 = %.4f; tensors %d)", r, perStep, gradStep, ratio, 1.0/32, len(d.Layout.Specs))
		if ratio < 1.0/32 || ratio > 1.0/16 {
			t.Errorf("rank %d: ratio %.4f, want between 1/32 and 1/16 for the MLP's small tensors", r, ratio)
		}
	}
}

// TestOneBitAdamFP16: in fp16 1-bit Adam compresses FP16_Optimizer's one
// flat master (one all_to_all a compressed step), follows the fp32 run's
// losses within 5%, and an overflow on one rank only after
// the freeze — its gradients are its own then — skips the step on every
// rank (the flag is all-reduced, as DeepSpeed's CheckOverflow does when
// enable_backward_allreduce is False).
func TestOneBitAdamFP16(t *testing.T) {
	d := loadMLP(t)
	const world, steps, freeze = 2, 10, 4
	js := func(prec string) string {
		return fmt.Sprintf(`{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, %s
  "optimizer": {"type": "OneBitAdam", "params": {"lr": 1e-3, "eps": 1e-3, "freeze_step": %d}}}`, prec, freeze)
	}
	f32 := runMLP(t, js(""), world, steps, d)
	f16 := runMLP(t, js(`"fp16": {"enabled": true, "initial_scale_power": 8},`), world, steps, d)
	// FP16_Optimizer's constructor takes the initialization pass (step
	// count 1), so training step k has count k+1 and the freeze comes one
	// training step earlier than in fp32.
	if got, want := f16.Traffic[0].Of(comm.KindAllToAll).Calls, int64(1+steps-(freeze-1)); got != want {
		t.Errorf("fp16: %d all_to_all calls, want %d (one flat tensor per exchange)", got, want)
	}
	for i := range f32.Losses {
		// 5%: besides fp16's rounding, the compressed steps differ by
		// design (one scale for the flat master against one per tensor).
		if rel := math.Abs(f16.Losses[i]-f32.Losses[i]) / f32.Losses[i]; !(rel < 5e-2) {
			t.Errorf("step %d: fp16 loss %g, fp32 %g", i+1, f16.Losses[i], f32.Losses[i])
		}
	}

	plan, err := ztest.Plan(js(`"fp16": {"enabled": true, "initial_scale_power": 8},`), world)
	if err != nil {
		t.Fatal(err)
	}
	const bad = 6 // after the freeze: local gradients
	r, err := ztest.RunMLP(plan, steps, lrsched.DeepSpeed0145, d, func(rank, step, micro, unit int, grads []float32) {
		if rank == 1 && step == bad-1 && micro == 0 && unit == 0 {
			grads[0] = float32(math.Inf(1))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range r.Stats {
		if st.Skipped != (i == bad-1) {
			t.Errorf("step %d: skipped %v", i+1, st.Skipped)
		}
	}
	if r.Stats[bad].LossScale >= r.Stats[bad-2].LossScale {
		t.Errorf("loss scale %g after the overflow, %g before", r.Stats[bad].LossScale, r.Stats[bad-2].LossScale)
	}
}
