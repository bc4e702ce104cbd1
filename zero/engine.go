package zero

import (
	"context"
	"errors"
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/offload"
	"github.com/dszero/dszero/stage1"
	"github.com/dszero/dszero/stage2"
	"github.com/dszero/dszero/stage3"
	"github.com/dszero/dszero/zero/lossscale"
	"github.com/dszero/dszero/zero/lrsched"
	"github.com/dszero/dszero/zero/optim"
	"github.com/dszero/dszero/zero/partition"
)

// Version selects the DeepSpeed release whose semantics are reproduced
// where releases differ (the first step's lr, loss-scale growth).
type Version = lrsched.Version

// Options are an Engine's dependencies.
type Options struct {
	Acct   *mem.Accountant
	Layout *model.Layout
	Init   []float32 // initial fp32 parameters, layout.Numel of them
	// InitFunc, instead of Init, writes the initial parameters into the
	// rank's master buffer (random initialization without a second copy).
	InitFunc func(master []float32)
	// Workers bounds the optimizer's goroutines; 0 means GOMAXPROCS.
	Workers int
	// Version is the DeepSpeed release to follow (default 0.19.5).
	Version Version
	// Comm is the rank's data-parallel communicator; its size must be the
	// plan's WorldSize. Nil means a world of one rank.
	Comm comm.Comm
	// Ctx bounds every collective the engine issues; nil means
	// context.Background() (the communicator's own timeout still holds).
	Ctx context.Context
	// Warn, when set, receives the engine's warnings: settings it accepts
	// but runs differently from DeepSpeed (each names the setting), and
	// stage 3's trace warnings.
	Warn func(msg string)
	// InitRange, instead of Init or InitFunc, writes elements
	// [lo, lo+len(dst)) of the initial parameters: stage 3 initializes
	// (or loads) only the rank's partitions with it; the other stages call
	// it once for the whole model.
	InitRange func(dst []float32, lo int) error
	// KeepAfterForward and WrapMinNumParams are FSDP's
	// reshard_after_forward false and size-based wrap policy at stage 3
	// (a ds_config has neither; see stage3.Config).
	KeepAfterForward bool
	WrapMinNumParams int
	// ShardGroupSize, at stage 3, shards the model within groups of this
	// many consecutive ranks and replicates it across the groups (FSDP
	// HYBRID_SHARD); 0 takes the plan's mics_shard_size (DeepSpeed MiCS).
	ShardGroupSize int
	// LocalSize is the ranks per node (DeepSpeed's accelerator
	// device_count), for ZeRO++ qgZ's hierarchy; 0 means 1, each rank a
	// node of its own (DeepSpeed's CPU accelerator with LOCAL_SIZE=1).
	LocalSize int
	// SwapFS is the filesystem of NVMe offload's swap files (nil: the
	// operating system's, with O_DIRECT); tests inject faults through it.
	SwapFS nvme.FS
	// Trace, when set, hears stage 3's data movement as it is issued
	// (stage3.Config.Trace).
	Trace func(event string)
}

// Engine is one rank's training state: strategy, optimizer, scheduler and
// loss scaler, configured by a dsconfig.Plan.
type Engine struct {
	plan     dsconfig.Plan
	strategy Strategy
	sched    lrsched.Scheduler // nil without a scheduler block
	scaler   lossscale.Scaler
	overflow bool // the last step overflowed (and was skipped)
	pool     *optim.Pool
	baseLR   float64

	globalSteps  int64 // optimizer steps taken, skipped ones included
	skippedSteps int64
	betas        [2]float64 // the step's cycled momentum, where StepInput.Betas points
}

// StepStats describe one optimizer step.
type StepStats struct {
	Step      int64   // 1-based global step
	LR        float64 // the lr the step used
	LossScale float64 // the loss scale the step's gradients carried
	GradNorm  float64 // unscaled global norm before clipping; -1 when skipped
	Skipped   bool    // overflow: no update
}

