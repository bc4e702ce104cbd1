package stage3

import (
	"fmt"
	"math"
	"time"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/nvme"
	"github.com/dszero/dszero/offload"
	"github.com/dszero/dszero/zero/lossscale"
	"github.com/dszero/dszero/zero/optim"
	"github.com/dszero/dszero/zero/partition"
)

// Config are stage 3's own knobs, from zero_optimization (and the FSDP
// dialect). Sizes are in elements.
type Config struct {
	// Trace, when set, hears every data movement of a step as it is
	// issued, in program order: each unit group's all-gather (on demand or
	// prefetched), the wait for it, its release, each unit's
	// reduce-scatter, each parameter partition read from its swap file
	// (now or ahead of its gather), and each sub-group's optimizer step
	// with its swaps.
	// It is for reading a step (example_test.go) and debugging; nil costs
	// nothing.
	Trace func(event string)
	// PrefetchBucketSize is stage3_prefetch_bucket_size: how many elements
	// of upcoming units are all-gathered ahead of use; 0 disables prefetch.
	PrefetchBucketSize int
	// MaxLiveParameters is stage3_max_live_parameters: prefetch stops when
	// the gathered elements would exceed it (it never blocks a unit that is
	// needed now).
	MaxLiveParameters int
	// MaxReuseDistance is stage3_max_reuse_distance: a unit whose next use
	// comes within this many gathered elements is kept instead of released.
	MaxReuseDistance int
	// ParamPersistenceThreshold and ModelPersistenceThreshold are
	// stage3_param_persistence_threshold / stage3_model_persistence_threshold
	// (see Persistent).
	ParamPersistenceThreshold int64
	ModelPersistenceThreshold int64
	// SubGroupSize is sub_group_size: the rank's partitions are stepped in
	// sub-groups of about this many elements (partition.SubGroups).
	SubGroupSize int
	// KeepAfterForward is FSDP's reshard_after_forward false
	// (SHARD_GRAD_OP): a unit gathered for forward stays gathered until its
	// backward. DeepSpeed and FULL_SHARD release it after forward.
	KeepAfterForward bool
	// Wrap groups the model's units into gathered units.
	Wrap WrapPolicy
	// PredivideFactor is gradient_predivide_factor with postscale (DeepSpeed
	// stage 3 divides the gradients by it before the reduce-scatter and
	// multiplies by it after, unless it equals the world size); 0 or 1:
	// none.
	PredivideFactor float64
	// Warn receives a warning when a step's unit order departs from the
	// recorded trace (prefetch then falls back to fetching on demand).
	Warn func(msg string)
	// OptimizerTier is where the fp32 master and gradient partitions and
	// the optimizer state live: mem.Device, or mem.PinnedHost with
	// offload_optimizer cpu (ZeRO-Offload: the step runs on the host).
	// The optimizer's own state is allocated by NewOptimizer, which the
	// engine builds for the same tier.
	OptimizerTier mem.Tier
	// Partial, for partial optimizer offload (offload_optimizer.ratio < 1
	// with OptimizerTier the pinned host), keeps some sub-groups' master,
	// gradient partition and optimizer state on the device instead, with
	// an optimizer of their own (see PartialOffload). Nil: none.
	Partial *PartialOffload
	// ParamTier is where the rank's parameter partitions live between
	// gathers: mem.Device, or mem.PinnedHost with offload_param cpu. The
	// partitions of persistent parameters stay on the device, as in
	// DeepSpeed.
	ParamTier mem.Tier
	// Swap, when set, keeps the fp32 master partitions and the optimizer
	// state in swap files between steps (offload_optimizer nvme): it makes
	// the swapper, given the largest sub-group's and all the swap files'
	// bytes. The strategy closes it.
	Swap func(largestBytes, totalBytes int64) (*nvme.Swapper, error)
	// ParamSwap, when set, keeps the partitions of the non-persistent
	// parameters in swap files (offload_param nvme): it makes the swapper,
	// given the largest partition's and all the files' bytes. The strategy
	// closes it.
	ParamSwap func(largestBytes, totalBytes int64) (*nvme.Swapper, error)
	// NoParamReadAhead turns off reading parameter partitions ahead of
	// their gathers (with ParamSwap and a trace; see the package doc):
	// each partition is then read when its unit's gather is issued, as
	// in the first pass. The engine leaves it false; tests and benchmarks
	// set it to compare.
	NoParamReadAhead bool
	// HPZ, for ZeRO++ hierarchical partitioning (zero_hpz_partition_size),
	// is the rank's group: backward gathers each unit from the secondary
	// partitions kept within it in forward. Nil: none.
	HPZ comm.Comm
	// Replicas, for hybrid sharding (FSDP HYBRID_SHARD, DeepSpeed MiCS),
	// connects this rank with the ranks that hold the same partitions in
	// the other shard groups: the strategy's own communicator is then its
	// shard group, and at each step the gradient partitions are summed
	// across Replicas before the norm and the update. Nil: one group.
	Replicas comm.Comm
	// QuantizedWeights is ZeRO++ qwZ (zero_quantized_weights): the
	// parameter all-gathers carry int8 blocks (zeropp.go), dequantized to
	// the model's dtype (Options.DTypes.Model).
	QuantizedWeights bool
	// QuantizedGradients, for ZeRO++ qgZ (zero_quantized_gradients), is
	// the rank's two groups of the hierarchical all-to-all reduction
	// (qgz.go); nil: the gradients are reduce-scattered.
	QuantizedGradients *QGZ
}

