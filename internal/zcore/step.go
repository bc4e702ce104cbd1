package zcore

import (
	"context"
	"errors"
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero/optim"
)

// StepInput is what the engine hands a strategy at a step.
type StepInput struct {
	LR        float64
	Betas     *[2]float64 // set when the scheduler cycles momentum
	LossScale float64     // 1 unless fp16
	// CheckOverflow skips the step when a gradient is inf or NaN (fp16, and
	// bf16 with check_grad_overflow).
	CheckOverflow bool
}

// SetHyperparams sets the step's lr on opt, and its betas when the
// scheduler cycles momentum and opt has betas.
func (in StepInput) SetHyperparams(opt optim.Optimizer) {
	opt.SetLR(in.LR)
	if in.Betas != nil {
		if bs, ok := opt.(optim.BetaSetter); ok {
			bs.SetBetas(*in.Betas)
		}
	}
}

// StepResult is what happened at a step.
type StepResult struct {
	GradNorm float64 // global gradient norm before clipping, unscaled (-1 on overflow)
	Overflow bool    // the step was skipped
}

// Options are a strategy's dependencies, built once by the engine from the
// plan. Every strategy takes the same Options; what a stage does with them
// is the stage's business, never a flag here.
type Options struct {
	// Ctx bounds every collective the strategy issues (the communicator
	// has its own timeout too). Nil means context.Background().
	Ctx context.Context
	// Comm is the data-parallel group; nil means a world of one (Solo).
	Comm   comm.Comm
	Acct   *mem.Accountant
	Layout *model.Layout
	// Init are the initial fp32 parameters (copied), Layout.Numel of them;
	// or InitFunc writes them into a full fp32 buffer of Layout.Numel
	// elements that the strategy owns (no second copy of the model).
	Init     []float32
	InitFunc func(full []float32)
	// InitRange, preferred to Init and InitFunc by stage 3, writes
	// elements [lo, lo+len(dst)) of the initial flat parameters into dst,
	// so that a stage holding partitions never builds the whole model
	// (DeepSpeed's zero.Init; reading a checkpoint's slices). The stages
	// that hold the whole model take Init or InitFunc.
	InitRange func(dst []float32, lo int) error
	// Round emulates a 16-bit working precision (half.RoundBF16, ...); nil
	// for fp32.
	Round func([]float32)
	// Clip is gradient_clipping (0: none).
	Clip float64
	// Average is how gradients are averaged around the SUM reduction.
	Average Averaging
	// BucketSize is reduce_bucket_size in elements: gradients are reduced
	// in buckets of at most this many, and a buffer or unit larger than
	// it in calls of at most this many. Zero, as in DeepSpeed, makes every
	// unit a bucket of its own, reduced in one call.
	BucketSize int
	// Overlap is overlap_comm: reductions issued during backward run
	// while backward continues (stage 2).
	Overlap bool
	// NewOptimizer builds the optimizer for n elements (the rank's
	// partition, or the whole model at stage 0).
	NewOptimizer func(n int) (optim.Optimizer, error)
	Pool         *optim.Pool
	// DTypes are the dtypes the gradients are kept, accumulated and
	// reduced in (DeepSpeedGradDTypes); the zero value is fp32 throughout.
	// Stages 0, 1 and 2 follow them (see Averaging.In).
	DTypes GradDTypes
	// RoundRobin is round_robin_gradients: stages 1 and 2 flatten the
	// parameters in DeepSpeed's round-robin order (FlatOrder).
	RoundRobin bool
	// OptimizerTier is where the fp32 master and gradient partitions and
	// the optimizer state live: mem.Device, or mem.PinnedHost with
	// offload_optimizer cpu (ZeRO-Offload; the optimizer's own state is
	// allocated by NewOptimizer, built for the same tier).
	OptimizerTier mem.Tier
}

// Check validates o and fills its defaults (Ctx, Comm, Average). It is
// called by every strategy constructor.
func (o *Options) Check(stage string) error {
	if o.Acct == nil || o.Layout == nil || o.NewOptimizer == nil {
		panic(stage + ": Options need Acct, Layout and NewOptimizer")
	}
	if o.InitFunc == nil && o.InitRange == nil && len(o.Init) != o.Layout.Numel {
		return fmt.Errorf("%s: %d initial parameters for a model of %d", stage, len(o.Init), o.Layout.Numel)
	}
	if o.Ctx == nil {
		o.Ctx = context.Background()
	}
	if o.Comm == nil {
		o.Comm = Solo()
	}
	if o.Average.World == 0 {
		o.Average = EngineAveraging(o.Comm.Size(), false, 1)
	}
	if o.Average.World != o.Comm.Size() {
		return fmt.Errorf("%s: gradients averaged over %d ranks on a communicator of %d", stage, o.Average.World, o.Comm.Size())
	}
	if o.BucketSize < 0 {
		return fmt.Errorf("%s: negative bucket size %d", stage, o.BucketSize)
	}
	return nil
}

// Chunks calls fn for consecutive ranges [lo, hi) of [0, n), each at most
// size elements (all of [0, n) in one range when size is 0): the
// collective calls of a bucketed reduction.
func Chunks(n, size int, fn func(lo, hi int)) {
	if size <= 0 || size > n {
		size = n
	}
	for lo := 0; lo < n; lo += size {
		fn(lo, min(lo+size, n))
	}
}

// AllReduce sums buf across c's ranks in calls of at most size elements
// (queued together, then waited for), in place. hs is the caller's
// scratch for the calls' handles: AllReduce returns it emptied, to be
// passed again at the next step (no allocation per step).
func AllReduce(ctx context.Context, c comm.Comm, buf []float32, size int, hs []comm.Handle) ([]comm.Handle, error) {
	if c.Size() == 1 {
		return hs, nil
	}
	hs = hs[:0]
	Chunks(len(buf), size, func(lo, hi int) {
		hs = append(hs, c.AllReduce(ctx, comm.F32(buf[lo:hi]), comm.Sum))
	})
	err := comm.WaitAll(hs...)
	clear(hs)
	return hs[:0], err
}

// ErrDiverged is a step's gradient norm that is not finite outside fp16
// (where an overflow skips the step instead): the run cannot go on.
var ErrDiverged = errors.New("training diverged (lower the learning rate, or use bf16/fp32)")

// Diverged is the step error for a non-finite gradient norm, norm as the
// stage computed it.
func Diverged(norm float64) error {
	return fmt.Errorf("the gradient norm is %v: %w", norm, ErrDiverged)
}
