package offload

import (
	"fmt"
	"time"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/nvme"
)

// SwappedParams keeps the working partitions in swap files
// (offload_param nvme, ZeRO-Infinity): one file per parameter, read into
// the all-gather when its unit is gathered — or read ahead, when the
// caller knows what comes next (ReadAhead) — and written after each
// step. The partitions of persistent parameters stay in memory, on the
// device. Work, the rank-local buffer of every partition, is a
// zcore.Pages whose non-persistent ranges are resident only while they
// are initialized or updated.
type SwappedParams struct {
	c          ParamConfig
	newSwapper func(largestBytes, totalBytes int64) (*nvme.Swapper, error)
	sw         *nvme.Swapper // nil before Commit, or with every parameter persistent
	pages      *zcore.Pages
	onDevice   int // elements accounted on the device (the persistent partitions)
	hs         []*nvme.Handle
	reads      Reads // since the last TakeReads

	// Reads ahead: per parameter, the read of its partition into a pool
	// buffer the store holds (nil: none); held of them at once, at most
	// limit (buffer_count − 1, so that SwapIn and SwapOut always find a
	// buffer; 0 without read-ahead).
	ahead   []*nvme.Handle
	held    int
	limit   int
	noAhead bool
}

func paramKey(i int) string { return fmt.Sprintf("param%d", i) }

// NewSwappedParams allocates the working partitions' pages (zeros: the
// caller initializes Work, then calls Commit). newSwapper makes the
// swapper, given the largest partition's and all the files' bytes (the
// store closes it); noReadAhead turns reading ahead off.
func NewSwappedParams(c ParamConfig, newSwapper func(largestBytes, totalBytes int64) (*nvme.Swapper, error), noReadAhead bool) (*SwappedParams, error) {
	p := &SwappedParams{c: c, newSwapper: newSwapper, onDevice: c.persistentNumel(), ahead: make([]*nvme.Handle, len(c.Persist)), noAhead: noReadAhead}
	if err := c.Acct.Reserve(mem.Params16, mem.Device, 4*int64(p.onDevice)); err != nil {
		return nil, fmt.Errorf("stage 3: persistent parameter partitions (%d elements): %w", p.onDevice, err)
	}
	// On NVMe (the swapper accounts the files): work is resident only
	// where it is being written.
	var err error
	if p.pages, err = zcore.NewPages(c.Layout.RankNumel); err != nil {
		c.Acct.Release(mem.Params16, mem.Device, 4*int64(p.onDevice))
		return nil, fmt.Errorf("stage 3: parameter partitions: %w", err)
	}
	return p, nil
}

// Work is the rank-local working partitions, in layout order: resident
// where written since the last Commit or Update.
func (p *SwappedParams) Work() []float32 { return p.pages.F32() }

// Commit makes the swapper (buffers of the largest partition) and moves
// the initialized partitions to it.
func (p *SwappedParams) Commit() error {
	largest, total := 0, int64(0)
	for i, n := range p.c.Layout.PartitionSizes {
		if !p.c.Persist[i] {
			largest = max(largest, n)
			total += 4 * int64(n)
		}
	}
	if total == 0 {
		return nil // every parameter is persistent: nothing to swap
	}
	sw, err := p.newSwapper(4*int64(largest), total)
	if err != nil {
		return fmt.Errorf("stage 3: parameter swap files: %w", err)
	}
	p.sw = sw
	if !p.noAhead {
		p.limit = sw.BufferCount() - 1
	}
	return p.swapOut(0, len(p.c.Persist)-1)
}

// swapOut writes the partitions of the non-persistent parameters
// first..last from work to their files and hands their memory back.
func (p *SwappedParams) swapOut(first, last int) error {
	lay, work := p.c.Layout, p.pages.F32()
	p.hs = p.hs[:0]
	for i := first; i <= last; i++ {
		if p.c.Persist[i] {
			continue
		}
		p.dropAhead(i) // read before this write: it would hold the old values
		off := lay.Offsets[i]
		p.hs = append(p.hs, p.sw.SwapOut(paramKey(i), work[off:off+lay.PartitionSizes[i]]))
	}
	if err := nvme.WaitAll(p.hs...); err != nil {
		return fmt.Errorf("stage 3: writing parameter partitions: %w", err)
	}
	for i := first; i <= last; i++ {
		if !p.c.Persist[i] {
			off := lay.Offsets[i]
			p.pages.Release(off, off+lay.PartitionSizes[i])
		}
	}
	return nil
}

// Update writes sub-group g's stepped master into the working
// partitions, rounded, then their non-persistent partitions to their
// files (handing the memory back).
func (p *SwappedParams) Update(g int, master []float32) error {
	p.c.update(p.pages.F32(), g, master)
	ids := p.c.Layout.SubGroups[g]
	p.c.trace("  swap out sub-group %d's parameter partitions", g)
	return p.swapOut(ids[0], ids[len(ids)-1])
}

// loadPiece is the most elements of working partitions Load makes
// resident at once (32 MiB of them, or one partition when it is
// larger).
const loadPiece = 8 << 20

