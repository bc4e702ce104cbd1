// Package train runs the training loop: micro-batches through forward and
// backward on every rank, the optimizer step at the gradient-accumulation
// boundary, and a record per step. The ZeRO engine (package zero) owns the
// state; this package owns the order of operations, the ranks and the
// measurements.
//
// Ranks. A plan compiled for WorldSize N trains on N ranks, each a
// goroutine with its own communicator (package comm/inproc), device
// (accountant and matmul), model and engine — or, with Config.Comm, this
// process is one rank of N whose peers are other processes (package
// comm/mpi under mpirun); both run the same per-rank loop. Rank r reads
// micro-batch mb = micro·N + r of every step (Batches), so the global
// batch is micro × GAS × N and the result does not depend on how it is
// split. With sequence_parallel_size sp, consecutive groups of sp ranks
// share each sample's tokens (DeepSpeed-Ulysses, seqpar.go): N/sp
// data-parallel shards, ZeRO still over all N ranks.
//
// Records. After each step every rank all-gathers its micro-step losses
// and its peak memory, so that rank 0 can report the mean loss over ranks
// and micro-steps (summed in micro-batch order, as one rank would) and the
// peaks of rank 0 and the largest over ranks. Rank 0 calls onStep; its
// answer (go on, stop, fail) is broadcast so that every rank ends together.
package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/inproc"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/stage3"
	"github.com/dszero/dszero/zero"
)

// Batches yields each rank's micro-batches.
type Batches interface {
	// Batch fills b with rank's micro-batch micro of optimizer step step
	// (both from 0). The loop sets b.B, the micro-batch size, and hands
	// the same b back at the rank's next call, so a source may keep b's
	// slices and refill them. Ranks call concurrently, each with its own b.
	Batch(step, micro, rank int, b *model.Batch) error
}

// TokenSource fills a rank's (B, T) inputs and their next-token targets
// (data.Loader is one).
type TokenSource interface {
	Micro(step, micro, rank int, inputs, targets []int32)
}

// Tokens serves a TokenSource's windows as micro-batches of sequences of
// T tokens.
func Tokens(src TokenSource, T int) Batches { return tokenBatches{src, T} }

type tokenBatches struct {
	src TokenSource
	T   int
}

func (t tokenBatches) Batch(step, micro, rank int, b *model.Batch) error {
	if n := b.B * t.T; len(b.Tokens) != n {
		b.Tokens, b.Targets = make([]int32, n), make([]int32, n)
	}
	t.src.Micro(step, micro, rank, b.Tokens, b.Targets)
	return nil
}

// Device is what one rank computes with: its memory accountant and its
// matrix multiplication (a device.CPU provides both). Ranks may share a
// Gemmer that is safe for concurrent use, as package blas's engines are.
type Device struct {
	Acct *mem.Accountant
	Gemm model.Gemmer
}

