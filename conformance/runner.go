package conformance

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/model/mlp"
	"github.com/dszero/dszero/nvme"
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

// network is one rank's model, bound to the engine's buffers.
type network interface {
	Bind(params, grads []float32) error
	OverwriteGrads()
	Backward(dlossScale float32) error
	Close()
}

// train runs the case's plan on plan.WorldSize in-process ranks for steps
// steps. Step s, micro-step m of rank r reads micro-batch mb = m·world + r:
// samples s·G + mb·B … + B−1 (mod the number of samples), G = B·GAS·world
// — the harness's layout.
func (a *arch) train(plan dsconfig.Plan, steps int, v zero.Version, init []float32, ck ckpt) (trained, error) {
	world := plan.WorldSize
	B, gas := int(plan.Batch.TrainMicroBatchSizePerGPU), int(plan.Batch.GradientAccumulationSteps)
	G := B * gas * world
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
	out := trained{From: from, Micro: make([][][]float32, steps-from), Final: make([]float32, a.layout.Numel)}
	for s := range out.Micro {
		out.Micro[s] = make([][]float32, world)
		for r := range out.Micro[s] {
			out.Micro[s][r] = make([]float32, gas)
		}
	}
	err = inproc.New(world, inproc.Options{Timeout: time.Minute}).Run(func(c comm.Comm) error {
		r := c.Rank()
		acct := mem.NewAccountant(r)
		layout := a.layout
		// NVMe swap files go to memory: the case compares numerics.
		swap := nvme.NewMemFS(0)
		for _, p := range []string{plan.Zero.OffloadOptimizer.NVMePath, plan.Zero.OffloadParam.NVMePath} {
			if err := mkdirAll(swap, p); err != nil {
				return err
			}
		}
		opts := zero.Options{Acct: acct, Layout: &layout, Init: init, Workers: 1, Version: v, Comm: c, Ctx: context.Background(),
			SwapFS: swap}
		if r == 0 {
			opts.Warn = func(w string) { out.Warns = append(out.Warns, w) }
		}
		eng, err := zero.NewEngine(plan, opts)
		if err != nil {
			return err
		}
		defer eng.Close()
		co := checkpoint.Options{Layout: &layout, Comm: c}
		if ck.loadTag != "" {
			if err := checkpoint.Load(ck.loadDir, ck.loadTag, eng, co); err != nil {
				return err
			}
			if got := eng.GlobalSteps(); got != int64(from) {
				return fmt.Errorf("checkpoint %s/%s: global_steps %d, want %d", ck.loadDir, ck.loadTag, got, from)
			}
		}
		net, forward, err := a.rankModel(eng, acct, gemm, B)
		if err != nil {
			return err
		}
		defer net.Close()
		if err := net.Bind(eng.ModelBuffers()); err != nil {
			return err
		}
		for s := from; s < steps; s++ {
			if eng.OverwriteGrads() {
				net.OverwriteGrads()
			}
			for m := 0; m < gas; m++ {
				first := s*G + (m*world+r)*B
				loss, err := forward(first)
				if err != nil {
					return fmt.Errorf("step %d, micro-step %d: %w", s+1, m, err)
				}
				out.Micro[s-from][r][m] = loss
				if err := net.Backward(eng.GradScale()); err != nil {
					return fmt.Errorf("step %d, micro-step %d: %w", s+1, m, err)
				}
			}
			st, err := eng.Step()
			if err != nil {
				return err // it names the step
			}
			if r == 0 {
				out.Stats = append(out.Stats, st)
			}
			if slices.Contains(ck.saveAt, s+1) {
				if err := checkpoint.Save(ck.dir, "", eng, co); err != nil {
					return fmt.Errorf("step %d: %w", s+1, err)
				}
			}
		}
		full := make([]float32, a.layout.Numel)
		if err := eng.GatherMaster(full); err != nil {
			return err
		}
		if r == 0 {
			copy(out.Final, full)
		}
		return nil
	})
	if err != nil {
		return trained{}, err
	}
	for s := range out.Micro {
		sum := 0.0
		for m := 0; m < gas; m++ {
			for r := 0; r < world; r++ {
				sum += float64(out.Micro[s][r][m])
			}
		}
		out.Loss = append(out.Loss, sum/float64(gas*world))
	}
	return out, nil
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

// rankModel builds a rank's network and its forward over the B samples
// from sample first on (modulo the data).
func (a *arch) rankModel(eng *zero.Engine, acct *mem.Accountant, gemm model.Gemmer, B int) (network, func(first int) (float32, error), error) {
	switch a.name {
	case "gpt":
		m, err := gpt.New(a.gpt, gpt.Options{Gemm: gemm, Acct: acct, Hooks: eng.Strategy(), Round: eng.Round(), Workers: 1})
		if err != nil {
			return nil, nil, err
		}
		T, w := a.seqLen, a.seqLen+1
		in, tg := make([]int32, B*T), make([]int32, B*T)
		return m, func(first int) (float32, error) {
			for b := 0; b < B; b++ {
				row := a.tokens[((first+b)%a.samples)*w:][:w]
				for t := 0; t < T; t++ {
					in[b*T+t], tg[b*T+t] = int32(row[t]), int32(row[t+1])
				}
			}
			return m.Forward(in, B, tg)
		}, nil
	case "mlp":
		m, err := mlp.New(a.mlp, mlp.Options{Gemm: gemm, Acct: acct, Hooks: eng.Strategy(), Round: eng.Round()})
		if err != nil {
			return nil, nil, err
		}
		nx, ny := a.mlp.Sizes[0], a.mlp.Sizes[len(a.mlp.Sizes)-1]
		x, y := make([]float32, B*nx), make([]float32, B*ny)
		return m, func(first int) (float32, error) {
			for b := 0; b < B; b++ {
				i := (first + b) % a.samples
				copy(x[b*nx:(b+1)*nx], a.x[i*nx:])
				copy(y[b*ny:(b+1)*ny], a.y[i*ny:])
			}
			return m.Forward(x, B, y)
		}, nil
	}
	return nil, nil, fmt.Errorf("no network for %s", a.name)
}
