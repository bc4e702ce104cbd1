// Package ztest trains the reference harness's TinyMLP on in-process ranks
// through the ZeRO engine, and reads DeepSpeed's recorded results, for the
// tests of package zero and of the stage packages. It is test support:
// nothing outside tests imports it.
package ztest

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/mlp"
	"github.com/dszero/dszero/train"
	"github.com/dszero/dszero/zero"
)

// MLPSamples is the number of samples in the harness's MLP data.
const MLPSamples = 10 * 16

// MLPData is the harness's TinyMLP data and initial weights.
type MLPData struct {
	Cfg    mlp.Config
	Layout model.Layout
	X, Y   []float32 // [160, 16], [160, 8]
	Init   []float32
}

// LoadMLP reads mlp_init.safetensors and mlp_data.safetensors from dir.
func LoadMLP(dir string) (MLPData, error) {
	cfg, _ := mlp.Preset("tiny")
	d := MLPData{Cfg: cfg, Layout: cfg.Layout()}
	d.Init = make([]float32, d.Layout.Numel)
	if err := model.ReadLayout(dir+"/mlp_init.safetensors", &d.Layout, d.Init); err != nil {
		return d, err
	}
	f, err := model.OpenSafetensors(dir + "/mlp_data.safetensors")
	if err != nil {
		return d, err
	}
	defer f.Close()
	d.X, d.Y = make([]float32, MLPSamples*16), make([]float32, MLPSamples*8)
	if err := f.ReadFloat32("x", d.X); err != nil {
		return d, err
	}
	return d, f.ReadFloat32("y", d.Y)
}

// Run is what a training run on a world of ranks produced.
type Run struct {
	Losses  []float64         // per step: mean over ranks and micro-steps, summed in micro-batch order
	Micro   [][][]float32     // [step][rank][micro] losses
	Stats   []zero.StepStats  // rank 0's
	Final   []float32         // the full fp32 master parameters after the last step
	Accts   []*mem.Accountant // per rank, after the run
	Warns   []string          // rank 0's engine warnings
	Traffic []comm.Traffic    // per rank
	// GroupTraffic is, per rank, what a hybrid stage 3 moved within its
	// shard group and across the replica groups during training.
	GroupTraffic [][2]comm.Traffic
}

// Plan compiles js for a world of n ranks.
func Plan(js string, n int) (dsconfig.Plan, error) {
	return dsconfig.Load(js, dsconfig.Options{WorldSize: n})
}

// Inject, when set, is called on every rank just before the engine's
// AfterBackward of every unit, with the model's gradient buffer: a test
// corrupts gradients there.
type Inject func(rank, step, micro, unit int, grads []float32)

// RunMLP trains the TinyMLP from d.Init for steps steps with plan on
// plan.WorldSize in-process ranks. Step s, micro-batch mb (rank r reads
// mb = micro·world + r) uses samples s·G + mb·B … + B−1 (mod 160), with
// G = B·GAS·world: the harness's layout for its 2-rank runs, and the same
// global batches for any split of G.
func RunMLP(plan dsconfig.Plan, steps int, v zero.Version, d MLPData, inject Inject) (Run, error) {
	return RunMLPWith(plan, steps, v, d, inject, nil)
}

// RunMLPWith is RunMLP with the engine options of each rank adjusted by
// tweak (nil: none), for the knobs a plan does not carry. It trains
// through train.Run, the one training loop.
func RunMLPWith(plan dsconfig.Plan, steps int, v zero.Version, d MLPData, inject Inject, tweak func(*zero.Options)) (Run, error) {
	world := plan.WorldSize
	gas := int(plan.Batch.GradientAccumulationSteps)
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum}) // pure Go: the same on every machine
	if err != nil {
		return Run{}, err
	}
	run := Run{Accts: make([]*mem.Accountant, world), Traffic: make([]comm.Traffic, world),
		GroupTraffic: make([][2]comm.Traffic, world)}
	devs := make([]train.Device, world)
	for r := range devs {
		run.Accts[r] = mem.NewAccountant(r)
		devs[r] = train.Device{Acct: run.Accts[r], Gemm: gemm}
	}
	cfg := train.Config{Plan: plan, Model: d.Cfg, Init: d.Init, Batches: mlpBatches{d: &d, gas: gas, world: world},
		Steps: steps, ReturnParams: true, Devices: devs, Workers: 1, Version: v, Timeout: time.Minute,
		Warn: func(w string) { run.Warns = append(run.Warns, w) },
		Done: func(r int, c comm.Comm, eng *zero.Engine) error {
			if g, ok := eng.Strategy().(interface {
				GroupTraffic() (shard, replicas comm.Traffic)
			}); ok {
				run.GroupTraffic[r][0], run.GroupTraffic[r][1] = g.GroupTraffic()
			}
			run.Traffic[r] = c.Traffic()
			return nil
		}}
	if tweak != nil {
		cfg.EngineOptions = func(_ int, o *zero.Options) error { tweak(o); return nil }
	}
	if inject != nil {
		cfg.Hooks = func(r int, eng *zero.Engine) model.UnitHooks {
			_, grads := eng.ModelBuffers()
			return &injector{UnitHooks: eng.Strategy(), inject: inject, rank: r, gas: gas, grads: grads}
		}
	}
	run.Final, err = train.Run(cfg, func(rec train.Record) error {
		run.Micro = append(run.Micro, rec.Micro)
		run.Losses = append(run.Losses, rec.Loss)
		run.Stats = append(run.Stats, zero.StepStats{Step: rec.Step, LR: rec.LR, LossScale: rec.LossScale,
			GradNorm: rec.GradNorm, Skipped: rec.Skipped})
		return nil
	})
	if err != nil {
		return Run{}, err
	}
	return run, nil
}