// Config is one training run.
type Config struct {
	// Plan is compiled for the world: Plan.WorldSize ranks train.
	Plan dsconfig.Plan
	// Model builds each rank's model (gpt.Config, mlp.Config, ...).
	Model model.Builder
	// Init are the initial fp32 parameters; nil draws them from Seed, or
	// reads them with InitRange.
	Init []float32
	// InitRange, when set (and Init is nil), writes elements
	// [lo, lo+len(dst)) of the initial parameters: a checkpoint's
	// model's weights file read by range (gpt.Weights.ReadRange), so
	// that a stage 3 rank reads only its partitions.
	InitRange func(dst []float32, lo int) error
	Seed      uint64
	Batches   Batches
	SeqLen    int // tokens per sample; ≤ Model.MaxSeq() (unused by a model of dense vectors)
	Steps     int // optimizer steps
	// ReturnParams makes Run return a copy of the final fp32 parameters.
	ReturnParams bool
	// Devices are the ranks' devices, Plan.WorldSize of them; with Comm,
	// just this rank's.
	Devices []Device
	// Comm, when set, makes this process one rank of Comm's world (of
	// Plan.WorldSize ranks, the others in other processes, e.g. comm/mpi
	// under mpirun) instead of running every rank in-process. Every rank
	// calls Run with the same Config apart from Devices; Timeout is then
	// the communicator's own.
	Comm comm.Comm
	// Checkpoint recomputes each block in backward (activation
	// checkpointing); CPUCheckpoint keeps the saved inputs in host memory.
	Checkpoint, CPUCheckpoint bool
	Version                   zero.Version
	// Workers bounds each rank's goroutines for the model and the
	// optimizer; 0 means GOMAXPROCS divided among the ranks.
	Workers int
	// FastMath builds the model with its fast kernels, in every dtype
	// (model.BuildOptions.FastMath); false, the zero value, is exact.
	FastMath bool
	// Timeout bounds every collective (0: comm.DefaultTimeout, 30 minutes);
	// a rank that stops makes the others fail within it, naming it (see
	// package comm).
	Timeout time.Duration
	// Warn receives the engine's warnings (zero.CheckPlan), once (with
	// Comm, on rank 0 only), and stage 3's trace warnings (rank 0's).
	Warn func(msg string)
	// KeepAfterForward and WrapMinNumParams are FSDP's
	// reshard_after_forward false and size-based wrapping at stage 3.
	KeepAfterForward bool
	WrapMinNumParams int
	// ShardGroupSize is hybrid sharding at stage 3 (FSDP HYBRID_SHARD):
	// ranks per shard group; 0 takes the plan's mics_shard_size.
	ShardGroupSize int
	// SaveDir, when set, receives a DeepSpeed-layout checkpoint (package
	// checkpoint) every SaveInterval steps (0: none in between) and after
	// the last step. LoadDir, when set, resumes from its latest
	// checkpoint: training continues from that global step up to Steps
	// (the total, as HF's max_steps), reading the data where it stopped.
	// No checkpoint is saved from a state holding NaN or Inf (finite.go):
	// the run fails instead, and latest keeps naming the last good one.
	SaveDir      string
	SaveInterval int
	// SaveSteps, when set, are the global steps after which to save,
	// instead of every SaveInterval steps and after the last one.
	SaveSteps []int
	// SaveAsync writes each checkpoint in the background while the next
	// steps run (save.go), from a snapshot of the state in host memory.
	SaveAsync bool
	LoadDir   string
	// LoadTag is the tag under LoadDir to resume from ("": LoadDir/latest).
	LoadTag string
	// Layout, when set, places and completes each save (the Trainer's
	// checkpoint-N folders); SaveDir must be set too, and turns saving on.
	Layout SaveLayout
	// Format is what each save writes (DeepSpeed's files by default).
	Format StateFormat
	// EngineOptions, when set, adjusts each rank's engine options before
	// the engine is built (a filesystem for swap files, test knobs).
	EngineOptions func(rank int, o *zero.Options) error
	// Hooks, when set, gives the unit hooks rank's model calls (wrapping
	// eng.Strategy(), which they are otherwise): tests observe or corrupt
	// gradients there.
	Hooks func(rank int, eng *zero.Engine) model.UnitHooks
	// Done, when set, is called on every rank after its last step, with
	// its communicator and engine (a test reads their traffic there).
	Done func(rank int, c comm.Comm, eng *zero.Engine) error
	// OnCheckpoint, when set, hears of the checkpoint resumed from and of
	// each one saved, once every rank is done with it (with Comm, on rank
	// 0 only).
	OnCheckpoint func(CheckpointEvent)
	// Stdout receives what DeepSpeed prints on rank 0 (the FLOPS profile,
	// the comms summary); nil is os.Stdout.
	Stdout io.Writer
}

// CheckpointEvent is a checkpoint loaded or saved: Dir/Tag, at global
// step Step, in Elapsed. A save through Config.Layout has Tag "" and Dir
// the path its Commit returned.
type CheckpointEvent struct {
	Saved   bool // false: resumed from
	Dir     string
	Tag     string // global_stepN, or the tag DIR/latest names
	Step    int64
	Elapsed time.Duration
}

// Path is the checkpoint's directory, Dir/Tag.
func (e CheckpointEvent) Path() string { return filepath.Join(e.Dir, e.Tag) }

