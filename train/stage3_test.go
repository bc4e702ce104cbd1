package train

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/fdiff"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/zero"
	"github.com/dszero/dszero/zero/lrsched"
	"github.com/dszero/dszero/zero/partition"
)

// stage3JSON is the harness's setup at stage 3 with every unit gathered
// (persistence 0) and the prefetch and reuse knobs given.
func stage3JSON(prefetch, reuse int, overlap bool) string {
	js := harnessJSON(3, 2, 2, 20000, overlap)
	return strings.Replace(js, `"stage": 3,`, fmt.Sprintf(`"stage": 3, "stage3_param_persistence_threshold": 0,
    "stage3_prefetch_bucket_size": %d, "stage3_max_reuse_distance": %d,`, prefetch, reuse), 1)
}

// TestStage3VariantsGPT: the tiny GPT (tied embeddings: the head borrows
// wte, so unit 0 is gathered again for the head and its gradients wait
// for the head's backward) trains bit-identically at stage 3 whether its
// units are gathered on demand or prefetched, kept by reuse distance or
// after forward (FSDP SHARD_GRAD_OP), wrapped by size, or recomputed by
// activation checkpointing, on 2 and 3 ranks; and equals DeepSpeed's
// defaults (every parameter persistent). Gathering on demand never holds
// the whole model.
func TestStage3VariantsGPT(t *testing.T) {
	g := loadGPT(t)
	type variant struct {
		name              string
		prefetch, reuse   int
		overlap, keep, ck bool
		minNum            int
	}
	for _, world := range []int{2, 3} {
		base, bw := runGPT(t, g, harnessJSON(3, 2, 2, 20000, false), world, 3, lrsched.DeepSpeed0195)
		for _, v := range []variant{
			{name: "on-demand"},
			{name: "prefetch", prefetch: 30000},
			{name: "prefetch-reuse-overlap", prefetch: 30000, reuse: 1 << 30, overlap: true},
			{name: "keep-after-forward", keep: true},
			{name: "size-wrap", prefetch: 30000, minNum: 40000},
			{name: "checkpointing", prefetch: 30000, ck: true},
		} {
			t.Run(fmt.Sprintf("world%d/%s", world, v.name), func(t *testing.T) {
				plan, err := dsconfig.Load(stage3JSON(v.prefetch, v.reuse, v.overlap), dsconfig.Options{WorldSize: world})
				if err != nil {
					t.Fatal(err)
				}
				devs := make([]Device, world)
				for r := range devs {
					devs[r] = Device{Acct: mem.NewAccountant(r), Gemm: g.gemm}
				}
				var recs []Record
				var warns []string
				final, err := Run(Config{Plan: plan, Model: g.cfg, Init: g.init, SeqLen: 32, Steps: 3, ReturnParams: true,
					Batches: Tokens(gptSamples{tokens: g.tokens, B: 2, gas: 2, world: world}, 32), Devices: devs, Version: lrsched.DeepSpeed0195,
					Workers: 1, Checkpoint: v.ck, KeepAfterForward: v.keep, WrapMinNumParams: v.minNum,
					Warn: func(w string) { warns = append(warns, w) }}, func(r Record) error { recs = append(recs, r); return nil })
				if err != nil {
					t.Fatal(err)
				}
				for i := range recs {
					if recs[i].Loss != base[i].Loss {
						t.Errorf("step %d: loss %v, stage 3 defaults %v", i+1, recs[i].Loss, base[i].Loss)
					}
				}
				if !slices.Equal(final, bw) {
					t.Errorf("final weights differ from stage 3 with defaults")
				}
				if len(warns) > 0 {
					t.Errorf("warnings: %q", warns)
				}
				// Gathering on demand never holds the whole model.
				peak := devs[0].Acct.Snapshot().PeakBytes(mem.Device, mem.Gathered)
				if whole := 4 * int64(g.layout.Numel); v.name == "on-demand" && (peak >= whole || peak == 0) {
					t.Errorf("peak gathered %d bytes, the whole model is %d", peak, whole)
				}
			})
		}
	}
}