// Strategy is ZeRO stage 3 on one rank (see the package doc).
type Strategy struct {
	o   zcore.Options
	c   Config
	lay partition.Stage3Layout
	l   *model.Layout

	rank, world int
	groups      []Group
	groupOf     []int  // model unit → group
	persist     []bool // per parameter
	unitLo      []int  // model unit → start of its partitions in the rank-local flat buffer
	unitLen     []int  // model unit → length of its partitions there

	params paramStore // the rank-local partitions in the training precision
	// grad, gradPages' buffer, is the rank-local averaged gradient
	// partitions (mem.Grads), resident only from the reduction that first
	// writes a unit's partitions in a step until the optimizer step has
	// read them (gradpart.go).
	grad      []float32
	gradPages *zcore.Pages
	gradUnit  []tierSplit       // model unit → its partitions' elements by tier
	gradLive  tierSplit         // acquired since the last step (accounted)
	optim     optimStore        // the fp32 master partitions and optimizer state
	place     offload.Placement // the tier of each sub-group's master, gradients and optimizer state

	full  *zcore.Pages // the parameters the model binds; resident where gathered
	grads *zcore.Pages // the gradients the model binds; resident where live
	pages *zcore.PageCache
	// peakLive is the most elements of the gathered parameters and the
	// gradients ever live at once (fitCache).
	peakLive int
	// dirty: LeaveGradsDirty, the model overwrites each step's first
	// gradients, so the pages a unit's gradients are acquired into then
	// need not be cleared.
	dirty bool

	f fetcher
	r reducer

	waits        Waits        // since the last TakeWaits
	steps        int          // optimizer steps taken
	persistBytes int64        // the persistent parameters, always gathered (mem.Gathered)
	loading      bool         // BeginLoad started a load through LoadTensor (load.go)
	hpz          *secondary   // ZeRO++ hpZ; nil otherwise
	qw           *weightQuant // ZeRO++ qwZ; nil otherwise
	qg           *gradQuant   // ZeRO++ qgZ; nil otherwise
	// nearest rounds one value to the model's dtype (nil: fp32): ZeRO++'s
	// dequantized values and sums, and qgZ's predivided gradients.
	nearest func(float32) float32
	accum   func([]float32) // rounding of the gradient partitions after each add (grad_accum_dtype); nil: fp32

	norms, scratch []float64
	sums           []float64 // per sub-group Σ norm², all-reduced
	f64            []uint16  // allReduceF64's words
	flag           []float32
}

