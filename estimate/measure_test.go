package estimate

import (
	"fmt"
	"slices"
	"testing"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/data"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/train"
	"github.com/google/go-cmp/cmp"
)

// TestActivationsMeasured runs a forward and backward of the tiny GPT and
// compares the peak of mem.Activations with Activations, per tier, for
// two shapes, with and without checkpointing and with the saved inputs on
// the host. The tolerance is zero bytes: the model allocates its
// activations once per shape, as one accounted slab of exactly what it
// keeps, so the count is exact or the model has changed what it keeps
// (then Activations must follow).
func TestActivationsMeasured(t *testing.T) {
	cfg, err := gpt.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		t.Fatal(err)
	}
	for _, shape := range [][2]int{{2, 32}, {3, 7}} {
		for _, ck := range []struct {
			name      string
			ckpt, cpu bool
		}{{"kept", false, false}, {"checkpointed", true, false}, {"cpu_checkpointing", true, true}} {
			B, T := shape[0], shape[1]
			t.Run(fmt.Sprintf("B%d_T%d_%s", B, T, ck.name), func(t *testing.T) {
				acct := mem.NewAccountant(0)
				m, err := gpt.New(cfg, gpt.Options{Gemm: gemm, Acct: acct, Checkpoint: ck.ckpt, CPUCheckpoint: ck.cpu, Workers: 1})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				l := m.Layout()
				params, grads := make([]float32, m.NumParams()), make([]float32, m.NumParams())
				l.InitRange(7, params, 0)
				if err := m.Bind(params, grads); err != nil {
					t.Fatal(err)
				}
				tokens, targets := make([]int32, B*T), make([]int32, B*T)
				for i := range tokens {
					tokens[i], targets[i] = int32(i*7%cfg.Vocab), int32(i*11%cfg.Vocab)
				}
				if _, err := m.Forward(model.Batch{Tokens: tokens, B: B, Targets: targets}); err != nil {
					t.Fatal(err)
				}
				if err := m.Backward(1); err != nil {
					t.Fatal(err)
				}
				s := acct.Snapshot()
				got := Tiers{Device: s.PeakBytes(mem.Device, mem.Activations), PinnedHost: s.PeakBytes(mem.PinnedHost, mem.Activations)}
				if d := cmp.Diff(sum(Activations(cfg, B, T, ck.ckpt, ck.cpu)), got); d != "" {
					t.Errorf("(-estimate +measured)\n%s", d)
				}
			})
		}
	}
}

// TestEstimateMeasured trains the tiny GPT (110,336 parameters) for one
// step at stages 0–2 on 1 to 4 in-process ranks, fp32 and bf16, and
// compares each rank's peak device bytes by category with dszero's
// estimate: params16, master_params, grads and optim_state exactly
// (the padding of the flat buffer included: at 3 ranks it is padded to
// 110,340), comm (stage 2's live gradients, replayed by LiveGradients
// with buckets of 20,000 elements) exactly, temp (the model's gradient
// scratch) and activations exactly. Exact, because the engine allocates
// these buffers once, at the sizes the estimate computes.
func TestEstimateMeasured(t *testing.T) {
	cfg, _ := gpt.Preset("tiny")
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		t.Fatal(err)
	}
	const B, T = 2, 16
	for world := 1; world <= 4; world++ {
		for stage := 0; stage <= 2; stage++ {
			for _, prec := range []string{"fp32", "bf16"} {
				overlap := world%2 == 0
				t.Run(fmt.Sprintf("stage%d/world%d/%s", stage, world, prec), func(t *testing.T) {
					js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": 2,
  "bf16": {"enabled": %v},
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": %d, "reduce_bucket_size": 20000, "overlap_comm": %v}}`, B, prec == "bf16", stage, overlap)
					plan, r := estimateTiny(t, js, world, cfg, T, false)
					e := r.Dszero
					want := deviceBytes(e.Stages[stage].States, e.Stages[stage].Buffers, e.Activations)
					for rank, s := range trainOneStep(t, plan, cfg, gemm, B, T) {
						if d := cmp.Diff(want, devicePeaks(s)); d != "" {
							t.Errorf("rank %d peak device bytes (-estimate +measured)\n%s", rank, d)
						}
					}
				})
			}
		}
	}
}