// NewEngine builds a rank's engine from a plan, with the strategy of
// plan.Zero.Stage. Features the plan asks for that dszero does not run are
// errors here, by name; settings it runs differently from DeepSpeed
// without changing the numbers are reported through o.Warn.
func NewEngine(plan dsconfig.Plan, o Options) (*Engine, error) {
	warns, err := CheckPlan(plan)
	if err != nil {
		return nil, err
	}
	c := o.Comm
	if c == nil {
		c = zcore.Solo()
	}
	if c.Size() != plan.WorldSize {
		return nil, fmt.Errorf("%s: the plan's batch arithmetic is for %d ranks, the communicator has %d: compile the config with WorldSize %d",
			plan.File, plan.WorldSize, c.Size(), c.Size())
	}
	if o.Warn != nil {
		for _, w := range warns {
			o.Warn(w)
		}
	}
	e := &Engine{plan: plan, pool: optim.NewPool(o.Workers), baseLR: plan.Optimizer.LR}
	if e.scaler, err = NewLossScaler(plan, o.Version); err != nil {
		e.pool.Close()
		return nil, err
	}
	if e.sched, err = NewScheduler(plan, o.Version); err != nil {
		e.pool.Close()
		return nil, err
	}
	dtypes, err := zcore.DeepSpeedGradDTypes(plan.Zero.Stage, plan.Precision.DType, plan.DataTypes.GradAccumDType, plan.CommunicationDataType)
	if err != nil {
		e.pool.Close()
		return nil, fmt.Errorf("%s: %w", plan.File, err)
	}
	alloc := optim.Alloc{Acct: o.Acct, Tier: optimizerTier(plan)}
	so := StrategyOptions{Ctx: o.Ctx, Comm: c, Acct: o.Acct, Layout: o.Layout, Init: o.Init, InitFunc: o.InitFunc,
		Round: e.Round(), Clip: plan.GradientClipping, Average: averaging(plan),
		DTypes:     dtypes,
		RoundRobin: plan.Zero.RoundRobinGradients,
		BucketSize: int(plan.Zero.ReduceBucketSize), Overlap: plan.Zero.OverlapComm, Pool: e.pool,
		NewOptimizer: func(n int) (optim.Optimizer, error) {
			if isOneBit(plan) {
				return newOneBitOptimizer(plan, o.Ctx, c, o.Layout, n, alloc)
			}
			return newOptimizer(plan, n, alloc, e.pool)
		}}
	var initErr error
	if o.InitRange != nil && o.Init == nil && o.InitFunc == nil {
		so.InitRange = o.InitRange
		so.InitFunc = func(full []float32) { initErr = o.InitRange(full, 0) }
	}
	so.OptimizerTier = optimizerTier(plan)
	// The one place a stage is chosen; CheckPlan has refused the rest.
	switch plan.Zero.Stage {
	case 0:
		var s0 *Stage0
		if s0, err = NewStage0(so); err == nil {
			e.strategy = s0
			if FP16WrapperOf(plan) != NoFP16Wrapper && !isOneBit(plan) { // newOneBitOptimizer runs the 1-bit ones' own
				s0.InitializeOptimizerStates()
			}
		}
	case 1:
		e.strategy, err = stage1.New(so)
	case 2:
		e.strategy, err = stage2.New(so)
	case 3:
		e.strategy, err = newStage3(plan, o, so, c)
	}
	if err == nil && initErr != nil {
		e.strategy.Close()
		err = fmt.Errorf("initial parameters: %w", initErr)
	}
	if err != nil {
		e.pool.Close()
		return nil, err
	}
	return e, nil
}