// New allocates the rank's partitions — initialized partition by
// partition, never the whole model — and gathers the persistent
// parameters (a collective: every rank calls it).
func New(o zcore.Options, c Config) (_ *Strategy, err error) {
	if err := o.Check("stage 3"); err != nil {
		return nil, err
	}
	if c.PrefetchBucketSize < 0 || c.MaxLiveParameters < 0 || c.MaxReuseDistance < 0 || c.SubGroupSize < 0 {
		return nil, fmt.Errorf("stage 3: negative sizes in %+v", c)
	}
	s := &Strategy{o: o, c: c, l: o.Layout, rank: o.Comm.Rank(), world: o.Comm.Size(), accum: zcore.Rounding(o.DTypes.Accum),
		nearest: o.DTypes.Model.Nearest()}
	// Gradients are averaged in the model's dtype and reduced in
	// communication_data_type, as __avg_scatter_grads does.
	s.o.Average = o.Average.In(o.DTypes.Model, o.DTypes.Comm)
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	ps := make([]partition.Param, len(s.l.Specs))
	for i, sp := range s.l.Specs {
		ps[i] = partition.Param{Name: sp.Name, Numel: sp.Numel}
	}
	s.lay = partition.Stage3(ps, s.world, c.SubGroupSize)
	if s.place, err = placement(s.lay, c); err != nil {
		return nil, err
	}
	s.groups = Groups(s.l, c.Wrap)
	s.persist = Persistent(s.l, c.ParamPersistenceThreshold, c.ModelPersistenceThreshold)
	s.groupOf = make([]int, len(s.l.Units))
	for g := range s.groups {
		for _, u := range s.groups[g].Units {
			s.groupOf[u] = g
		}
		for i := s.groups[g].First; i <= s.groups[g].Last; i++ {
			if s.persist[i] {
				s.groups[g].Persistent += s.l.Specs[i].Numel
			}
		}
	}
	s.unitLo = make([]int, len(s.l.Units))
	s.unitLen = make([]int, len(s.l.Units))
	for u, un := range s.l.Units {
		s.unitLo[u] = s.lay.Offsets[un.First]
		s.unitLen[u] = s.lay.Offsets[un.Last] + s.lay.PartitionSizes[un.Last] - s.unitLo[u]
	}

	n := s.lay.RankNumel
	if s.params, err = s.newParamStore(); err != nil {
		return nil, err
	}
	if err := s.initPartitions(); err != nil {
		return nil, err
	}
	if o.Round != nil {
		o.Round(s.params.Work())
	}
	s.pages = zcore.NewPageCache(0) // fitCache lets it grow with what has been live
	if err := s.allocGrad(n); err != nil {
		return nil, fmt.Errorf("stage 3: gradient partitions (%d elements): %w", n, err)
	}
	if s.optim, err = s.newOptimStore(); err != nil {
		return nil, err
	}
	if s.full, err = zcore.NewPages(s.l.Numel); err != nil {
		return nil, fmt.Errorf("stage 3: gathered parameter buffer: %w", err)
	}
	if s.grads, err = zcore.NewPages(s.l.Numel); err != nil {
		return nil, fmt.Errorf("stage 3: gradient buffer: %w", err)
	}
	s.full.Recycle(s.pages)
	s.grads.Recycle(s.pages)
	if err := s.params.Commit(); err != nil {
		return nil, err
	}
	if c.HPZ != nil && c.HPZ.Size() > 1 {
		s.hpz = newSecondary(c.HPZ, len(s.l.Specs), len(s.groups))
	}
	if c.QuantizedWeights {
		worlds := []int{s.world}
		if s.hpz != nil {
			worlds = append(worlds, s.hpz.c.Size())
		}
		if s.qw, err = newWeightQuant(s, worlds...); err != nil {
			return nil, err
		}
	}
	if c.QuantizedGradients != nil {
		if s.qg, err = newGradQuant(s, *c.QuantizedGradients); err != nil {
			return nil, err
		}
	}
	s.f.init(s)
	s.r.init(s)
	for _, gr := range s.groups {
		s.persistBytes += 4 * int64(gr.Persistent)
	}
	if err := o.Acct.Reserve(mem.Gathered, mem.Device, s.persistBytes); err != nil {
		s.persistBytes = 0
		return nil, fmt.Errorf("stage 3: persistent parameters: %w", err)
	}
	s.norms = make([]float64, len(s.l.Specs))
	s.scratch = make([]float64, len(s.l.Specs))
	s.sums = make([]float64, len(s.lay.SubGroups))
	s.f64 = make([]uint16, 4*len(s.sums)*(1+s.world))
	s.flag = make([]float32, 1)
	if err := s.f.gatherPersistent(); err != nil {
		return nil, err
	}
	return s, nil
}

