package offload

import (
	"fmt"
	"time"

	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/partition"
)

// ParamConfig is what a parameter store is built from.
type ParamConfig struct {
	Acct   *mem.Accountant
	Layout partition.Stage3Layout
	// Persist marks the persistent parameters, whose partitions stay on
	// the device whatever the store (as in DeepSpeed).
	Persist []bool
	// Names are the parameters' names, for errors and the trace.
	Names []string
	// Round rounds the working partitions to the training precision after
	// each update (nil: fp32).
	Round func([]float32)
	// Tier is offload_param's tier for the non-persistent partitions held
	// in memory (MemoryParams): mem.Device, or mem.PinnedHost with
	// offload_param cpu.
	Tier mem.Tier
	// Trace hears each partition read or written (nil: nothing).
	Trace func(format string, args ...any)
}

func (c *ParamConfig) trace(format string, args ...any) {
	if c.Trace != nil {
		c.Trace(format, args...)
	}
}

// persistentNumel is the elements of the persistent parameters'
// partitions.
func (c *ParamConfig) persistentNumel() int {
	n := 0
	for i, p := range c.Persist {
		if p {
			n += c.Layout.PartitionSizes[i]
		}
	}
	return n
}

// update copies sub-group g's stepped master into work and rounds it.
func (c *ParamConfig) update(work []float32, g int, master []float32) {
	lo := c.Layout.SubGroupOffset(g)
	w := work[lo : lo+len(master)]
	copy(w, master)
	if c.Round != nil {
		c.Round(w)
	}
}

// Reads is where the compute thread waited for parameter partitions read
// from swap files for gathers, and how many it read (zero for the stores
// in memory).
type Reads struct {
	Wait   time.Duration // blocked on those reads
	Reads  int           // partitions read for gathers
	Ahead  int           // of them, started ahead by the trace
	Ready  int           // of those, already landed when their gather came
	Unused int           // reads ahead that no gather used
}

// MemoryParams keeps the working partitions in memory: the persistent
// ones accounted on the device, the rest in ParamConfig.Tier (one buffer,
// accounted in each tier).
type MemoryParams struct {
	c        ParamConfig
	work     []float32
	onDevice int // elements accounted on the device (the persistent partitions)
}

// NewMemoryParams allocates the working partitions (zeros: the caller
// initializes Work).
func NewMemoryParams(c ParamConfig) (*MemoryParams, error) {
	p := &MemoryParams{c: c, onDevice: c.persistentNumel()}
	if err := c.Acct.Reserve(mem.Params16, mem.Device, 4*int64(p.onDevice)); err != nil {
		return nil, fmt.Errorf("stage 3: persistent parameter partitions (%d elements): %w", p.onDevice, err)
	}
	n := c.Layout.RankNumel
	if err := c.Acct.Reserve(mem.Params16, c.Tier, 4*int64(n-p.onDevice)); err != nil {
		c.Acct.Release(mem.Params16, mem.Device, 4*int64(p.onDevice))
		return nil, fmt.Errorf("stage 3: parameter partitions (%d elements): %w", n-p.onDevice, err)
	}
	p.work = make([]float32, n)
	return p, nil
}

// Work is the rank-local working partitions, in layout order.
func (p *MemoryParams) Work() []float32 { return p.work }

// Commit does nothing: the partitions stay where they are.
func (p *MemoryParams) Commit() error { return nil }

// Read copies parameter i's partition into dst.
func (p *MemoryParams) Read(i int, dst []float32) error {
	off := p.c.Layout.Offsets[i]
	copy(dst, p.work[off:off+len(dst)])
	return nil
}

// CanReadAhead is false: there is nothing to read.
func (p *MemoryParams) CanReadAhead() bool { return false }

// ReadAhead does nothing (see CanReadAhead).
func (p *MemoryParams) ReadAhead(first, last int) bool { return false }

// DropAhead does nothing.
func (p *MemoryParams) DropAhead() {}

// Update writes sub-group g's stepped master into the working
// partitions, rounded.
func (p *MemoryParams) Update(g int, master []float32) error {
	p.c.update(p.work, g, master)
	return nil
}

// Load is Update: sub-group g's master, loaded from a checkpoint, into
// the working partitions, rounded.
func (p *MemoryParams) Load(g int, master []float32) error {
	p.c.update(p.work, g, master)
	return nil
}

// TakeReads is zero: nothing is read.
func (p *MemoryParams) TakeReads() Reads { return Reads{} }

// Close returns the partitions to the accountant.
func (p *MemoryParams) Close() {
	if p.work == nil {
		return
	}
	p.c.Acct.Release(mem.Params16, p.c.Tier, 4*int64(len(p.work)-p.onDevice))
	p.c.Acct.Release(mem.Params16, mem.Device, 4*int64(p.onDevice))
	p.work = nil
}

// AliasedParams is fp32 training without offload: the working
// partitions and the fp32 master hold the same values in the same tier,
// so one buffer serves both — the master, accounted once as
// mem.MasterParams on the device, which the optimizer-state store steps
// in place (NewMemoryOptim with shared) — where DeepSpeed keeps a copy of
// each (4Ψ/N bytes saved).
type AliasedParams struct {
	MemoryParams
}

// NewAliasedParams allocates the buffer (zeros: the caller initializes
// Work).
func NewAliasedParams(c ParamConfig) (*AliasedParams, error) {
	n := c.Layout.RankNumel
	if err := c.Acct.Reserve(mem.MasterParams, mem.Device, 4*int64(n)); err != nil {
		return nil, fmt.Errorf("stage 3: fp32 master partitions, the working ones (%d elements): %w", n, err)
	}
	return &AliasedParams{MemoryParams{c: c, work: make([]float32, n)}}, nil
}

// Update does nothing: the master was stepped in place, and is the
// working partitions.
func (p *AliasedParams) Update(g int, master []float32) error { return nil }

// Close returns the buffer to the accountant.
func (p *AliasedParams) Close() {
	if p.work == nil {
		return
	}
	p.c.Acct.Release(mem.MasterParams, mem.Device, 4*int64(len(p.work)))
	p.work = nil
}