// newStage3 builds stage 3, on shard groups when the plan or the options
// ask for hybrid sharding: the communicator is split (a collective) into
// the rank's shard group — consecutive ranks — and its replica group —
// the ranks at the same place in the other groups.
func newStage3(plan dsconfig.Plan, o Options, so StrategyOptions, c comm.Comm) (*stage3.Strategy, error) {
	cfg := stage3Config(plan, o)
	cfg.Partial = partialOffload(plan, o.Version, so.Acct, so.Pool)
	cfg.Swap, cfg.ParamSwap = offload.Swappers(plan, c.Rank(), o.SwapFS, o.Acct)
	if h := int(plan.Zero.HPZPartitionSize); h > 1 && h < c.Size() {
		if c.Size()%h != 0 {
			return nil, fmt.Errorf("%s: zero_hpz_partition_size %d does not divide the world of %d ranks", plan.File, h, c.Size())
		}
		ctx := o.Ctx
		if ctx == nil {
			ctx = context.Background()
		}
		var err error
		if cfg.HPZ, err = c.Split(ctx, c.Rank()/h, c.Rank()); err != nil {
			return nil, fmt.Errorf("stage 3: forming hpZ groups of %d ranks: %w", h, err)
		}
	}
	if plan.Zero.QuantizedGradients {
		ctx := o.Ctx
		if ctx == nil {
			ctx = context.Background()
		}
		var err error
		if cfg.QuantizedGradients, err = qgzGroups(ctx, c, o.LocalSize); err != nil {
			return nil, err
		}
	}
	g := o.ShardGroupSize
	if g == 0 && plan.Zero.MiCSShardSize > 0 {
		g = int(plan.Zero.MiCSShardSize)
	}
	if g <= 0 || g >= c.Size() {
		return stage3.New(so, cfg)
	}
	if c.Size()%g != 0 {
		return nil, fmt.Errorf("%s: shard groups of %d ranks do not divide the world of %d (mics_shard_size must divide the number of ranks)", plan.File, g, c.Size())
	}
	ctx := o.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	shard, err := c.Split(ctx, c.Rank()/g, c.Rank())
	if err != nil {
		return nil, fmt.Errorf("stage 3: forming shard groups of %d ranks: %w", g, err)
	}
	if cfg.Replicas, err = c.Split(ctx, c.Rank()%g, c.Rank()); err != nil {
		return nil, fmt.Errorf("stage 3: forming replica groups across the shard groups: %w", err)
	}
	so.Comm, so.Average = shard, zcore.GroupAveraging(c.Size(), g)
	return stage3.New(so, cfg)
}

// optimizerTier is where the optimizer state lives: the pinned host with
// offload_optimizer cpu at stages 1 to 3 (ZeRO-Offload) — and with nvme at
// stage 3, while a sub-group is read in for its step — the device
// otherwise.
func optimizerTier(plan dsconfig.Plan) mem.Tier {
	if plan.Zero.Stage >= 1 && plan.Zero.OffloadOptimizer.Device != dsconfig.OffloadNone {
		return mem.PinnedHost
	}
	return mem.Device
}

// partialOffload is offload_optimizer.ratio below 1 at stage 3 (device
// cpu; CheckPlan refuses the rest), as DeepSpeed's
// DeepSpeedZeroOptimizer_Stage3 runs it: the sub-groups the release's rule
// keeps on the device (partition.OffloadOrder) are stepped by a backup
// torch.optim.AdamW built from the host optimizer's param group — lr,
// betas, eps, weight_decay, amsgrad — that the scheduler never updates.
// Nil without partial offload.
func partialOffload(plan dsconfig.Plan, v Version, acct *mem.Accountant, pool *optim.Pool) *stage3.PartialOffload {
	off := plan.Zero.OffloadOptimizer
	if plan.Zero.Stage != 3 || off.Device != dsconfig.OffloadCPU || off.Ratio >= 1 {
		return nil
	}
	order := partition.OffloadLast
	if v == lrsched.DeepSpeed0145 {
		order = partition.OffloadFirst
	}
	o := plan.Optimizer
	return &stage3.PartialOffload{Ratio: off.Ratio, Order: order, NewOptimizer: func(n int) (optim.Optimizer, error) {
		c := optim.DefaultAdamConfig(optim.TorchAdamW)
		c.LR, c.Betas, c.Eps, c.WeightDecay, c.AMSGrad = o.LR, o.Betas, o.Eps, o.WeightDecay, o.AMSGrad
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("zero_optimization.offload_optimizer.ratio: the backup torch.optim.AdamW: %w", err)
		}
		return optim.NewAdam(c, n, optim.Alloc{Acct: acct, Tier: mem.Device}, pool)
	}}
}