// Record is what one optimizer step did (one line of --json-log).
type Record struct {
	Step       int64   `json:"step"`
	Loss       float64 `json:"loss"` // mean over ranks and micro-steps (with Batch.LossDenom, over every target of the step)
	LR         float64 `json:"lr"`
	LossScale  float64 `json:"loss_scale"`
	GradNorm   float64 `json:"grad_norm"`
	Skipped    bool    `json:"skipped"`
	TokensPerS float64 `json:"tokens_per_s"` // of the whole world (samples for a model of dense vectors)
	StepTimeS  float64 `json:"step_time_s"`
	// Peak is rank 0's device-tier peak by category, and "total"; PeakMax
	// is the largest over the ranks, per category and total.
	Peak     map[string]int64 `json:"peak_bytes"`
	PeakMax  map[string]int64 `json:"peak_bytes_max_rank"`
	PeakHost int64            `json:"peak_pinned_host_bytes"` // rank 0's
	// Breakdown is where rank 0's step went (with wall_clock_breakdown).
	Breakdown *Breakdown `json:"breakdown,omitempty"`
	// Micro are every rank's micro-step losses, [rank][micro].
	Micro [][]float32 `json:"-"`
}

// Breakdown is DeepSpeed's wall_clock_breakdown for one step of rank 0:
// forward, backward and optimizer step summed over the micro-steps, in
// milliseconds, and — at stage 3 — how long the compute thread waited for
// all-gathers and reduce-scatters within them (the rest of the
// collectives' time overlapped compute), and how many units it gathered,
// how many of them prefetched.
type Breakdown struct {
	ForwardMS    float64 `json:"forward_ms"`
	BackwardMS   float64 `json:"backward_ms"`
	StepMS       float64 `json:"step_ms"`
	GatherWaitMS float64 `json:"allgather_wait_ms"`
	ReduceWaitMS float64 `json:"reduce_scatter_wait_ms"`
	Gathers      int     `json:"gathers"`
	Prefetched   int     `json:"prefetched"`
	// SentBytes is what rank 0 sent on its world communicator during the
	// step, in comm's nominal bytes, by collective kind.
	SentBytes map[string]int64 `json:"sent_bytes,omitempty"`
}

// waiter is a strategy that reports its waits for collectives (stage 3).
type waiter interface{ TakeWaits() stage3.Waits }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// ErrStop, returned by onStep, ends training early without an error.
var ErrStop = errors.New("stop")

// Run trains for cfg.Steps steps on cfg.Plan.WorldSize in-process ranks,
// or as one rank of cfg.Comm, calling onStep (from rank 0 only) after each
// step. With cfg.ReturnParams it returns a copy of the final fp32 master
// parameters.
func Run(cfg Config, onStep func(Record) error) ([]float32, error) {
	p := cfg.Plan
	world, local := p.WorldSize, p.WorldSize // ranks in the job, in this process
	if cfg.Comm != nil {
		local = 1
	}
	if cfg.Model == nil {
		return nil, errors.New("train: Config.Model is required")
	}
	maxSeq := cfg.Model.MaxSeq()
	switch {
	case maxSeq > 0 && (cfg.SeqLen < 1 || cfg.SeqLen > maxSeq):
		return nil, fmt.Errorf("sequence length %d does not fit the model's context of %d tokens; use --seq ≤ %d", cfg.SeqLen, maxSeq, maxSeq)
	case world < 1:
		return nil, fmt.Errorf("world size %d: compile the plan with WorldSize ≥ 1", world)
	case cfg.Comm != nil && cfg.Comm.Size() != world:
		return nil, fmt.Errorf("the plan is compiled for %d ranks but the communicator has %d", world, cfg.Comm.Size())
	case len(cfg.Devices) != local:
		return nil, fmt.Errorf("%d devices for %d ranks in this process", len(cfg.Devices), local)
	case cfg.SaveAsync && (cfg.Layout != nil || cfg.Format != DeepSpeedFiles):
		return nil, errors.New("train: SaveAsync writes DeepSpeed's files in SaveDir; a SaveLayout or another StateFormat saves synchronously")
	}
	if n := cfg.Model.Layout().Numel; cfg.Init != nil && len(cfg.Init) != n {
		return nil, fmt.Errorf("initial weights have %d elements, the model %d", len(cfg.Init), n)
	}
	// Refuse once, before the ranks start; rank 0's engine reports the
	// warnings.
	if _, err := zero.CheckPlan(p); err != nil {
		return nil, err
	}
	if err := checkSeqParallel(&cfg); err != nil {
		return nil, err
	}
	if cfg.Workers == 0 {
		cfg.Workers = max(1, runtime.GOMAXPROCS(0)/local)
	}
	if cfg.Comm != nil {
		r := &rank{cfg: &cfg, c: cfg.Comm, dev: cfg.Devices[0]}
		return r.run(onStep)
	}
	var final []float32
	err := inproc.New(world, inproc.Options{Timeout: cfg.Timeout}).Run(func(c comm.Comm) error {
		r := &rank{cfg: &cfg, c: c, dev: cfg.Devices[c.Rank()]}
		params, err := r.run(onStep)
		if c.Rank() == 0 {
			final = params
		}
		return err
	})
	return final, rootCause(err, world)
}

