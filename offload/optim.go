package offload

import (
	"fmt"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/optim"
	"github.com/dszero/dszero/zero/partition"
)

// OptimConfig is what an optimizer-state store is built from.
type OptimConfig struct {
	Acct   *mem.Accountant
	Layout partition.Stage3Layout
	// Place is where the sub-groups live (MemoryOptim; SwappedOptim reads
	// each sub-group into Place.Tier for its step).
	Place Placement
	// NewOptimizer builds the optimizer of a sub-group of n elements in
	// Place.Tier (zcore.Options.NewOptimizer).
	NewOptimizer func(n int) (optim.Optimizer, error)
	// NewDeviceOptimizer builds the optimizer of a sub-group of n elements
	// that Place keeps on the device (partial offload's backup optimizer;
	// nil without partial offload).
	NewDeviceOptimizer func(n int) (optim.Optimizer, error)
	// Trace hears each sub-group's step and swaps (nil: nothing).
	Trace func(format string, args ...any)
}

func (c *OptimConfig) trace(format string, args ...any) {
	if c.Trace != nil {
		c.Trace(format, args...)
	}
}

// MemoryOptim keeps every sub-group's fp32 master partition and
// optimizer state in memory: on the device, in the pinned host with
// offload_optimizer cpu (ZeRO-Offload: the step runs on the host), or
// split between the two by partial offload's Placement.
type MemoryOptim struct {
	c      OptimConfig
	master []float32 // every sub-group's, in layout order (mem.MasterParams, unless shared)
	shared bool      // master is AliasedParams' buffer, accounted there
	opts   []optim.Optimizer
}

// NewMemoryOptim allocates the master partitions, initialized from init
// (the working partitions), and builds each sub-group's optimizer. With
// shared, init is itself the master (AliasedParams.Work): nothing is
// allocated or copied for it.
func NewMemoryOptim(c OptimConfig, init []float32, shared bool) (_ *MemoryOptim, err error) {
	m := &MemoryOptim{c: c, shared: shared}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if shared {
		m.master = init
	} else {
		if m.master, err = c.Place.Alloc(c.Acct, mem.MasterParams); err != nil {
			return nil, fmt.Errorf("stage 3: fp32 master partitions (%d elements): %w", c.Layout.RankNumel, err)
		}
		copy(m.master, init)
	}
	for g := range c.Layout.SubGroups {
		opt, err := m.newSubGroupOptimizer(g)
		if err != nil {
			return nil, err
		}
		m.opts = append(m.opts, opt)
	}
	return m, nil
}

// newSubGroupOptimizer builds sub-group g's optimizer in its tier.
func (m *MemoryOptim) newSubGroupOptimizer(g int) (optim.Optimizer, error) {
	n := m.c.Layout.SubGroupNumel(g)
	if m.c.Place.InTier(g) {
		return m.c.NewOptimizer(n)
	}
	opt, err := m.c.NewDeviceOptimizer(n)
	if err != nil {
		return nil, fmt.Errorf("stage 3: the device optimizer of sub-group %d (partial offload): %w", g, err)
	}
	return opt, nil
}

func (m *MemoryOptim) sub(g int) []float32 {
	lo, n := m.c.Layout.SubGroupOffset(g), m.c.Layout.SubGroupNumel(g)
	return m.master[lo : lo+n : lo+n]
}

// Step steps sub-group g's master with grad, its optimizer given the
// scheduler's hyperparameters first by setHyper (not partial offload's
// device optimizers: DeepSpeed's backup AdamW keeps the ones it was
// built with), and returns the stepped master, in place.
func (m *MemoryOptim) Step(g int, grad []float32, setHyper func(optim.Optimizer)) ([]float32, error) {
	master := m.sub(g)
	if m.c.Place.InTier(g) {
		setHyper(m.opts[g])
	}
	m.c.trace("  %s step of sub-group %d", m.opts[g].Name(), g)
	m.opts[g].Step(master, grad)
	return master, nil
}

// MasterParams is every sub-group's master, in place.
func (m *MemoryOptim) MasterParams() ([]float32, error) { return m.master, nil }

// WithMaster calls f with every sub-group's master, in place.
func (m *MemoryOptim) WithMaster(f func(master []float32) error) error { return f(m.master) }

// Export is a copy of sub-group g's master and optimizer state.
func (m *MemoryOptim) Export(g int) (zcore.GroupState, error) {
	return zcore.GroupState{Master: append([]float32(nil), m.sub(g)...), Optim: zcore.ExportOptim(m.opts[g])}, nil
}

// View is sub-group g's master and optimizer state in place
// (zcore.ViewOptim), valid until the next step.
func (m *MemoryOptim) View(g int) (zcore.GroupState, error) {
	return zcore.GroupState{Master: m.sub(g), Optim: zcore.ViewOptim(m.opts[g])}, nil
}

// Import restores sub-group g's master and optimizer state from gs
// (checked by zcore.StrategyState.Check).
func (m *MemoryOptim) Import(g int, gs zcore.GroupState) error {
	copy(m.sub(g), gs.Master)
	if err := zcore.ImportOptim(m.opts[g], gs.Optim); err != nil {
		return fmt.Errorf("stage 3: sub-group %d: %w", g, err)
	}
	return nil
}

// Scan calls visit with each sub-group's master ("master") and the
// optimizer state created so far (by torch name), in place; file is
// empty. An error from visit stops the scan and is returned.
func (m *MemoryOptim) Scan(visit func(group int, name, file string, values []float32) error) error {
	for g := range m.c.Layout.SubGroups {
		if err := visit(g, "master", "", m.sub(g)); err != nil {
			return err
		}
		opt := m.opts[g]
		for _, name := range opt.StateNames() {
			if v := opt.State(name); v != nil {
				if err := visit(g, name, "", v); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Optimizer is the optimizer of the first sub-group in Place.Tier (all
// of them share their hyperparameters; partial offload's device
// sub-groups' are another kind).
func (m *MemoryOptim) Optimizer() optim.Optimizer {
	switch {
	case len(m.opts) == 0:
		return nil
	case m.c.Place.Lo < m.c.Place.Hi:
		return m.opts[m.c.Place.Lo]
	}
	return m.opts[0]
}

// Optimizers are the sub-groups' optimizers, in order.
func (m *MemoryOptim) Optimizers() []optim.Optimizer { return m.opts }

// Close frees the optimizers and the master partitions.
func (m *MemoryOptim) Close() {
	for _, opt := range m.opts {
		opt.Free()
	}
	m.opts = nil
	if m.master != nil && !m.shared {
		m.c.Place.Free(m.c.Acct, mem.MasterParams)
	}
	m.master = nil
}