// stage3Config is stage 3's part of the plan (and of FSDP's knobs).
func stage3Config(plan dsconfig.Plan, o Options) stage3.Config {
	z := plan.Zero
	c := stage3.Config{
		PrefetchBucketSize: int(z.PrefetchBucketSize), MaxLiveParameters: int(z.MaxLiveParameters),
		MaxReuseDistance: int(z.MaxReuseDistance), ParamPersistenceThreshold: z.ParamPersistenceThreshold,
		ModelPersistenceThreshold: z.ModelPersistenceThreshold, SubGroupSize: int(z.SubGroupSize),
		KeepAfterForward: o.KeepAfterForward, Wrap: stage3.WrapPolicy{MinNumParams: o.WrapMinNumParams}, Warn: o.Warn, Trace: o.Trace,
		OptimizerTier: optimizerTier(plan), ParamTier: mem.Device,
	}
	if z.OffloadParam.Device == dsconfig.OffloadCPU {
		c.ParamTier = mem.PinnedHost
	}
	if !plan.PrescaleGradients {
		c.PredivideFactor = plan.GradientPredivideFactor
	}
	c.QuantizedWeights = z.QuantizedWeights
	return c
}

// qgzGroups forms ZeRO++ qgZ's groups (DeepSpeed's
// _get_local_all_to_all_group, two collectives): the rank's node of
// LocalSize ranks and its peers across the nodes; nil with one node,
// where DeepSpeed reduce-scatters instead.
func qgzGroups(ctx context.Context, c comm.Comm, local int) (*stage3.QGZ, error) {
	if local <= 0 {
		local = 1
	}
	if local >= c.Size() {
		return nil, nil
	}
	if c.Size()%local != 0 {
		return nil, fmt.Errorf("zero_optimization.zero_quantized_gradients: %d ranks per node do not divide the world of %d ranks", local, c.Size())
	}
	if local == 1 {
		// One rank per node: the nodes' group is the world, and its traffic
		// is counted with the world's.
		return &stage3.QGZ{Global: c}, nil
	}
	var q stage3.QGZ
	var err error
	if q.Local, err = c.Split(ctx, c.Rank()/local, c.Rank()); err != nil {
		return nil, fmt.Errorf("stage 3: forming qgZ's node groups of %d ranks: %w", local, err)
	}
	if q.Global, err = c.Split(ctx, c.Rank()%local, c.Rank()); err != nil {
		return nil, fmt.Errorf("stage 3: forming qgZ's groups across the nodes: %w", err)
	}
	return &q, nil
}

// averaging is the plan's gradient averaging (see zcore.Averaging):
// ZeRO-1/2's own with reduce_scatter, the engine's otherwise.
func averaging(plan dsconfig.Plan) zcore.Averaging {
	if plan.Zero.Stage == 3 || plan.Zero.Stage >= 1 && plan.Zero.ReduceScatter {
		return zcore.ZeroAveraging(plan.WorldSize)
	}
	return zcore.EngineAveraging(plan.WorldSize, plan.PrescaleGradients, plan.GradientPredivideFactor)
}