// Load writes sub-group g's master, loaded from a checkpoint, into the
// working partitions, rounded, and on to their files a few partitions
// at a time (loadPiece elements): each piece is written and its memory
// handed back before the next is filled, so that the partitions
// resident at once do not grow with the sub-group (Update makes the
// whole sub-group resident: its master is in memory anyway).
func (p *SwappedParams) Load(g int, master []float32) error {
	lay, work := p.c.Layout, p.pages.F32()
	ids, lo := lay.SubGroups[g], lay.SubGroupOffset(g)
	first := 0 // ids[first:k+1] are the partitions of the next piece
	for k, id := range ids {
		start, end := lay.Offsets[ids[first]], lay.Offsets[id]+lay.PartitionSizes[id]
		if k < len(ids)-1 && (p.sw == nil || end-start < loadPiece) {
			continue
		}
		w := work[start:end]
		copy(w, master[start-lo:end-lo])
		if p.c.Round != nil {
			p.c.Round(w)
		}
		if p.sw != nil {
			if err := p.swapOut(ids[first], id); err != nil {
				return err
			}
		}
		first = k + 1
	}
	return nil
}

// Read puts the rank's partition of parameter i into dst: from memory
// (a persistent one), or from its swap file — from the read started
// ahead of this gather when there is one (its error, naming the file,
// is returned here), else read now.
func (p *SwappedParams) Read(i int, dst []float32) error {
	off := p.c.Layout.Offsets[i]
	if p.c.Persist[i] {
		copy(dst, p.pages.F32()[off:off+len(dst)])
		return nil
	}
	p.reads.Reads++
	t0 := time.Now()
	h := p.ahead[i]
	if h == nil {
		p.c.trace("  swap in the partition of %s", p.c.Names[i])
		err := p.sw.SwapIn(paramKey(i), dst).Wait()
		p.reads.Wait += time.Since(t0)
		if err != nil {
			return fmt.Errorf("stage 3: reading the partition of %s: %w", p.c.Names[i], err)
		}
		return nil
	}
	p.ahead[i] = nil
	p.held--
	p.c.trace("  take the partition of %s from its read ahead", p.c.Names[i])
	p.reads.Ahead++
	if h.Done() {
		p.reads.Ready++
	}
	err := h.Wait()
	p.reads.Wait += time.Since(t0)
	b := h.Buffer()
	if err == nil && b.Len() != 4*len(dst) {
		err = fmt.Errorf("its file holds %d bytes, the partition %d elements", b.Len(), len(dst))
	}
	if err == nil {
		copy(dst, b.F32())
	}
	p.sw.Release(b)
	if err != nil {
		return fmt.Errorf("stage 3: reading the partition of %s (read ahead of its gather): %w", p.c.Names[i], err)
	}
	return nil
}

// CanReadAhead reports whether a read ahead could start now: there are
// swap files, and a free read-ahead buffer.
func (p *SwappedParams) CanReadAhead() bool { return p.sw != nil && p.held < p.limit }

// ReadAhead starts reading the partitions of the non-persistent
// parameters first..last that are not read ahead already, each into a
// pool buffer the store holds until Read takes it or DropAhead drops it
// (nvme.Swapper.Prefetch). It returns false when it ran out of
// read-ahead buffers (or the swapper refused one): the caller stops
// walking.
func (p *SwappedParams) ReadAhead(first, last int) bool {
	for i := first; i <= last; i++ {
		if p.c.Persist[i] || p.ahead[i] != nil {
			continue
		}
		if p.held >= p.limit {
			return false
		}
		h, err := p.sw.Prefetch(paramKey(i))
		if err != nil {
			// No buffer (held < limit makes that impossible) or a closed
			// swapper: the gather reads the partition itself and reports
			// what is wrong.
			return false
		}
		p.c.trace("read ahead the partition of %s", p.c.Names[i])
		p.ahead[i] = h
		p.held++
	}
	return true
}

// dropAhead abandons the read ahead of parameter i's partition, if any:
// waits for it and hands its buffer back. Nothing uses the data, nor
// its error: the next read of that file is a fresh one and reports its
// own.
func (p *SwappedParams) dropAhead(i int) {
	h := p.ahead[i]
	if h == nil {
		return
	}
	h.Wait()
	p.c.trace("drop the unused read ahead of %s", p.c.Names[i])
	p.sw.Release(h.Buffer())
	p.ahead[i] = nil
	p.held--
	p.reads.Unused++
}

// DropAhead abandons every read ahead (the end of a pass, a departure
// from the trace).
func (p *SwappedParams) DropAhead() {
	if p.held == 0 {
		return
	}
	for i := range p.ahead {
		p.dropAhead(i)
	}
}

// Held is how many reads ahead the store holds.
func (p *SwappedParams) Held() int { return p.held }

// TakeReads returns the reads since the last call and starts counting
// anew.
func (p *SwappedParams) TakeReads() Reads {
	r := p.reads
	p.reads = Reads{}
	return r
}

// Close waits for the reads ahead, hands their buffers back, closes the
// swapper and returns the partitions' memory.
func (p *SwappedParams) Close() {
	for i, h := range p.ahead {
		if h != nil {
			h.Wait()
			p.sw.Release(h.Buffer())
			p.ahead[i] = nil
		}
	}
	p.held = 0
	if p.sw != nil {
		p.sw.Close()
		p.sw = nil
	}
	if p.pages != nil {
		p.pages.Close()
		p.pages = nil
		p.c.Acct.Release(mem.Params16, mem.Device, 4*int64(p.onDevice))
	}
}