// TestEstimateMeasuredStage3 trains the tiny GPT for one step of two
// micro-batches (the first pass records the trace, the second prefetches
// and keeps units by it) at stage 3 on 1 to 4 in-process ranks, and
// compares each rank's peak device bytes by category with the estimate,
// exactly: gathered (the persistent parameters and ReplayStage3's peak of
// the others) and comm (ReplayStage3's peak of staging and live
// gradients) included. The variants: the defaults (every tensor of the
// tiny GPT persistent), no reuse distance, no prefetch, no persistent
// parameters, and then no prefetch and no reuse distance, a prefetch
// bucket of one block, or KeepAfterForward; and a tied head (it borrows the
// embeddings); each with overlap_comm true and false, fp32 and bf16. At 3
// ranks most tensors are not divisible, and go through staging buffers.
func TestEstimateMeasuredStage3(t *testing.T) {
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		t.Fatal(err)
	}
	const B, T = 2, 16
	variants := []struct {
		name, knobs string
		keep, tied  bool
	}{
		{name: "defaults"},
		{name: "reuse0", knobs: `"stage3_max_reuse_distance": 0,`},
		{name: "prefetch0", knobs: `"stage3_prefetch_bucket_size": 0,`},
		{name: "persist0", knobs: `"stage3_param_persistence_threshold": 0,`},
		{name: "persist0_prefetch0_reuse0", knobs: `"stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0,`},
		{name: "persist0_prefetch50000_reuse0", knobs: `"stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 50000, "stage3_max_reuse_distance": 0,`},
		{name: "persist0_prefetch0_reuse0_keep_after_forward", knobs: `"stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0,`, keep: true},
		{name: "persist5000_tied", knobs: `"stage3_param_persistence_threshold": 5000, "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 50000,`, tied: true},
	}
	for _, v := range variants {
		cfg, _ := gpt.Preset("tiny")
		cfg.Tied = v.tied
		for world := 1; world <= 4; world++ {
			for _, run := range [4]struct {
				overlap bool
				prec    string
			}{{true, "fp32"}, {false, "fp32"}, {true, "bf16"}, {false, "bf16"}} {
				overlap, prec := run.overlap, run.prec
				t.Run(fmt.Sprintf("%s/world%d/overlap_%v/%s", v.name, world, overlap, prec), func(t *testing.T) {
					js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": 2,
  "bf16": {"enabled": %v},
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": 3, %s "reduce_bucket_size": 20000, "overlap_comm": %v}}`, B, prec == "bf16", v.knobs, overlap)
					plan, r := estimateTiny(t, js, world, cfg, T, v.keep)
					e := r.Dszero
					want := deviceBytes(e.Stages[3].States, e.Stages[3].Buffers, e.Activations)
					keep := func(c *train.Config) { c.KeepAfterForward = v.keep }
					for rank, s := range trainOneStep(t, plan, cfg, gemm, B, T, keep) {
						if d := cmp.Diff(want, devicePeaks(s)); d != "" {
							t.Errorf("rank %d peak device bytes (-estimate +measured)\n%s", rank, d)
							for _, l := range e.Stages[3].Buffers {
								t.Logf("%s %d: %s", l.Category, l.Bytes, l.What)
							}
						}
					}
				})
			}
		}
	}
}

