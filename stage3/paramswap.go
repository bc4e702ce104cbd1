package stage3

import (
	"fmt"
	"time"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/nvme"
)

// paramSwap keeps the parameter partitions in swap files
// (offload_param nvme, ZeRO-Infinity): one file per parameter, read into
// the all-gather when its unit is gathered — read ahead along the trace
// when there is one (readahead.go) — and written after each step. The
// partitions of persistent parameters stay in memory. work, the
// rank-local buffer of every partition, is then a zcore.Pages whose
// non-persistent ranges are resident only while they are initialized or
// updated.
type paramSwap struct {
	sw    *nvme.Swapper
	pages *zcore.Pages
	hs    []*nvme.Handle

	// Reads ahead: per parameter, the read of its partition into a pool
	// buffer the stage holds (nil: none); held of them at once, at most
	// limit (buffer_count − 1, so that SwapIn and SwapOut always find a
	// buffer; 0 with NoParamReadAhead).
	ahead []*nvme.Handle
	held  int
	limit int
}

func paramKey(i int) string { return fmt.Sprintf("param%d", i) }

// swapOutParams writes the partitions of the non-persistent parameters
// first..last from work to their files and hands their memory back.
func (s *Strategy) swapOutParams(first, last int) error {
	ps := s.pswap
	ps.hs = ps.hs[:0]
	for i := first; i <= last; i++ {
		if s.persist[i] {
			continue
		}
		s.dropAhead(i) // read before this write: it would hold the old values
		off := s.lay.Offsets[i]
		ps.hs = append(ps.hs, ps.sw.SwapOut(paramKey(i), s.work[off:off+s.lay.PartitionSizes[i]]))
	}
	if err := nvme.WaitAll(ps.hs...); err != nil {
		return fmt.Errorf("stage 3: writing parameter partitions: %w", err)
	}
	for i := first; i <= last; i++ {
		if !s.persist[i] {
			off := s.lay.Offsets[i]
			ps.pages.Release(off, off+s.lay.PartitionSizes[i])
		}
	}
	return nil
}

// readPartition puts the rank's partition of parameter i into dst: from
// memory, or from its swap file — from the read started ahead of this
// gather when there is one (its error, naming the file, is returned
// here), else read now.
func (s *Strategy) readPartition(i int, dst []float32) error {
	off := s.lay.Offsets[i]
	if s.pswap == nil || s.persist[i] {
		copy(dst, s.work[off:off+len(dst)])
		return nil
	}
	ps := s.pswap
	s.waits.Reads++
	t0 := time.Now()
	h := ps.ahead[i]
	if h == nil {
		s.trace("  swap in the partition of %s", s.l.Specs[i].Name)
		err := ps.sw.SwapIn(paramKey(i), dst).Wait()
		s.waits.Read += time.Since(t0)
		if err != nil {
			return fmt.Errorf("stage 3: reading the partition of %s: %w", s.l.Specs[i].Name, err)
		}
		return nil
	}
	ps.ahead[i] = nil
	ps.held--
	s.trace("  take the partition of %s from its read ahead", s.l.Specs[i].Name)
	s.waits.ReadsAhead++
	if h.Done() {
		s.waits.ReadsReady++
	}
	err := h.Wait()
	s.waits.Read += time.Since(t0)
	b := h.Buffer()
	if err == nil && b.Len() != 4*len(dst) {
		err = fmt.Errorf("its file holds %d bytes, the partition %d elements", b.Len(), len(dst))
	}
	if err == nil {
		copy(dst, b.F32())
	}
	ps.sw.Release(b)
	if err != nil {
		return fmt.Errorf("stage 3: reading the partition of %s (read ahead of its gather): %w", s.l.Specs[i].Name, err)
	}
	return nil
}

// initParamSwap makes the parameter swapper (c.ParamSwap, buffers of the
// largest partition) and moves the initialized partitions to it.
func (s *Strategy) initParamSwap() error {
	largest, total := 0, int64(0)
	for i, n := range s.lay.PartitionSizes {
		if !s.persist[i] {
			largest = max(largest, n)
			total += 4 * int64(n)
		}
	}
	if total == 0 {
		return nil // every parameter is persistent: nothing to swap
	}
	sw, err := s.c.ParamSwap(4*int64(largest), total)
	if err != nil {
		return fmt.Errorf("stage 3: parameter swap files: %w", err)
	}
	s.pswap.sw = sw
	if !s.c.NoParamReadAhead {
		s.pswap.limit = sw.BufferCount() - 1
	}
	return s.swapOutParams(0, len(s.l.Specs)-1)
}

// close waits for the reads ahead, hands their buffers back, and closes
// the swapper.
func (ps *paramSwap) close() {
	for i, h := range ps.ahead {
		if h != nil {
			h.Wait()
			ps.sw.Release(h.Buffer())
			ps.ahead[i] = nil
		}
	}
	ps.held = 0
	if ps.sw != nil {
		ps.sw.Close()
		ps.sw = nil
	}
	if ps.pages != nil {
		ps.pages.Close()
		ps.pages = nil
	}
}
