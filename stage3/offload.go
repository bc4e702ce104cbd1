package stage3

import (
	"errors"
	"fmt"

	"github.com/dszero/dszero/internal/zcore"
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
	// BeginLoad starts a checkpoint's load into the store's own storage,
	// if check passes, and reports whether it takes one (load.go): then LoadTensor takes
	// each fp32 tensor (a master also goes to putMaster), EndLoad waits
	// for them, and ImportLoaded completes the load with the step counts
	// after check; false where a loader reads into View's buffers and
	// Import takes them.
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

// newOptimStore builds the optimizer-state store the configuration asks
// for, its masters initialized from work (which is the master itself
// when shared: fp32 training without offload).
func (s *Strategy) newOptimStore(work []float32, shared bool) (optimStore, error) {
	oc := offload.OptimConfig{Acct: s.o.Acct, Layout: s.lay, Place: s.place, NewOptimizer: s.o.NewOptimizer, Trace: s.trace}
	if s.c.Partial != nil {
		oc.NewDeviceOptimizer = s.c.Partial.NewOptimizer
	}
	if s.c.Swap != nil {
		st, err := offload.NewSwappedOptim(oc, work, s.c.Swap)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return st, nil
	}
	st, err := offload.NewMemoryOptim(oc, work, shared)
	if err != nil {
		return nil, err
	}
	return st, nil
}