// TestStage3FitsWhereStage2OOMs: the capacity ZeRO-3 is for. A 16-block
// GPT (Ψ ≈ 3.2M parameters) on 4 ranks under a per-rank budget of 7Ψ
// bytes: stage 2 needs 4Ψ of full fp32 parameters plus 16Ψ/4 of
// partitions, 8Ψ, and fails like a GPU OOM naming a rank and a category;
// stage 3 needs 20Ψ/4 = 5Ψ plus the units it gathers and trains (both
// with activation checkpointing).
func TestStage3FitsWhereStage2OOMs(t *testing.T) {
	b := newBudgetRun(t)
	psi := b.psi
	try := func(stage int) error {
		js := strings.Replace(harnessJSON(stage, 1, 1, 1<<20, false), `"stage": `+fmt.Sprint(stage)+`,`, fmt.Sprintf(`"stage": %d,
		  "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 300000,`, stage), 1)
		devs, err := b.run(t, js, 7*psi)
		if err == nil {
			t.Logf("stage %d: peak %d bytes = %.2fΨ under a budget of 7Ψ", stage, devs[0].Acct.Snapshot().PeakTotal[mem.Device],
				float64(devs[0].Acct.Snapshot().PeakTotal[mem.Device])/float64(psi))
		}
		return err
	}
	var oom *mem.OOMError
	if err := try(2); !errors.As(err, &oom) {
		t.Errorf("stage 2 under 7Ψ per rank: %v, want an OOM", err)
	} else {
		t.Logf("stage 2: %v", err)
	}
	if err := try(3); err != nil {
		t.Errorf("stage 3 under 7Ψ per rank: %v", err)
	}
}

