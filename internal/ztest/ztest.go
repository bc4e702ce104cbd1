// Package ztest trains the reference harness's TinyMLP on in-process ranks
// through the ZeRO engine, and reads DeepSpeed's recorded results, for the
// tests of package zero and of the stage packages. It is test support:
// nothing outside tests imports it.
package ztest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/mlp"
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
// tweak (nil: none), for the knobs a plan does not carry.
func RunMLPWith(plan dsconfig.Plan, steps int, v zero.Version, d MLPData, inject Inject, tweak func(*zero.Options)) (Run, error) {
	world := plan.WorldSize
	B, gas := int(plan.Batch.TrainMicroBatchSizePerGPU), int(plan.Batch.GradientAccumulationSteps)
	G := B * gas * world
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum}) // pure Go: the same on every machine
	if err != nil {
		return Run{}, err
	}
	run := Run{Micro: make([][][]float32, steps), Accts: make([]*mem.Accountant, world), Traffic: make([]comm.Traffic, world),
		GroupTraffic: make([][2]comm.Traffic, world)}
	for s := range run.Micro {
		run.Micro[s] = make([][]float32, world)
		for r := range run.Micro[s] {
			run.Micro[s][r] = make([]float32, gas)
		}
	}
	run.Final = make([]float32, d.Layout.Numel)
	err = inproc.New(world, inproc.Options{Timeout: time.Minute}).Run(func(c comm.Comm) error {
		r := c.Rank()
		acct := mem.NewAccountant(r)
		run.Accts[r] = acct
		opts := zero.Options{Acct: acct, Layout: &d.Layout, Init: d.Init, Workers: 1, Version: v, Comm: c, Ctx: context.Background()}
		if r == 0 {
			opts.Warn = func(w string) { run.Warns = append(run.Warns, w) }
		}
		if tweak != nil {
			tweak(&opts)
		}
		eng, err := zero.NewEngine(plan, opts)
		if err != nil {
			return err
		}
		defer eng.Close()
		hooks := &injector{UnitHooks: eng.Strategy(), inject: inject, rank: r}
		m, err := mlp.New(d.Cfg, mlp.Options{Gemm: gemm, Acct: acct, Hooks: hooks, Round: eng.Round()})
		if err != nil {
			return err
		}
		defer m.Close()
		if err := m.Bind(eng.ModelBuffers()); err != nil {
			return err
		}
		_, hooks.grads = eng.ModelBuffers()
		x, y := make([]float32, B*16), make([]float32, B*8)
		for s := 0; s < steps; s++ {
			for micro := 0; micro < gas; micro++ {
				hooks.step, hooks.micro = s, micro
				mb := micro*world + r
				for b := 0; b < B; b++ {
					i := (s*G + mb*B + b) % MLPSamples
					copy(x[b*16:(b+1)*16], d.X[i*16:])
					copy(y[b*8:(b+1)*8], d.Y[i*8:])
				}
				loss, err := m.Forward(x, B, y)
				if err != nil {
					return err
				}
				run.Micro[s][r][micro] = loss
				if err := m.Backward(eng.GradScale()); err != nil {
					return err
				}
			}
			st, err := eng.Step()
			if err != nil {
				return err
			}
			if r == 0 {
				run.Stats = append(run.Stats, st)
			}
		}
		if g, ok := eng.Strategy().(interface {
			GroupTraffic() (shard, replicas comm.Traffic)
		}); ok {
			run.GroupTraffic[r][0], run.GroupTraffic[r][1] = g.GroupTraffic()
		}
		full := make([]float32, d.Layout.Numel)
		if err := eng.GatherMaster(full); err != nil {
			return err
		}
		if r == 0 {
			copy(run.Final, full)
		}
		run.Traffic[r] = c.Traffic()
		return nil
	})
	if err != nil {
		return Run{}, err
	}
	for s := range run.Micro {
		sum := 0.0
		for micro := 0; micro < gas; micro++ {
			for r := 0; r < world; r++ {
				sum += float64(run.Micro[s][r][micro])
			}
		}
		run.Losses = append(run.Losses, sum/float64(gas*world))
	}
	return run, nil
}

// injector calls Inject before the strategy's AfterBackward.
type injector struct {
	model.UnitHooks
	inject            Inject
	rank, step, micro int
	grads             []float32
}

func (h *injector) AfterBackward(unit int) error {
	if h.inject != nil {
		h.inject(h.rank, h.step, h.micro, unit, h.grads)
	}
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