// initPartitions writes the rank's partitions of the initial parameters
// into work: from InitRange element range by element range, or from the
// full Init. Only InitFunc, which writes a whole model, needs a temporary
// full buffer (accounted as mem.Temp).
func (s *Strategy) initPartitions() error {
	o := &s.o
	src := o.Init
	if o.InitRange == nil && src == nil {
		full, err := o.Acct.F32(mem.Temp, mem.Device, s.l.Numel)
		if err != nil {
			return fmt.Errorf("stage 3: initializing the parameters: %w", err)
		}
		defer o.Acct.FreeF32(mem.Temp, mem.Device, full)
		o.InitFunc(full)
		src = full
	}
	work := s.params.Work()
	for i, sp := range s.l.Specs {
		lo, hi, _ := s.lay.Owned(i, s.rank)
		dst := work[s.lay.Offsets[i] : s.lay.Offsets[i]+hi-lo]
		if src != nil {
			copy(dst, src[sp.Offset+lo:sp.Offset+hi])
		} else if err := o.InitRange(dst, sp.Offset+lo); err != nil {
			return fmt.Errorf("stage 3: initial values of %s[%d:%d]: %w", sp.Name, lo, hi, err)
		}
	}
	return nil
}

// Waits is where a rank's compute thread waited for stage 3's
// collectives and parameter reads, and how many gathers and reads it
// issued: with prefetch and overlap_comm the collectives run while the
// model computes, with offload_param nvme the partitions are read ahead,
// and the waits shrink (wall_clock_breakdown shows them).
type Waits struct {
	Gather, Reduce time.Duration // blocked on all-gathers / reduce-scatters
	Gathers        int           // units gathered
	Prefetched     int           // of them, issued ahead by the trace

	// With offload_param nvme: the parameter partitions read from their
	// swap files for gathers.
	Read        time.Duration // blocked on those reads
	Reads       int           // partitions read for gathers
	ReadsAhead  int           // of them, started ahead by the trace
	ReadsReady  int           // of those, already landed when their gather came
	ReadsUnused int           // reads ahead that no gather used (dropped at the end of a pass, a trace departure, a write)
}

// TakeWaits returns the waits since the last call and starts counting
// anew.
func (s *Strategy) TakeWaits() Waits {
	w := s.waits
	s.waits = Waits{}
	if s.params != nil {
		r := s.params.TakeReads()
		w.Read, w.Reads, w.ReadsAhead, w.ReadsReady, w.ReadsUnused = r.Wait, r.Reads, r.Ahead, r.Ready, r.Unused
	}
	return w
}

// GroupTraffic is what this rank moved within its shard group and across
// the replica groups (zero when the strategy is not hybrid).
func (s *Strategy) GroupTraffic() (shard, replicas comm.Traffic) {
	shard = s.o.Comm.Traffic()
	if s.c.Replicas != nil {
		replicas = s.c.Replicas.Traffic()
	}
	return shard, replicas
}

// LeaveGradsDirty lets the model write (not add) each step's first
// gradients: stage 3 hands every unit's gradient range back, zeroed, as
// soon as it is reduced, so the buffer holds nothing to add to and there
// is nothing to clear (zero.GradOverwriter). The pages a unit's
// gradients are then acquired into for the step's first backward are
// not cleared either.
func (s *Strategy) LeaveGradsDirty() { s.dirty = true }

// Layout is the rank-local layout of the partitions.
func (s *Strategy) Layout() partition.Stage3Layout { return s.lay }

// Groups are the gathered units, with their persistent elements.
func (s *Strategy) Groups() []Group { return s.groups }

// ModelBuffers are the full-length parameter and gradient buffers the
// model binds; each is resident only where a unit is gathered or its
// gradients are live.
func (s *Strategy) ModelBuffers() ([]float32, []float32) { return s.full.F32(), s.grads.F32() }

// MasterParams is the rank's fp32 master partitions, every parameter's
// partition in order with its padding (partition.Stage3Layout); the offset
// is 0: a stage 3 partition is not one range of the flat buffer.
func (s *Strategy) MasterParams() (int, []float32, error) {
	m, err := s.optim.MasterParams()
	if err != nil {
		return 0, nil, err
	}
	return 0, m, nil
}

