package conformance

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/train"
	"github.com/dszero/dszero/zero"
)

// trained is what dszero's run of a case produced, from step From+1 on.
type trained struct {
	From  int              // the steps before the run (those of the checkpoint it resumed)
	Micro [][][]float32    // [step-From][rank][micro]
	Loss  []float64        // per step: the mean over ranks and micro-steps, summed in micro-batch order
	Stats []zero.StepStats // rank 0's
	Final []float32        // the full fp32 master parameters after the last step
	Warns []string
}

// ckpt says what a run saves and what it resumes from.
type ckpt struct {
	dir    string // where it saves (checkpoint.Save's dir)
	saveAt []int  // the global steps after which it saves, tag global_step{N}
	// loadDir/loadTag is the checkpoint it starts from ("": the initial
	// weights); training goes on from its global step.
	loadDir, loadTag string
}

// train runs the case's plan on plan.WorldSize in-process ranks for steps
// steps, through train.Run (the one training loop). Step s, micro-step m
// of rank r reads micro-batch mb = m·world + r: samples s·G + mb·B … + B−1
// (mod the number of samples), G = B·GAS·world — the harness's layout.
func (a *arch) train(plan dsconfig.Plan, steps int, v zero.Version, init []float32, ck ckpt) (trained, error) {
	world := plan.WorldSize
	gas := int(plan.Batch.GradientAccumulationSteps)
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum}) // pure Go: the same numbers on every machine
	if err != nil {
		return trained{}, err
	}
	from := 0
	if ck.loadTag != "" {
		if _, err := fmt.Sscanf(ck.loadTag, "global_step%d", &from); err != nil || from < 0 || from >= steps {
			return trained{}, fmt.Errorf("checkpoint tag %q: want global_step<N> with N below %d", ck.loadTag, steps)
		}
	}
	devs := make([]train.Device, world)
	for r := range devs {
		devs[r] = train.Device{Acct: mem.NewAccountant(r), Gemm: gemm}
	}
	mb := a.builder()
	out := trained{From: from}
	// The batches' world is the data-parallel one: with sequence_parallel_size
	// sp the sp ranks of a group read data-parallel rank r/sp's samples
	// (train's seqpar.go), as the generator's rank_train.py does.
	cfg := train.Config{Plan: plan, Model: mb, Init: init, Batches: caseBatches{a: a, gas: gas, world: int(plan.DataParallelSize())},
		SeqLen: a.seqLen, Steps: steps, ReturnParams: true, Devices: devs, Workers: 1, Version: v, Timeout: time.Minute,
		LoadTag: ck.loadTag, SaveSteps: ck.saveAt,
		Warn: func(w string) { out.Warns = append(out.Warns, w) },
		// NVMe swap files go to memory: the case compares numerics.
		EngineOptions: func(r int, o *zero.Options) error {
			swap := nvme.NewMemFS(0)
			for _, p := range []string{plan.Zero.OffloadOptimizer.NVMePath, plan.Zero.OffloadParam.NVMePath} {
				if err := mkdirAll(swap, p); err != nil {
					return err
				}
			}
			o.SwapFS = swap
			return nil
		}}
	if ck.loadTag != "" {
		cfg.LoadDir = ck.loadDir
	}
	if len(ck.saveAt) > 0 {
		cfg.SaveDir = ck.dir
	}
	out.Final, err = train.Run(cfg, func(rec train.Record) error {
		if len(out.Stats) == 0 && rec.Step != int64(from)+1 {
			return fmt.Errorf("checkpoint %s/%s: resumed at global step %d, want %d", ck.loadDir, ck.loadTag, rec.Step-1, from)
		}
		out.Micro = append(out.Micro, rec.Micro)
		out.Loss = append(out.Loss, rec.Loss)
		out.Stats = append(out.Stats, zero.StepStats{Step: rec.Step, LR: rec.LR, LossScale: rec.LossScale,
			GradNorm: rec.GradNorm, Skipped: rec.Skipped})
		return nil
	})
	if err != nil {
		return trained{}, err
	}
	return out, nil
}

// caseBatches serves the case's samples: micro-batch mb = micro·world +
// rank of step s holds samples s·G + mb·B … + B−1 (mod the number of
// samples), G = B·GAS·world, where world and rank are data-parallel ones
// (the world size over sequence_parallel_size).
type caseBatches struct {
	a          *arch
	gas, world int
}

func (c caseBatches) Batch(step, micro, rank int, b *model.Batch) error {
	a, B := c.a, b.B
	first := step*B*c.gas*c.world + (micro*c.world+rank)*B
	switch a.name {
	case "gpt", "llama":
		T, w := a.seqLen, a.seqLen+1
		if len(b.Tokens) != B*T {
			b.Tokens, b.Targets = make([]int32, B*T), make([]int32, B*T)
		}
		for i := 0; i < B; i++ {
			row := a.tokens[((first+i)%a.samples)*w:][:w]
			for t := 0; t < T; t++ {
				b.Tokens[i*T+t], b.Targets[i*T+t] = int32(row[t]), int32(row[t+1])
			}
		}
	case "mlp":
		nx, ny := a.mlp.Sizes[0], a.mlp.Sizes[len(a.mlp.Sizes)-1]
		if len(b.X) != B*nx {
			b.X, b.Y = make([]float32, B*nx), make([]float32, B*ny)
		}
		for i := 0; i < B; i++ {
			n := (first + i) % a.samples
			copy(b.X[i*nx:(i+1)*nx], a.x[n*nx:])
			copy(b.Y[i*ny:(i+1)*ny], a.y[n*ny:])
		}
	default:
		return fmt.Errorf("no data for %s", a.name)
	}
	return nil
}

// mkdirAll makes the directory path and its parents in fsys (the
// reference's nvme_path, which the case's machine had).
func mkdirAll(fsys *nvme.MemFS, path string) error {
	if path == "" {
		return nil
	}
	path = filepath.Clean(path)
	if up := filepath.Dir(path); up != path {
		if err := mkdirAll(fsys, up); err != nil {
			return err
		}
	}
	return fsys.Mkdir(path)
}