// rootCause keeps, of the ranks' joined errors, those that are not just
// another rank's failure seen through a collective; a world of one loses
// the "rank 0: " prefix.
func rootCause(err error, world int) error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	var own []error
	for _, e := range j.Unwrap() {
		if !errors.Is(e, comm.ErrRankFailed) && !errors.Is(e, comm.ErrRankExited) {
			own = append(own, e)
		}
	}
	if len(own) == 0 {
		return err
	}
	if world == 1 && len(own) == 1 {
		if inner := errors.Unwrap(own[0]); inner != nil {
			return inner
		}
	}
	return errors.Join(own...)
}

// saveAfter says whether a checkpoint is saved after global step step
// (stopped: the run ends there early).
func (r *rank) saveAfter(step int, stopped bool) bool {
	cfg := r.cfg
	if len(cfg.SaveSteps) > 0 {
		return slices.Contains(cfg.SaveSteps, step)
	}
	return stopped || step == cfg.Steps || cfg.SaveInterval > 0 && step%cfg.SaveInterval == 0
}

// rank is one rank's training loop.
type rank struct {
	cfg *Config
	c   comm.Comm
	dev Device

	// Built by setup, once per run.
	ctx    context.Context
	layout model.Layout
	kn     *knobs
	eng    *zero.Engine
	m      model.Model
	sp     *seqPar
	ck     checkpoint.Options
	async  *asyncSaver

	// Per step.
	B, T, gas, world int
	batch            model.Batch
	st               *stats
	verdict          []float32
	overwrite        bool
	shares           bool // the micro-losses are shares of the global batch's (LossDenom)
}

// verdicts rank 0 broadcasts after each step.
const (
	goOn float32 = iota
	stop
	fail
)

// run is the rank's whole run, in order: build the engine and the model,
// resume, train step by step, and hand back the final parameters.
func (r *rank) run(onStep func(Record) error) ([]float32, error) {
	defer r.close()
	if err := r.setup(); err != nil {
		return nil, err
	}
	first, err := r.resume()
	if err != nil {
		return nil, err
	}
	for s := first; s < r.cfg.Steps; s++ {
		v, err := r.step(s, onStep)
		if err != nil || v == fail {
			return nil, err // rank 0 says why (onStep's error); the others just end
		}
		if v == stop {
			break
		}
	}
	return r.finish()
}

