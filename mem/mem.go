package mem

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Category is what a buffer holds.
type Category int

const (
	Params16     Category = iota // 16-bit (or working-precision) model parameters
	MasterParams                 // fp32 master copy of the parameters
	Grads                        // gradients (working precision or fp32 accumulation)
	OptimState                   // optimizer state (Adam exp_avg, exp_avg_sq, momentum)
	Activations                  // activations saved for backward
	Comm                         // communication buffers (buckets, gathered parameters)
	Temp                         // short-lived temporaries
	Gathered                     // ZeRO-3 parameters gathered in full (units in use, persistent parameters)
	numCategories
)

var categoryNames = [...]string{"params16", "master_params", "grads", "optim_state", "activations", "comm", "temp", "gathered"}

func (c Category) String() string {
	if c < 0 || c >= numCategories {
		return fmt.Sprintf("Category(%d)", int(c))
	}
	return categoryNames[c]
}

// Categories lists every category in order.
func Categories() []Category {
	out := make([]Category, numCategories)
	for i := range out {
		out[i] = Category(i)
	}
	return out
}

// Tier is where a buffer lives.
type Tier int

const (
	Device     Tier = iota // accelerator memory (on the CPU backend: the rank's working memory)
	PinnedHost             // page-locked host memory (ZeRO-Offload)
	NVMe                   // swap files on a local disk (ZeRO-Infinity)
	numTiers
)

var tierNames = [...]string{"device", "pinned_host", "nvme"}

func (t Tier) String() string {
	if t < 0 || t >= numTiers {
		return fmt.Sprintf("Tier(%d)", int(t))
	}
	return tierNames[t]
}

// Tiers lists every tier in order.
func Tiers() []Tier {
	out := make([]Tier, numTiers)
	for i := range out {
		out[i] = Tier(i)
	}
	return out
}

// Unlimited is the capacity of a tier without a budget.
const Unlimited int64 = -1

// Accountant keeps live and peak bytes for one rank.
type Accountant struct {
	rank int

	mu        sync.Mutex
	capacity  [numTiers]int64
	live      [numTiers][numCategories]int64
	peak      [numTiers][numCategories]int64
	liveTotal [numTiers]int64
	peakTotal [numTiers]int64
}

// NewAccountant returns an accountant for rank with unlimited tiers.
func NewAccountant(rank int) *Accountant {
	a := &Accountant{rank: rank}
	for i := range a.capacity {
		a.capacity[i] = Unlimited
	}
	return a
}

// Rank is the rank this accountant belongs to.
func (a *Accountant) Rank() int { return a.rank }

// SetCapacity sets the byte budget of a tier (Unlimited for none).
func (a *Accountant) SetCapacity(t Tier, bytes int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.capacity[t] = bytes
}

// Capacity is the byte budget of a tier, or Unlimited.
func (a *Accountant) Capacity(t Tier) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.capacity[t]
}

// Reserve accounts bytes of category c in tier t. It fails with an
// *OOMError when the tier's capacity would be exceeded; nothing is
// accounted then.
func (a *Accountant) Reserve(c Category, t Tier, bytes int64) error {
	if bytes < 0 {
		panic(fmt.Sprintf("mem: negative reservation %d", bytes))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if cap := a.capacity[t]; cap != Unlimited && a.liveTotal[t]+bytes > cap {
		e := &OOMError{Rank: a.rank, Category: c, Tier: t, Requested: bytes, Capacity: cap, Live: a.liveTotal[t]}
		for _, cat := range Categories() {
			if v := a.live[t][cat]; v > 0 {
				e.LiveByCategory = append(e.LiveByCategory, CategoryBytes{cat, v})
			}
		}
		return e
	}
	a.live[t][c] += bytes
	if a.live[t][c] > a.peak[t][c] {
		a.peak[t][c] = a.live[t][c]
	}
	a.liveTotal[t] += bytes
	if a.liveTotal[t] > a.peakTotal[t] {
		a.peakTotal[t] = a.liveTotal[t]
	}
	return nil
}

// Release returns bytes of category c in tier t. Releasing more than is
// live is a programmer error.
func (a *Accountant) Release(c Category, t Tier, bytes int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if bytes < 0 || a.live[t][c] < bytes {
		panic(fmt.Sprintf("mem: rank %d releases %d bytes of %s/%s with %d live", a.rank, bytes, t, c, a.live[t][c]))
	}
	a.live[t][c] -= bytes
	a.liveTotal[t] -= bytes
}

// ResetPeaks sets every peak to the current live value (to measure one phase).
func (a *Accountant) ResetPeaks() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.peak = a.live
	a.peakTotal = a.liveTotal
}

// Snapshot is a copy of the accountant's counters.
type Snapshot struct {
	Rank      int
	Live      [numTiers][numCategories]int64
	Peak      [numTiers][numCategories]int64
	LiveTotal [numTiers]int64
	PeakTotal [numTiers]int64 // peak of the tier's total, not the sum of category peaks
}

// Snapshot returns the current counters.
func (a *Accountant) Snapshot() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Snapshot{Rank: a.rank, Live: a.live, Peak: a.peak, LiveTotal: a.liveTotal, PeakTotal: a.peakTotal}
}

// LiveBytes is the live byte count of one category in one tier.
func (s Snapshot) LiveBytes(t Tier, c Category) int64 { return s.Live[t][c] }

// PeakBytes is the peak byte count of one category in one tier.
func (s Snapshot) PeakBytes(t Tier, c Category) int64 { return s.Peak[t][c] }

// CategoryBytes pairs a category with a byte count.
type CategoryBytes struct {
	Category Category
	Bytes    int64
}

// OOMError is an allocation that would exceed a tier's capacity.
type OOMError struct {
	Rank           int
	Category       Category
	Tier           Tier
	Requested      int64
	Capacity       int64
	Live           int64
	LiveByCategory []CategoryBytes
}

func (e *OOMError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "out of %s memory on rank %d: allocating %s of %s with %s of %s live",
		e.Tier, e.Rank, FormatBytes(e.Requested), e.Category, FormatBytes(e.Live), FormatBytes(e.Capacity))
	live := append([]CategoryBytes(nil), e.LiveByCategory...)
	sort.SliceStable(live, func(i, j int) bool { return live[i].Bytes > live[j].Bytes })
	if len(live) > 0 {
		b.WriteString(" (")
		for i, cb := range live {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %s", cb.Category, FormatBytes(cb.Bytes))
		}
		b.WriteString(")")
	}
	b.WriteString("; a higher ZeRO stage, offload, a smaller micro-batch or activation checkpointing would lower it")
	return b.String()
}

// FormatBytes writes n in binary units (KiB, MiB, GiB).
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit && f > -unit || u == "TiB" {
			return fmt.Sprintf("%.2f %s", f, u)
		}
	}
	return fmt.Sprintf("%d B", n)
}