// Optimizer is the optimizer of the first sub-group in OptimizerTier (all
// of them share their hyperparameters; with partial offload the device
// sub-groups' backup optimizers are another kind; nil with
// offload_optimizer nvme, where they exist only while they step);
// Optimizers lists every sub-group's.
func (s *Strategy) Optimizer() optim.Optimizer { return s.optim.Optimizer() }

// Optimizers are the sub-groups' optimizers, in order.
func (s *Strategy) Optimizers() []optim.Optimizer { return s.optim.Optimizers() }

// Step takes the optimizer step, sub-group by sub-group, with the
// gradients reduce-scattered since the last step, as
// DeepSpeedZeroOptimizer_Stage3.step does (a collective).
func (s *Strategy) Step(in zcore.StepInput) (zcore.StepResult, error) {
	if err := s.r.ug.TakeStep(); err != nil {
		return zcore.StepResult{}, err
	}
	s.steps++
	// The gradient partitions are not cleared for the next step: its
	// first micro-step copies into them (reducer.landOldest).
	res, err := s.step(in)
	if err != nil {
		return res, fmt.Errorf("stage 3: %w", err)
	}
	return res, nil
}

func (s *Strategy) step(in zcore.StepInput) (zcore.StepResult, error) {
	o := &s.o
	defer s.releaseGrad()
	if rc := s.c.Replicas; rc != nil && rc.Size() > 1 {
		// MiCS allreduce_mics_shard_grads: the shard groups' partitions,
		// each already averaged within its group, summed across groups at
		// the gradient-accumulation boundary.
		t0 := time.Now()
		if err := rc.AllReduce(o.Ctx, comm.F32(s.grad), comm.Sum).Wait(); err != nil {
			return zcore.StepResult{}, fmt.Errorf("all-reduce of the gradient partitions across shard groups: %w", err)
		}
		s.waits.Reduce += time.Since(t0)
	}
	if in.CheckOverflow {
		s.flag[0] = 0
		if lossscale.HasInfOrNaN(s.grad) {
			s.flag[0] = 1
		}
		if err := o.Comm.AllReduce(o.Ctx, comm.F32(s.flag), comm.Sum).Wait(); err != nil {
			return zcore.StepResult{}, fmt.Errorf("all-reduce of the overflow flag: %w", err)
		}
		if s.flag[0] != 0 {
			return zcore.StepResult{GradNorm: -1, Overflow: true}, nil
		}
	}
	// _get_norm_groups: per sub-group, the float64 norms of its
	// parameters' gradient partitions (padding included), squared and
	// summed, all-reduced, rooted.
	for g, ids := range s.lay.SubGroups {
		norms := s.norms[:len(ids)]
		for k, i := range ids {
			off := s.lay.Offsets[i]
			norms[k] = optim.Norm2F64(s.grad[off : off+s.lay.PartitionSizes[i]])
		}
		s.sums[g] = optim.Zero3LocalSumSq(norms, s.scratch)
	}
	if err := allReduceF64(o, s.sums, s.f64); err != nil {
		return zcore.StepResult{}, fmt.Errorf("all-reduce of the gradient norm: %w", err)
	}
	// scaled_global_grad_norm = torch.linalg.norm(torch.stack(norm_groups))
	var total float64
	for _, sum := range s.sums {
		ng := optim.Zero3Norm(sum)
		total += ng * ng
	}
	total = math.Sqrt(total)
	for _, sum := range s.sums {
		if optim.Zero3Norm(sum) < 0 {
			total = math.Inf(1)
		}
	}
	if math.IsInf(total, 0) || math.IsNaN(total) {
		if !in.CheckOverflow {
			return zcore.StepResult{}, zcore.Diverged(total)
		}
	}
	factor := optim.Zero3UnscaleFactor(total, in.LossScale, o.Clip)
	for g := range s.lay.SubGroups {
		lo, n := s.lay.SubGroupOffset(g), s.lay.SubGroupNumel(g)
		s.trace("step sub-group %d (%d elements)", g, n)
		grad := s.grad[lo : lo+n]
		o.Pool.Scale(grad, factor)
		master, err := s.optim.Step(g, grad, in.SetHyperparams)
		if err != nil {
			return zcore.StepResult{}, err
		}
		if err := s.params.Update(g, master); err != nil {
			return zcore.StepResult{}, err
		}
	}
	if s.hpz != nil {
		s.hpz.drop(o.Acct)
	}
	// _post_step: the persistent parameters are gathered again.
	if err := s.f.gatherPersistent(); err != nil {
		return zcore.StepResult{}, err
	}
	// The next pass's first units are read from the files just written
	// (a read issued after a write reads what it wrote).
	s.f.readAhead(0)
	return zcore.StepResult{GradNorm: total / in.LossScale}, nil
}

