package stage3

import (
	"errors"
	"fmt"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/offload"
	"github.com/dszero/dszero/zero/optim"
	"github.com/dszero/dszero/zero/partition"
)

// PartialOffload is zero_optimization.offload_optimizer.ratio below 1
// with device cpu: only some sub-groups keep their fp32 master, gradient
// partition and optimizer state in Config.OptimizerTier (the pinned host)
// and are stepped by zcore.Options.NewOptimizer's optimizer (DeepSpeed's
// DeepSpeedCPUAdam); the others keep all three on the device and are
// stepped by NewOptimizer here — DeepSpeed's backup torch.optim.AdamW,
// built once from the host optimizer's first param group and never
// touched by the scheduler, so these sub-groups keep the lr and betas
// they were built with.
type PartialOffload struct {
	// Ratio is the fraction of the sub-groups offloaded, in [0, 1].
	Ratio float64
	// Order is the DeepSpeed release's rule for which sub-groups those are
	// (partition.OffloadOrder.HostSubGroups).
	Order partition.OffloadOrder
	// NewOptimizer builds the optimizer of a sub-group of n elements kept
	// on the device, its state allocated in mem.Device.
	NewOptimizer func(n int) (optim.Optimizer, error)
}

// optimStore holds the sub-groups' fp32 master partitions and optimizer
// state between steps and takes each sub-group's step (package offload:
// in memory, or in swap files).
type optimStore interface {
	// Step steps sub-group g with its gradient partition (the optimizer
	// given the scheduler's hyperparameters by setHyper where DeepSpeed
	// does) and returns the stepped master.
	Step(g int, grad []float32, setHyper func(optim.Optimizer)) ([]float32, error)
	// MasterParams is every sub-group's master, in place or a copy.
	MasterParams() ([]float32, error)
	// WithMaster calls f with every sub-group's master (a temporary,
	// accounted, where it is not in memory).
	WithMaster(f func(master []float32) error) error
	Export(g int) (zcore.GroupState, error)
	View(g int) (zcore.GroupState, error)
	Import(g int, gs zcore.GroupState) error
	Scan(visit func(group int, name, file string, values []float32) error) error
	Optimizer() optim.Optimizer
	Optimizers() []optim.Optimizer
	// BeginLoad starts a checkpoint's load into the store's own
	// storage, if check passes, and reports whether it takes one
	// (load.go): then LoadTensor takes each fp32 tensor (a master also
	// goes to putMaster), EndLoad waits for them, and ImportLoaded
	// completes the load with the step counts after its check; false
	// where a loader reads into View's buffers and Import takes them.
	BeginLoad(check func() error) (bool, error)
	LoadTensor(g int, name string, read func(dst []float32) error, putMaster func(master []float32) error) error
	EndLoad(err error) error
	ImportLoaded(groups []zcore.GroupState, check func(incomplete error) error) error
	Close()
}

var (
	_ optimStore = (*offload.MemoryOptim)(nil)
	_ optimStore = (*offload.SwappedOptim)(nil)
)

// placement is where the sub-groups' optimizer side lives: every one in
// OptimizerTier unless c.Partial says otherwise.
func placement(lay partition.Stage3Layout, c Config) (offload.Placement, error) {
	lo, hi := 0, len(lay.SubGroups)
	if c.Partial != nil {
		if c.Swap != nil {
			return offload.Placement{}, errors.New("stage 3: partial optimizer offload and NVMe optimizer swap together")
		}
		if !(c.Partial.Ratio >= 0 && c.Partial.Ratio <= 1) || c.Partial.NewOptimizer == nil {
			return offload.Placement{}, fmt.Errorf("stage 3: partial offload needs a ratio in [0, 1] and a device optimizer, got %+v", *c.Partial)
		}
		lo, hi = c.Partial.Order.HostSubGroups(len(lay.SubGroups), c.Partial.Ratio)
	}
	return offload.Place(lay, c.OptimizerTier, lo, hi), nil
}

// paramStore holds the rank's working partitions (in the training
// precision) between gathers (package offload: in memory, aliased to the
// fp32 master, or in swap files).
type paramStore interface {
	// Work is the rank-local working partitions, in layout order: New
	// initializes them, the persistent ones are gathered from it.
	Work() []float32
	// Commit moves the initialized partitions to where they live.
	Commit() error
	// Read puts parameter i's partition into dst (its gather's input).
	Read(i int, dst []float32) error
	// CanReadAhead reports whether ReadAhead could start a read now;
	// ReadAhead starts reading the partitions of parameters first..last
	// and returns false once it can start no more; DropAhead abandons
	// the reads no gather took (readahead.go).
	CanReadAhead() bool
	ReadAhead(first, last int) bool
	DropAhead()
	// Update writes sub-group g's stepped master into its working
	// partitions, rounded (and on to where they live).
	Update(g int, master []float32) error
	// Load is Update for a master loaded from a checkpoint (load.go),
	// bounded in what it keeps resident at once where the partitions
	// live in swap files.
	Load(g int, master []float32) error
	TakeReads() offload.Reads
	Close()
}

var (
	_ paramStore = (*offload.MemoryParams)(nil)
	_ paramStore = (*offload.AliasedParams)(nil)
	_ paramStore = (*offload.SwappedParams)(nil)
)

// newParamStore builds the parameter store the configuration asks for.
func (s *Strategy) newParamStore() (paramStore, error) {
	names := make([]string, len(s.l.Specs))
	for i, sp := range s.l.Specs {
		names[i] = sp.Name
	}
	pc := offload.ParamConfig{Acct: s.o.Acct, Layout: s.lay, Persist: s.persist, Names: names, Round: s.o.Round, Tier: s.c.ParamTier, Trace: s.trace}
	c := s.c
	switch {
	case c.ParamSwap != nil:
		return asParams(offload.NewSwappedParams(pc, c.ParamSwap, c.NoParamReadAhead))
	case s.o.Round == nil && c.Swap == nil && c.Partial == nil && c.OptimizerTier == mem.Device && c.ParamTier == mem.Device:
		// fp32 without offload: one buffer is both the working partitions
		// and the master (offload.AliasedParams).
		return asParams(offload.NewAliasedParams(pc))
	}
	return asParams(offload.NewMemoryParams(pc))
}

// newOptimStore builds the optimizer-state store the configuration asks
// for, its masters initialized from the working partitions (which are
// the master itself with offload.AliasedParams).
func (s *Strategy) newOptimStore() (optimStore, error) {
	oc := offload.OptimConfig{Acct: s.o.Acct, Layout: s.lay, Place: s.place, NewOptimizer: s.o.NewOptimizer, Trace: s.trace}
	if s.c.Partial != nil {
		oc.NewDeviceOptimizer = s.c.Partial.NewOptimizer
	}
	if s.c.Swap != nil {
		return asOptim(offload.NewSwappedOptim(oc, s.params.Work(), s.c.Swap))
	}
	_, shared := s.params.(*offload.AliasedParams)
	return asOptim(offload.NewMemoryOptim(oc, s.params.Work(), shared))
}

// asParams and asOptim return a store that failed to build as a nil
// interface, not one holding a nil pointer (Close must not see it).
func asParams[P paramStore](p P, err error) (paramStore, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}

func asOptim[O optimStore](o O, err error) (optimStore, error) {
	if err != nil {
		return nil, err
	}
	return o, nil
}
