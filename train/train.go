// Package train runs the training loop of one rank: micro-batches through
// forward and backward, the optimizer step at the gradient-accumulation
// boundary, and a record per step. The ZeRO engine (package zero) owns the
// state; this package owns the order of operations and the measurements.
package train

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/zero"
)

// Batches yields a rank's micro-batches (data.Loader is one).
type Batches interface {
	Micro(step, micro, rank int, inputs, targets []int32)
}

// Config is one training run of a GPT.
type Config struct {
	Plan  dsconfig.Plan
	Model gpt.Config
	// Init are the initial fp32 parameters; nil draws them from Seed.
	Init    []float32
	Seed    uint64
	Batches Batches
	SeqLen  int // tokens per sample; ≤ Model.Context
	Steps   int // optimizer steps
	// ReturnParams makes Run return a copy of the final fp32 parameters.
	ReturnParams bool
	Acct         *mem.Accountant
	Gemm         model.Gemmer
	// Checkpoint recomputes each block in backward (activation
	// checkpointing); CPUCheckpoint keeps the saved inputs in host memory.
	Checkpoint, CPUCheckpoint bool
	Version                   zero.Version
	Workers                   int
}

// Record is what one optimizer step did (one line of --json-log).
type Record struct {
	Step       int64            `json:"step"`
	Loss       float64          `json:"loss"` // mean of the micro-step losses
	LR         float64          `json:"lr"`
	LossScale  float64          `json:"loss_scale"`
	GradNorm   float64          `json:"grad_norm"`
	Skipped    bool             `json:"skipped"`
	TokensPerS float64          `json:"tokens_per_s"`
	StepTimeS  float64          `json:"step_time_s"`
	Peak       map[string]int64 `json:"peak_bytes"` // device-tier peak by category, and "total"
	PeakHost   int64            `json:"peak_pinned_host_bytes"`
}

// Run trains for cfg.Steps steps, calling onStep after each. With
// cfg.ReturnParams it returns a copy of the final fp32 master parameters.
func Run(cfg Config, onStep func(Record) error) ([]float32, error) {
	p := cfg.Plan
	if cfg.SeqLen < 1 || cfg.SeqLen > cfg.Model.Context {
		return nil, fmt.Errorf("sequence length %d does not fit the model's context of %d tokens; use --seq ≤ %d", cfg.SeqLen, cfg.Model.Context, cfg.Model.Context)
	}
	if p.WorldSize != 1 {
		return nil, fmt.Errorf("this build of dszero trains on one rank; --world-size/--nproc %d is not supported yet", p.WorldSize)
	}
	layout := cfg.Model.WithDefaults().Layout()
	opts := zero.Options{Acct: cfg.Acct, Layout: &layout, Init: cfg.Init, Workers: cfg.Workers, Version: cfg.Version}
	if cfg.Init == nil {
		opts.InitFunc = func(master []float32) { layout.InitRange(cfg.Seed, master, 0) }
	} else if len(cfg.Init) != layout.Numel {
		return nil, fmt.Errorf("initial weights have %d elements, the model %d", len(cfg.Init), layout.Numel)
	}
	eng, err := zero.NewEngine(p, opts)
	if err != nil {
		return nil, err
	}
	defer eng.Close()
	m, err := gpt.New(cfg.Model, gpt.Options{Gemm: cfg.Gemm, Acct: cfg.Acct, Hooks: eng.Strategy(), Checkpoint: cfg.Checkpoint,
		CPUCheckpoint: cfg.CPUCheckpoint, Round: eng.Round(), Workers: cfg.Workers})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if err := m.Bind(eng.ModelBuffers()); err != nil {
		return nil, err
	}
	B, T := int(p.Batch.TrainMicroBatchSizePerGPU), cfg.SeqLen
	gas := int(p.Batch.GradientAccumulationSteps)
	inputs, targets := make([]int32, B*T), make([]int32, B*T)
	for s := 0; s < cfg.Steps; s++ {
		start := time.Now()
		sum := 0.0
		for micro := 0; micro < gas; micro++ {
			cfg.Batches.Micro(s, micro, 0, inputs, targets)
			loss, err := m.Forward(inputs, B, targets)
			if err != nil {
				return nil, fmt.Errorf("step %d, micro-step %d: %w", s+1, micro, err)
			}
			if math.IsNaN(float64(loss)) && p.Precision.DType != "fp16" {
				return nil, fmt.Errorf("step %d: the loss is NaN: training diverged (lower the learning rate)", s+1)
			}
			sum += float64(loss)
			if err := m.Backward(eng.GradScale()); err != nil {
				return nil, fmt.Errorf("step %d, micro-step %d: %w", s+1, micro, err)
			}
		}
		st, err := eng.Step()
		if err != nil {
			return nil, err
		}
		dt := time.Since(start).Seconds()
		rec := Record{Step: st.Step, Loss: sum / float64(gas), LR: st.LR, LossScale: st.LossScale, GradNorm: st.GradNorm,
			Skipped: st.Skipped, StepTimeS: dt, TokensPerS: float64(B*T*gas) / dt, Peak: peaks(cfg.Acct)}
		rec.PeakHost = cfg.Acct.Snapshot().PeakTotal[mem.PinnedHost]
		if onStep != nil {
			if err := onStep(rec); err != nil {
				if errors.Is(err, ErrStop) {
					break
				}
				return nil, err
			}
		}
	}
	if !cfg.ReturnParams {
		return nil, nil
	}
	return append([]float32(nil), eng.MasterParams()...), nil
}

// ErrStop, returned by onStep, ends training early without an error.
var ErrStop = errors.New("stop")

func peaks(a *mem.Accountant) map[string]int64 {
	s := a.Snapshot()
	out := map[string]int64{"total": s.PeakTotal[mem.Device]}
	for _, c := range mem.Categories() {
		if v := s.PeakBytes(mem.Device, c); v > 0 {
			out[c.String()] = v
		}
	}
	return out
}