// allReduceF64 sums xs over the ranks in float64, in rank order: the
// float64 bit patterns are all-gathered (as 16-bit words, a pure copy) and
// added here, as the all_reduce of DeepSpeed's float64 norm tensor does.
// buf holds (1+world)·4·len(xs) words (no allocation per step).
func allReduceF64(o *zcore.Options, xs []float64, buf []uint16) error {
	world := o.Comm.Size()
	if world == 1 {
		return nil
	}
	mine, all := buf[:4*len(xs)], buf[4*len(xs):4*len(xs)*(1+world)]
	for i, x := range xs {
		b := math.Float64bits(x)
		for w := range 4 {
			mine[4*i+w] = uint16(b >> (16 * w))
		}
	}
	if err := o.Comm.AllGather(o.Ctx, comm.BF16(all), comm.BF16(mine)).Wait(); err != nil {
		return err
	}
	for i := range xs {
		var sum float64
		for r := range world {
			var b uint64
			for w := range 4 {
				b |= uint64(all[r*len(mine)+4*i+w]) << (16 * w)
			}
			if r == 0 {
				sum = math.Float64frombits(b)
			} else {
				sum += math.Float64frombits(b)
			}
		}
		xs[i] = sum
	}
	return nil
}

// GatherMaster writes the full fp32 master parameters into dst, unit by
// unit (a collective).
func (s *Strategy) GatherMaster(dst []float32) error {
	if len(dst) != s.l.Numel {
		return fmt.Errorf("stage 3: GatherMaster into %d elements for a model of %d", len(dst), s.l.Numel)
	}
	return s.optim.WithMaster(func(master []float32) error {
		for u := range s.l.Units {
			if err := s.f.gatherUnit(dst, master, u); err != nil {
				return fmt.Errorf("stage 3: gathering the fp32 master parameters of unit %q: %w", s.l.Units[u].Name, err)
			}
		}
		return nil
	})
}

// Close returns every buffer to the accountant; collectives still in
// flight (after a failed pass) are waited for first.
func (s *Strategy) Close() {
	s.r.close()
	s.f.close()
	if s.optim != nil {
		s.optim.Close() // kept: a closed store has no optimizers
	}
	if s.params != nil {
		s.params.Close()
	}
	s.freeGrad()
	if s.hpz != nil {
		s.hpz.drop(s.o.Acct)
	}
	s.o.Acct.Release(mem.Gathered, mem.Device, s.persistBytes)
	s.persistBytes = 0
	if s.full != nil {
		s.full.Close()
		s.full = nil
	}
	if s.grads != nil {
		s.grads.Close()
		s.grads = nil
	}
	if s.pages != nil {
		s.pages.Close()
		s.pages = nil
	}
}

// fitCache lets the page cache hold what the gathered parameters and the
// gradients have had live at most at once, less what they have live now
// (zcore.PageCache.SetRoom). In steady state a step then draws every
// page it gathers into or writes gradients to from the pages the last
// one released, instead of faulting in fresh pages the kernel must
// zero, and the cache never keeps the resident memory above the peak
// the step reaches anyway.
func (s *Strategy) fitCache() {
	if s.pages == nil {
		return // closed, or not made yet
	}
	live := s.f.live + s.r.ug.LiveNumel() + s.gradLive.tier + s.gradLive.dev
	s.peakLive = max(s.peakLive, live)
	s.pages.SetRoom((s.peakLive - live) / zcore.HugePageElems)
}

// trace reports an event to Config.Trace, if set.
func (s *Strategy) trace(format string, args ...any) {
	if s.c.Trace != nil {
		s.c.Trace(fmt.Sprintf(format, args...))
	}
}