// setup builds the rank's engine (zero.NewEngine with the plan and the
// run's options), its unit hooks, its sequence-parallel group and its
// model bound to the engine's buffers.
func (r *rank) setup() error {
	cfg, p, c := r.cfg, r.cfg.Plan, r.c
	r.ctx = context.Background()
	r.layout = cfg.Model.Layout()
	layout := &r.layout
	opts := zero.Options{Acct: r.dev.Acct, Layout: layout, Init: cfg.Init, Workers: cfg.Workers, Version: cfg.Version, Comm: c, Ctx: r.ctx,
		KeepAfterForward: cfg.KeepAfterForward, WrapMinNumParams: cfg.WrapMinNumParams, ShardGroupSize: cfg.ShardGroupSize}
	if cfg.Warn != nil && c.Rank() == 0 {
		opts.Warn = cfg.Warn
	}
	kn, err := newKnobs(cfg, c.Rank()) // knobs.go
	if err != nil {
		return err
	}
	r.kn = kn
	opts.Comm = kn.engineComm(c)
	switch {
	case cfg.Init != nil:
	case cfg.InitRange != nil:
		opts.InitRange = cfg.InitRange
	default:
		// Each stage draws what it holds: stage 3 only its partitions.
		init := layout.InitRange
		if in, ok := cfg.Model.(model.Initializer); ok {
			init = func(seed uint64, dst []float32, lo int) { in.InitRange(layout, seed, dst, lo) }
		}
		opts.InitRange = func(dst []float32, lo int) error { init(cfg.Seed, dst, lo); return nil }
	}
	if cfg.EngineOptions != nil {
		if err := cfg.EngineOptions(c.Rank(), &opts); err != nil {
			return err
		}
	}
	eng, err := zero.NewEngine(p, opts)
	if err != nil {
		return err
	}
	r.eng = eng
	var hooks model.UnitHooks = eng.Strategy()
	if cfg.Hooks != nil {
		hooks = cfg.Hooks(c.Rank(), eng)
	}
	hooks = kn.hooks(hooks)
	if r.sp, err = newSeqPar(r.ctx, c, p); err != nil {
		return err
	}
	m, err := cfg.Model.Build(model.BuildOptions{Gemm: r.dev.Gemm, Acct: r.dev.Acct, Hooks: hooks, Checkpoint: cfg.Checkpoint,
		CPUCheckpoint: cfg.CPUCheckpoint, DType: eng.DType(), Workers: cfg.Workers, SeqParallel: r.sp.group, FastMath: cfg.FastMath})
	if err != nil {
		return err
	}
	r.m = m
	if err := r.m.Bind(eng.ModelBuffers()); err != nil {
		return err
	}
	if err := kn.attach(r.m); err != nil {
		return err
	}
	r.B, r.T = int(p.Batch.TrainMicroBatchSizePerGPU), cfg.SeqLen
	if cfg.Model.MaxSeq() == 0 {
		r.T = 1 // a sample is one vector
	}
	r.gas, r.world = int(p.Batch.GradientAccumulationSteps), c.Size()
	r.batch = model.Batch{B: r.B}
	r.st = newStats(r.gas, r.world)
	r.verdict = make([]float32, 1)
	r.overwrite = eng.OverwriteGrads()
	r.ck = checkpoint.Options{Layout: layout, Comm: c, Ctx: r.ctx, Acct: r.dev.Acct}
	r.async = &asyncSaver{cfg: cfg, c: c, eng: eng, ck: r.ck}
	return nil
}

// close abandons an unfinished asynchronous save and closes the model and
// the engine, whatever setup built of them.
func (r *rank) close() {
	if r.async != nil {
		r.async.abandon()
	}
	if r.m != nil {
		r.m.Close()
	}
	if r.eng != nil {
		r.eng.Close()
	}
}

// resume loads Config.LoadDir's checkpoint, if any, and returns the
// global step training goes on from.
func (r *rank) resume() (first int, err error) {
	cfg := r.cfg
	if cfg.LoadDir == "" {
		return 0, nil
	}
	t0 := time.Now()
	if err := load(cfg.LoadDir, cfg.LoadTag, r.eng, r.ck); err != nil {
		return 0, fmt.Errorf("resuming from %s: %w", cfg.LoadDir, err)
	}
	r.tell(false, cfg.LoadDir, t0)
	return int(r.eng.GlobalSteps()), nil
}

// tell reports a checkpoint loaded or saved to Config.OnCheckpoint (rank
// 0's).
func (r *rank) tell(saved bool, dir string, t0 time.Time) {
	cfg, eng := r.cfg, r.eng
	if cfg.OnCheckpoint == nil || r.c.Rank() != 0 {
		return
	}
	ev := CheckpointEvent{Saved: saved, Dir: dir, Tag: checkpoint.Tag(eng.GlobalSteps()), Step: eng.GlobalSteps(), Elapsed: time.Since(t0)}
	if saved && cfg.Layout != nil {
		ev.Tag = "" // dir is the layout's whole checkpoint
	}
	if !saved && (checkpoint.IsSharded(dir) || checkpoint.IsFull(dir)) {
		ev.Tag = "" // Accelerate's state dicts have no tags
	} else if !saved {
		if tag, err := checkpoint.LatestTag(dir); err == nil {
			ev.Tag = tag // a DeepSpeed checkpoint's own tag
		}
	}
	cfg.OnCheckpoint(ev)
}