// CheckPlan is what NewEngine checks in a plan before it allocates
// anything, for a launcher to check once before it starts the ranks. It
// refuses, by name, what dszero does not run — the unsupported features
// the config compiler found, and what the stages do not run and would
// change the numbers — and lists as warnings what the stages run
// differently from DeepSpeed without changing the numbers (or only at
// 16-bit precision).
func CheckPlan(plan dsconfig.Plan) (warns []string, err error) {
	if unsup := plan.Unsupported(); len(unsup) > 0 {
		var errs []error
		for _, d := range unsup {
			errs = append(errs, errors.New(d.String()))
		}
		return nil, fmt.Errorf("the config asks for features dszero does not run yet:\n%w", errors.Join(errs...))
	}
	if plan.Optimizer.Type == "" {
		return nil, fmt.Errorf("%s: no optimizer: add an optimizer block or pass HF training flags", plan.File)
	}
	z, world := plan.Zero, plan.WorldSize
	var errs []error
	refuse := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if z.Stage == 3 && z.HPZPartitionSize > 1 && z.MiCSShardSize > 0 {
		refuse("zero_optimization: zero_hpz_partition_size and mics_shard_size are two ways of using groups of ranks; DeepSpeed does not combine them, use one")
	}
	switch off := z.OffloadOptimizer; {
	case z.Stage == 0 || off.Device == dsconfig.OffloadNone:
	case z.Stage < 3 && off.Device == dsconfig.OffloadNVMe:
		refuse(`zero_optimization.offload_optimizer.device "nvme" at stage %d: DeepSpeed offloads to NVMe at stage 3 only (ZeRO-Infinity); use "cpu", or stage 3`, z.Stage)
	case off.Ratio == 1:
	case z.Stage < 3:
		refuse("zero_optimization.offload_optimizer.ratio %g: partial optimizer offload is ZeRO stage 3's; use stage 3, or set the ratio to 1", off.Ratio)
	case off.Device == dsconfig.OffloadNVMe:
		refuse(`zero_optimization.offload_optimizer.ratio %g with device "nvme": DeepSpeed keeps every swappable sub-group on NVMe whatever the ratio and steps the ratio's device share with a torch AdamW whose state it never swaps; dszero does not run that mix: use device "cpu" for partial offload, or set the ratio to 1`, off.Ratio)
	case plan.Optimizer.Impl != "DeepSpeedCPUAdam":
		refuse(`zero_optimization.offload_optimizer.ratio %g with optimizer %s: DeepSpeed's partial offload asserts "Hybrid Optimizer Only Supports DeepSpeedCPUAdam"; use an Adam or AdamW optimizer block without torch_adam (with zero_force_ds_cpu_optimizer true), or set the ratio to 1`, off.Ratio, plan.Optimizer.Impl)
	}
	if world > 1 && plan.GradientAllreduceOp == "sum" {
		refuse(`gradient_allreduce_op "sum": summed (not averaged) gradients are not implemented yet; use "mean"`)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", plan.File, errors.Join(errs...))
	}
	if z.Stage == 3 && z.MiCSShardSize > 0 && z.MiCSHierarchicalParamsGather {
		warns = append(warns, "zero_optimization.mics_hierarchical_params_gather: dszero gathers a unit within its shard group in one step, not in two hops (the numbers are the same)")
	}
	if off := z.OffloadOptimizer; z.Stage == 3 && off.Device == dsconfig.OffloadCPU && off.Ratio < 1 && plan.Scheduler.Type != "" {
		warns = append(warns, fmt.Sprintf("zero_optimization.offload_optimizer.ratio %g: the sub-groups kept on the device are stepped by DeepSpeed's backup torch.optim.AdamW at the optimizer block's lr and betas; the scheduler %s does not reach them (DeepSpeed does the same)", off.Ratio, plan.Scheduler.Type))
	}
	if z.Stage == 1 && z.OverlapComm {
		warns = append(warns, "zero_optimization.overlap_comm: stage 1 reduces the gradients after the step's last backward, without overlap (the numbers are the same)")
	}
	if z.Stage >= 1 && !z.ContiguousGradients {
		warns = append(warns, "zero_optimization.contiguous_gradients false: dszero's gradients are always one contiguous buffer (memory layout only; the numbers are the same)")
	}
	if z.Stage == 1 && z.ReduceScatter && (plan.PrescaleGradients || plan.GradientPredivideFactor != 1) {
		warns = append(warns, "prescale_gradients / gradient_predivide_factor: ZeRO stage 1 with reduce_scatter divides the gradients by the world size before the sum and ignores them, as DeepSpeed does")
	}
	return warns, nil
}

// Round is the working precision's rounding (nil for fp32), for the
// stage's working parameters.
func (e *Engine) Round() func([]float32) { return e.plan.Precision.DType.Rounding() }