// TestEstimateMeasuredPartialOffload trains the tiny GPT at stage 3 on 2
// ranks with offload_optimizer cpu, sub-groups of 20,000 elements and
// ratios 0, 0.5 and 1, and compares each rank's peak bytes of master,
// gradients and optimizer state in each tier with the estimate's lines:
// exactly, the sub-groups kept on the device included.
func TestEstimateMeasuredPartialOffload(t *testing.T) {
	cfg, _ := gpt.Preset("tiny")
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		t.Fatal(err)
	}
	const B, T, world = 2, 16, 2
	for _, ratio := range []float64{0, 0.5, 1} {
		t.Run(fmt.Sprint(ratio), func(t *testing.T) {
			js := fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": 3, "sub_group_size": 20000, "offload_optimizer": {"device": "cpu", "ratio": %g}}}`, B, ratio)
			plan, r := estimateTiny(t, js, world, cfg, T, false)
			states := []mem.Category{mem.MasterParams, mem.Grads, mem.OptimState}
			want := map[string]int64{}
			for _, l := range r.Dszero.Stages[3].States {
				if slices.Contains(states, l.Category) && l.Bytes > 0 {
					want[l.Category.String()+"/"+l.Tier.String()] += l.Bytes
				}
			}
			for rank, s := range trainOneStep(t, plan, cfg, gemm, B, T) {
				got := map[string]int64{}
				for _, c := range states {
					for _, tr := range mem.Tiers() {
						if v := s.PeakBytes(tr, c); v > 0 {
							got[c.String()+"/"+tr.String()] = v
						}
					}
				}
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("rank %d peak bytes (-estimate +measured)\n%s", rank, d)
				}
			}
			t.Logf("ratio %g: %v", ratio, want)
		})
	}
}

// estimateTiny loads the ds_config js for world ranks and computes the
// estimate for cfg (a variant of the tiny preset) at sequence length T.
func estimateTiny(t *testing.T, js string, world int, cfg gpt.Config, T int, keepAfterForward bool) (dsconfig.Plan, Report) {
	t.Helper()
	plan, err := dsconfig.Load(js, dsconfig.Options{WorldSize: world})
	if err != nil {
		t.Fatal(err)
	}
	layout := cfg.Layout()
	r, err := Compute(Input{Model: "tiny", Layout: &layout, Hardware: Hardware{GPUsPerNode: world, Nodes: 1, BufferFactor: 1.5},
		Plan: &plan, GPT: &cfg, SeqLen: T, KeepAfterForward: keepAfterForward})
	if err != nil {
		t.Fatal(err)
	}
	return plan, r
}

// trainOneStep trains cfg one step under plan on its world of in-process
// ranks, micro-batches of B samples of T tokens, and returns each rank's
// accountant snapshot.
func trainOneStep(t *testing.T, plan dsconfig.Plan, cfg gpt.Config, gemm model.Gemmer, B, T int, opts ...func(*train.Config)) []mem.Snapshot {
	t.Helper()
	world := plan.WorldSize
	loader, err := data.NewLoader(data.Random(cfg.Vocab, 1<<12, 1), data.Layout{B: B, T: T, GAS: int(plan.Batch.GradientAccumulationSteps), World: world})
	if err != nil {
		t.Fatal(err)
	}
	devs := make([]train.Device, world)
	for i := range devs {
		devs[i] = train.Device{Acct: mem.NewAccountant(i), Gemm: gemm}
	}
	c := train.Config{Plan: plan, Model: cfg, Seed: 1, Batches: train.Tokens(loader, T), SeqLen: T, Steps: 1, Devices: devs, Workers: 1}
	for _, o := range opts {
		o(&c)
	}
	if _, err := train.Run(c, func(train.Record) error { return nil }); err != nil {
		t.Fatal(err)
	}
	snaps := make([]mem.Snapshot, world)
	for i, d := range devs {
		snaps[i] = d.Acct.Snapshot()
	}
	return snaps
}

// deviceBytes sums the estimate's device lines by category.
func deviceBytes(lines ...[]Line) map[string]int64 {
	out := map[string]int64{}
	for _, ls := range lines {
		for _, l := range ls {
			if l.Tier == mem.Device && l.Bytes > 0 {
				out[l.Category.String()] += l.Bytes
			}
		}
	}
	return out
}

// devicePeaks is a snapshot's peak device bytes by category.
func devicePeaks(s mem.Snapshot) map[string]int64 {
	out := map[string]int64{}
	for _, c := range mem.Categories() {
		if v := s.PeakBytes(mem.Device, c); v > 0 {
			out[c.String()] = v
		}
	}
	return out
}