// step runs optimizer step s (from 0), in order: the micro-steps'
// forward and backward, the engine's step, the record rank 0 reports and
// the verdict it broadcasts, and the checkpoint after it. It returns the
// verdict: go on, stop (onStep stopped the run) or fail (onStep failed on
// rank 0, whose error it returns; nothing is saved).
func (r *rank) step(s int, onStep func(Record) error) (float32, error) {
	c := r.c
	start := time.Now()
	if r.overwrite {
		r.m.OverwriteGrads() // the strategy left last step's gradients in place
	}
	var bd Breakdown
	sent0 := c.Traffic()
	for micro := 0; micro < r.gas; micro++ {
		if err := r.microStep(s, micro, &bd); err != nil {
			return fail, err
		}
	}
	t3 := time.Now()
	ss, err := r.eng.Step()
	if err != nil {
		return fail, err
	}
	bd.StepMS = ms(time.Since(t3))
	bd.SentBytes = c.Traffic().SentSince(sent0)
	if err := r.kn.afterStep(int64(s+1), &bd, r.world); err != nil {
		return fail, err
	}
	if w, ok := r.eng.Strategy().(waiter); ok {
		ws := w.TakeWaits()
		bd.GatherWaitMS, bd.ReduceWaitMS, bd.Gathers, bd.Prefetched = ms(ws.Gather), ms(ws.Reduce), ws.Gathers, ws.Prefetched
	}
	if err := r.report(s, ss, &bd, start, onStep); err != nil || r.verdict[0] == fail {
		return fail, err
	}
	stopped := r.verdict[0] == stop
	if err := r.async.poll(); err != nil {
		return fail, fmt.Errorf("step %d: %w", s+1, err)
	}
	if r.cfg.SaveDir != "" && r.saveAfter(s+1, stopped) {
		if err := r.save(s + 1); err != nil {
			return fail, err
		}
	}
	return r.verdict[0], nil
}

// microStep runs micro-step micro of step s: the rank's micro-batch
// through the model's forward, then its backward with the engine's
// gradient scale.
func (r *rank) microStep(s, micro int, bd *Breakdown) error {
	gas, world := r.gas, r.world
	r.batch.B = r.B
	if err := r.sp.batch(r.cfg.Batches, s, micro, &r.batch); err != nil {
		return fmt.Errorf("step %d, micro-step %d: reading the data: %w", s+1, micro, err)
	}
	run, err := r.kn.beforeForward(int64(s), &r.batch)
	if err != nil {
		return fmt.Errorf("step %d, micro-step %d: %w", s+1, micro, err)
	}
	t0 := time.Now()
	loss, err := r.m.Forward(run)
	t1 := time.Now()
	if err == nil {
		err = r.kn.afterForward()
	}
	bd.ForwardMS += ms(t1.Sub(t0))
	if err != nil {
		return fmt.Errorf("step %d, micro-step %d: %w", s+1, micro, err)
	}
	if math.IsNaN(float64(loss)) && r.cfg.Plan.Precision.DType != device.F16 {
		return fmt.Errorf("step %d, micro-step %d: the loss is NaN: %w", s+1, micro, zcore.ErrDiverged)
	}
	r.st.mine[micro] = loss
	t2 := time.Now()
	scale := r.eng.GradScale()
	if r.batch.LossDenom > 0 {
		// The loss is a share of the sum over the whole global
		// batch (HF's num_items_in_batch), not a mean to average
		// over micro-steps and ranks: undo the engine's 1/GAS and
		// its average over the ranks.
		scale *= float32(gas * world)
		r.shares = true
	} else {
		scale *= r.sp.gradFactor() // seqpar.go
	}
	if err := r.m.Backward(scale); err != nil {
		return fmt.Errorf("step %d, micro-step %d: %w", s+1, micro, err)
	}
	bd.BackwardMS += ms(time.Since(t2))
	if micro < gas-1 {
		if err := r.kn.afterStep(int64(s), bd, world); err != nil {
			return err
		}
	}
	return nil
}