// TestWallClockBreakdown: with wall_clock_breakdown each record says where
// rank 0's step went; at stage 3 it counts the units gathered, and from
// the second pass on (once the trace is recorded) some are prefetched.
// Without the key there is no breakdown.
func TestWallClockBreakdown(t *testing.T) {
	g := loadGPT(t)
	for _, on := range []bool{true, false} {
		js := strings.Replace(stage3JSON(30000, 0, true), `"gradient_clipping": 1.0,`, fmt.Sprintf(`"gradient_clipping": 1.0, "wall_clock_breakdown": %v,`, on), 1)
		plan, err := dsconfig.Load(js, dsconfig.Options{WorldSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		var recs []Record
		_, err = Run(Config{Plan: plan, Model: g.cfg, Init: g.init, SeqLen: 32, Steps: 2, Workers: 1,
			Devices: []Device{{mem.NewAccountant(0), g.gemm}, {mem.NewAccountant(1), g.gemm}},
			Batches: Tokens(gptSamples{tokens: g.tokens, B: 2, gas: 2, world: 2}, 32)}, func(r Record) error { recs = append(recs, r); return nil })
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			b := r.Breakdown
			switch {
			case !on && b != nil:
				t.Errorf("step %d: a breakdown without wall_clock_breakdown", r.Step)
			case on && b == nil:
				t.Errorf("step %d: no breakdown", r.Step)
			case on && (b.ForwardMS <= 0 || b.BackwardMS <= 0 || b.Gathers == 0 || r.Step == 2 && b.Prefetched == 0):
				t.Errorf("step %d: breakdown %+v", r.Step, *b)
			}
		}
	}
}

// TestStage3LoadsSlices: at stage 3 a rank loading a Hugging Face
// checkpoint reads only its partitions of each tensor (the ranges it asks
// the file for add up to its share of the model), never holds more than
// it keeps (peak = live after loading, no temporary), and the loaded
// model is the file's.
func TestStage3LoadsSlices(t *testing.T) {
	cfg := gpt.Config{Vocab: 50, Context: 16, Dim: 32, Heads: 2, Layers: 3}.WithDefaults()
	l := cfg.Layout()
	params := make([]float32, l.Numel)
	l.InitRange(5, params, 0)
	dir := t.TempDir()
	if err := gpt.SaveDir(dir, cfg, params); err != nil {
		t.Fatal(err)
	}
	w, err := gpt.OpenWeights(filepath.Join(dir, "model.safetensors"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, world := range []int{1, 3} {
		plan, err := dsconfig.Load(`{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"},
		  "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}`, dsconfig.Options{WorldSize: world})
		if err != nil {
			t.Fatal(err)
		}
		err = inproc.New(world, inproc.Options{}).Run(func(c comm.Comm) error {
			acct := mem.NewAccountant(c.Rank())
			read := 0
			eng, err := zero.NewEngine(plan, zero.Options{Acct: acct, Layout: &l, Comm: c, Workers: 1,
				InitRange: func(dst []float32, lo int) error { read += len(dst); return w.ReadRange(dst, lo) }})
			if err != nil {
				return err
			}
			defer eng.Close()
			share := 0
			for _, sp := range l.Specs {
				lo, hi, _ := partition.PerParam(sp.Numel, world, c.Rank())
				share += hi - lo
			}
			snap := acct.Snapshot()
			switch {
			case read != share:
				return fmt.Errorf("rank %d read %d elements, its share is %d of %d", c.Rank(), read, share, l.Numel)
			case snap.PeakTotal[mem.Device] != snap.LiveTotal[mem.Device]:
				return fmt.Errorf("rank %d peaked at %d bytes while loading, keeps %d", c.Rank(), snap.PeakTotal[mem.Device], snap.LiveTotal[mem.Device])
			}
			full := make([]float32, l.Numel)
			if err := eng.GatherMaster(full); err != nil {
				return err
			}
			if !slices.Equal(full, params) {
				return fmt.Errorf("rank %d: the loaded model differs from the file's", c.Rank())
			}
			return nil
		})
		if err != nil {
			t.Errorf("world %d: %v", world, err)
		}
	}
}

// TestFSDPStrategies: FSDP's strategies as the engine runs them, on 4
// ranks (shard groups of 2 for the hybrids), train the tiny GPT like one
// rank of stage 0 on the same global batches (losses within 1e-6
// relative, weights within 1e-6 of their norm): FULL_SHARD (stage 3),
// SHARD_GRAD_OP (stage 3 keeping parameters from forward to backward),
// HYBRID_SHARD (stage 3 on shard groups), HYBRID_SHARD_ZERO2 (both) and
// NO_SHARD (stage 0).
func TestFSDPStrategies(t *testing.T) {
	g := loadGPT(t)
	const world = 4
	base, bw := runGPT(t, g, harnessJSON(0, 2, 2*world, 500000000, false), 1, 3, lrsched.DeepSpeed0195)
	for _, v := range []struct {
		name        string
		stage       int
		keep        bool
		group, wrap int
	}{
		{"FULL_SHARD", 3, false, 0, 0}, {"SHARD_GRAD_OP", 3, true, 0, 0}, {"HYBRID_SHARD", 3, false, 2, 0},
		{"HYBRID_SHARD_ZERO2", 3, true, 2, 0}, {"FULL_SHARD/size-wrap", 3, false, 0, 40000}, {"NO_SHARD", 0, false, 0, 0},
	} {
		t.Run(v.name, func(t *testing.T) {
			js := harnessJSON(v.stage, 2, 2, 20000, true)
			if v.stage == 3 {
				js = stage3JSON(30000, 0, true)
			}
			plan, err := dsconfig.Load(js, dsconfig.Options{WorldSize: world})
			if err != nil {
				t.Fatal(err)
			}
			devs := make([]Device, world)
			for r := range devs {
				devs[r] = Device{Acct: mem.NewAccountant(r), Gemm: g.gemm}
			}
			var recs []Record
			final, err := Run(Config{Plan: plan, Model: g.cfg, Init: g.init, SeqLen: 32, Steps: 3, ReturnParams: true, Workers: 1, Devices: devs,
				Batches: Tokens(gptSamples{tokens: g.tokens, B: 2, gas: 2, world: world}, 32), Version: lrsched.DeepSpeed0195,
				KeepAfterForward: v.keep, ShardGroupSize: v.group, WrapMinNumParams: v.wrap},
				func(r Record) error { recs = append(recs, r); return nil })
			if err != nil {
				t.Fatal(err)
			}
			lrel := maxRel(recs, base)
			wabs, wrel := fdiff.Weights(final, bw)
			t.Logf("losses max rel Δ %.2e; weights max |Δ| %.2e, ‖Δ‖/‖w‖ %.2e", lrel, wabs, wrel)
			if lrel > 1e-6 || wrel > 1e-6 {
				t.Errorf("differs from one rank of stage 0: losses %.2e, weights %.2e", lrel, wrel)
			}
		})
	}
}

// TestNVMeOffloadFitsWhereStage3OOMs: ZeRO-Infinity's point. The 16-block
// GPT on 4 ranks under a per-rank device budget of 3Ψ bytes: plain stage
// 3 keeps 20Ψ/4 = 5Ψ of model states on the device and fails like a GPU
// OOM; with the optimizer state and the parameters offloaded to NVMe
// (swap files in a temporary directory) the device holds only the
// gathered units, the live gradients and the activations, and it trains.
func TestNVMeOffloadFitsWhereStage3OOMs(t *testing.T) {
	b := newBudgetRun(t)
	psi, world := b.psi, int64(budgetWorld)
	try := func(offload string) ([]Device, error) {
		js := strings.Replace(harnessJSON(3, 1, 1, 1<<20, false), `"stage": 3,`, `"stage": 3, "stage3_param_persistence_threshold": 0,
		  "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 300000,`+offload, 1)
		return b.run(t, js, 3*psi)
	}
	var oom *mem.OOMError
	if _, err := try(""); !errors.As(err, &oom) {
		t.Errorf("stage 3 under 3Ψ per rank: %v, want an OOM", err)
	}
	dir := t.TempDir()
	devs, err := try(fmt.Sprintf(`"offload_optimizer": {"device": "nvme", "nvme_path": %q}, "offload_param": {"device": "nvme", "nvme_path": %q},`, dir, dir))
	if err != nil {
		t.Fatalf("stage 3 with NVMe offload under 3Ψ per rank: %v", err)
	}
	s := devs[0].Acct.Snapshot()
	t.Logf("rank 0 with NVMe offload (Ψ = %d): device %s (%.2fΨ), pinned host %s, NVMe %s", psi, mem.FormatBytes(s.PeakTotal[mem.Device]),
		float64(s.PeakTotal[mem.Device])/float64(psi), mem.FormatBytes(s.PeakTotal[mem.PinnedHost]), mem.FormatBytes(s.PeakTotal[mem.NVMe]))
	if s.PeakTotal[mem.NVMe] < 16*psi/world {
		t.Errorf("NVMe tier %d bytes, want at least the parameters and optimizer state, %d", s.PeakTotal[mem.NVMe], 16*psi/world)
	}
}

// budgetRun is the model of the device-budget tests: a 16-block GPT
// (Ψ = psi parameters) trained for two steps on budgetWorld ranks with
// activation checkpointing.
type budgetRun struct {
	g   gptRef
	mc  gpt.Config
	psi int64
}

const budgetWorld = 4

func newBudgetRun(t *testing.T) budgetRun {
	g := loadGPT(t)
	mc := g.cfg
	mc.Layers, mc.Dim, mc.MLP, mc.Vocab = 16, 128, 512, 64
	return budgetRun{g: g, mc: mc, psi: int64(mc.WithDefaults().Layout().Numel)}
}

// run trains under config js with a device budget of budget bytes per
// rank; the devices hold each rank's accounting.
func (b budgetRun) run(t *testing.T, js string, budget int64) ([]Device, error) {
	t.Helper()
	plan, err := dsconfig.Load(js, dsconfig.Options{WorldSize: budgetWorld})
	if err != nil {
		t.Fatal(err)
	}
	devs := make([]Device, budgetWorld)
	for r := range devs {
		devs[r] = Device{Acct: mem.NewAccountant(r), Gemm: b.g.gemm}
		devs[r].Acct.SetCapacity(mem.Device, budget)
	}
	_, err = Run(Config{Plan: plan, Model: b.mc, Seed: 1, SeqLen: 32, Steps: 2, Devices: devs, Workers: 1, Checkpoint: true,
		Batches: Tokens(gptSamples{tokens: b.g.tokens, B: 1, gas: 1, world: budgetWorld}, 32)}, nil)
	return devs, err
}