// mlpBatches serves d's samples in the harness's layout: step s,
// micro-batch mb = micro·world + rank uses samples s·G + mb·B … + B−1
// (mod MLPSamples), G = B·GAS·world.
type mlpBatches struct {
	d          *MLPData
	gas, world int
}

func (m mlpBatches) Batch(step, micro, rank int, b *model.Batch) error {
	B := b.B
	nx, ny := m.d.Cfg.Sizes[0], m.d.Cfg.Sizes[len(m.d.Cfg.Sizes)-1]
	if len(b.X) != B*nx {
		b.X, b.Y = make([]float32, B*nx), make([]float32, B*ny)
	}
	G := B * m.gas * m.world
	mb := micro*m.world + rank
	for i := 0; i < B; i++ {
		n := (step*G + mb*B + i) % MLPSamples
		copy(b.X[i*nx:(i+1)*nx], m.d.X[n*nx:])
		copy(b.Y[i*ny:(i+1)*ny], m.d.Y[n*ny:])
	}
	return nil
}

// injector calls Inject before the strategy's AfterBackward. It tells the
// micro-steps apart by the model's first hook of each forward.
type injector struct {
	model.UnitHooks
	inject Inject
	rank   int
	gas    int
	passes int // forwards begun
	grads  []float32
}

func (h *injector) BeforeForward(unit int) error {
	if unit == 0 {
		h.passes++
	}
	return h.UnitHooks.BeforeForward(unit)
}

func (h *injector) AfterBackward(unit int) error {
	p := h.passes - 1
	h.inject(h.rank, p/h.gas, p%h.gas, unit, h.grads)
	return h.UnitHooks.AfterBackward(unit)
}

// DSResult is the part of a reference run's result.json the tests read.
type DSResult struct {
	Run   string `json:"run"`
	Steps []struct {
		Step        int                  `json:"step"`
		LRUsed      float64              `json:"lr_used"`
		Loss        float64              `json:"loss"`
		GradNorm    float64              `json:"grad_norm"`
		MicroLosses map[string][]float64 `json:"micro_losses"` // "rank0": [micro 0, micro 1]
	} `json:"steps"`
	FinalIdenticalTo string `json:"final_fp32_identical_to"`
	Memory           map[string]struct {
		MasterFP32Bytes     int64 `json:"master_fp32_bytes"`
		OptimizerStateBytes int64 `json:"optimizer_state_bytes"`
		ModuleParamBytes    int64 `json:"module_param_bytes_on_rank"`
	} `json:"memory"`
}

// ReadDSResult reads a reference run's result.json.
func ReadDSResult(path string) (DSResult, error) {
	var r DSResult
	raw, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// StageJSON is the harness's training setup (AdamW, clipping 1.0,
// WarmupDecayLR) at a ZeRO stage with micro-batch 2, 2 accumulation steps
// and the given reduce_bucket_size and overlap_comm.
func StageJSON(stage, bucket int, overlap bool) string {
	return fmt.Sprintf(`{
  "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"torch_adam": true, "lr": 1e-3, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 10, "warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3, "warmup_num_steps": 3, "warmup_type": "linear"}},
  "zero_optimization": {"stage": %d, "reduce_bucket_size": %d, "overlap_comm": %v}
}`, stage, bucket, overlap)
}

// Peaks is a rank's device peak bytes by category.
func Peaks(a *mem.Accountant) map[mem.Category]int64 {
	s := a.Snapshot()
	out := map[mem.Category]int64{}
	for _, c := range mem.Categories() {
		out[c] = s.PeakBytes(mem.Device, c)
	}
	return out
}