// report gathers every rank's losses and peaks, makes rank 0's Record of
// step s and hands it to onStep, and broadcasts rank 0's verdict (go on,
// stop, fail) into r.verdict; a failed onStep's error is returned on
// rank 0 only.
func (r *rank) report(s int, ss zero.StepStats, bd *Breakdown, start time.Time, onStep func(Record) error) error {
	c, p, st := r.c, r.cfg.Plan, r.st
	gas, world, sp := r.gas, r.world, r.sp
	if err := st.gather(r.ctx, c, r.dev.Acct); err != nil {
		return fmt.Errorf("step %d: gathering the step's losses and peaks: %w", s+1, err)
	}
	var cbErr error
	if c.Rank() == 0 {
		dt := time.Since(start).Seconds()
		loss := st.loss()
		if r.shares {
			loss *= float64(gas * world / sp.size) // their sum: the mean over every target of the step, as HF's Trainer logs it (an SP group's ranks each hold the group's)
		}
		rec := Record{Step: ss.Step, Loss: loss, LR: ss.LR, LossScale: ss.LossScale, GradNorm: ss.GradNorm,
			Skipped: ss.Skipped, StepTimeS: dt, TokensPerS: float64(r.B*r.T*gas*world/sp.size) / dt}
		rec.Peak, rec.PeakMax = st.peaks()
		rec.Micro = st.micro()
		rec.PeakHost = r.dev.Acct.Snapshot().PeakTotal[mem.PinnedHost]
		if p.WallClockBreakdown {
			rec.Breakdown = bd
		}
		r.verdict[0] = goOn
		if onStep != nil {
			switch cbErr = onStep(rec); {
			case errors.Is(cbErr, ErrStop):
				r.verdict[0], cbErr = stop, nil
			case cbErr != nil:
				r.verdict[0] = fail
			}
		}
	}
	if err := c.Broadcast(r.ctx, comm.F32(r.verdict), 0).Wait(); err != nil {
		return fmt.Errorf("step %d: %w", s+1, err)
	}
	if r.verdict[0] == fail {
		return cbErr // nil on the other ranks
	}
	return nil
}

// save writes the checkpoint after global step step: DeepSpeed's files in
// Config.SaveDir (in the background with SaveAsync), or Config.Format's
// in the Config.Layout's folder for the step.
func (r *rank) save(step int) error {
	cfg, c, eng := r.cfg, r.c, r.eng
	t0 := time.Now()
	dir := cfg.SaveDir
	if cfg.Layout != nil {
		dir = cfg.Layout.Dir(int64(step))
	}
	if err := checkBeforeSave(r.ctx, c, eng, step, dir); err != nil {
		return err
	}
	if cfg.SaveAsync { // DeepSpeed's files in SaveDir: Run refuses a Layout or Format with it
		return r.async.save(step)
	}
	if err := cfg.Format.save(dir, eng, r.ck); err != nil {
		return fmt.Errorf("step %d: saving a checkpoint in %s: %w", step, dir, err)
	}
	if cfg.Layout == nil {
		r.tell(true, dir, t0) // an asynchronous one tells when it is finished
		return nil
	}
	path, err := finishSave(r.ctx, c, cfg.Layout, dir, step)
	if err != nil {
		return err
	}
	r.tell(true, path, t0)
	return nil
}

// finish waits for the last asynchronous save, ends the knobs, calls
// Config.Done and returns the final fp32 master parameters (with
// ReturnParams).
func (r *rank) finish() ([]float32, error) {
	cfg := r.cfg
	if err := r.async.finish(); err != nil {
		return nil, err
	}
	if err := r.kn.done(); err != nil {
		return nil, err
	}
	if cfg.Done != nil {
		if err := cfg.Done(r.c.Rank(), r.c, r.eng); err != nil {
			return nil, err
		}
	}
	if !cfg.ReturnParams {
		return nil, nil
	}
	full := make([]float32, r.layout.Numel)
	if err := r.eng.GatherMaster(full); err != nil {
		return nil, err
	}
	return full, nil
}