// DType is the training dtype, for the model (model.BuildOptions.DType).
func (e *Engine) DType() device.DType { return e.plan.Precision.DType }

// Strategy is the rank's strategy (the model's unit hooks).
func (e *Engine) Strategy() Strategy { return e.strategy }

// OverwriteGrads reports whether the model must be told to overwrite its
// gradients at the first backward of every step (model OverwriteGrads):
// true when the strategy no longer clears them. Call it once, before
// training.
func (e *Engine) OverwriteGrads() bool {
	g, ok := e.strategy.(GradOverwriter)
	if ok {
		g.LeaveGradsDirty()
	}
	return ok
}

// ModelBuffers are the buffers the model binds.
func (e *Engine) ModelBuffers() (params, grads []float32) { return e.strategy.ModelBuffers() }

// GradScale is the factor on dloss for each micro-step's backward:
// loss_scale / gradient_accumulation_steps.
func (e *Engine) GradScale() float32 {
	return float32(e.scaler.Scale() / float64(e.plan.Batch.GradientAccumulationSteps))
}

// LR is the lr the next step will use.
func (e *Engine) LR() float64 {
	if e.sched != nil {
		return e.sched.LR()
	}
	return e.baseLR
}

// GlobalSteps and SkippedSteps count optimizer steps.
func (e *Engine) GlobalSteps() int64  { return e.globalSteps }
func (e *Engine) SkippedSteps() int64 { return e.skippedSteps }

// Step takes the optimizer step at the gradient-accumulation boundary.
func (e *Engine) Step() (StepStats, error) {
	e.globalSteps++
	st := StepStats{Step: e.globalSteps, LR: e.LR(), LossScale: e.scaler.Scale()}
	in := StepInput{LR: st.LR, LossScale: st.LossScale,
		CheckOverflow: e.plan.Precision.DType == device.F16 || e.plan.Precision.DType == device.BF16 && e.plan.Precision.BF16CheckGradOverflow}
	// The 1-bit optimizers keep their own fp16 path (onebit.go), which no
	// reference case here has checked against this ordering.
	fp16 := e.plan.Precision.DType == device.F16 && !isOneBit(e.plan)
	if fp16 {
		in.LossScale = lossscale.CleanScale(e.scaler) // fp16wrap.go
	}
	if e.sched != nil {
		var ok bool
		if e.betas, ok = e.sched.Betas(); ok {
			in.Betas = &e.betas
		}
	}
	res, err := e.strategy.Step(in)
	if err != nil {
		return st, fmt.Errorf("step %d: %w", st.Step, err)
	}
	st.GradNorm, st.Skipped = res.GradNorm, res.Overflow
	if fp16 && !res.Overflow {
		st.GradNorm = e.reportedNorm(res.GradNorm, st.LossScale, in.LossScale)
	}
	e.overflow = res.Overflow
	if e.plan.Precision.DType == device.F16 {
		if err := e.scaler.Update(res.Overflow); err != nil {
			return st, fmt.Errorf("step %d: %w", st.Step, err)
		}
	}
	if res.Overflow {
		e.skippedSteps++
		return st, nil
	}
	if e.sched != nil {
		e.sched.Step()
	}
	return st, nil
}

// MasterParams returns the rank's fp32 master parameters: all of them at
// stage 0, the rank's partition (without padding) at stages 1 and 2, its
// partitions at stage 3 (read back from swap files with NVMe offload).
func (e *Engine) MasterParams() ([]float32, error) {
	_, m, err := e.strategy.MasterParams()
	return m, err
}

// GatherMaster writes the full fp32 master parameters (layout.Numel) into
// dst. It is a collective: every rank calls it.
func (e *Engine) GatherMaster(dst []float32) error { return e.strategy.GatherMaster(dst) }

// Optimizer is the rank's optimizer (over its partition at stages 1 and 2).
func (e *Engine) Optimizer() optim.Optimizer {
	return e.strategy.(withOptimizer).Optimizer()
}

// Close frees the rank's buffers and workers.
func (e *Engine) Close() {
	e.strategy.Close()
	e.pool.Close()
}
