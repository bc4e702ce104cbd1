package stage3

import (
	"fmt"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/nvme"
)

// paramSwap keeps the parameter partitions in swap files
// (offload_param nvme, ZeRO-Infinity): one file per parameter, read
// straight into the all-gather when its unit is gathered and written
// after each step. The partitions of persistent parameters stay in
// memory. work, the rank-local buffer of every partition, is then a
// zcore.Pages whose non-persistent ranges are resident only while they
// are initialized or updated.
type paramSwap struct {
	sw    *nvme.Swapper
	pages *zcore.Pages
	hs    []*nvme.Handle
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
// memory, or from its swap file.
func (s *Strategy) readPartition(i int, dst []float32) error {
	off := s.lay.Offsets[i]
	if s.pswap == nil || s.persist[i] {
		copy(dst, s.work[off:off+len(dst)])
		return nil
	}
	if err := s.pswap.sw.SwapIn(paramKey(i), dst).Wait(); err != nil {
		return fmt.Errorf("stage 3: reading the partition of %s: %w", s.l.Specs[i].Name, err)
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
	return s.swapOutParams(0, len(s.l.Specs)-1)
}

func (ps *paramSwap) close() {
	if ps.sw != nil {
		ps.sw.Close()
		ps.sw = nil
	}
	if ps.pages != nil {
		ps.pages.Close()
		ps.pages = nil
	}
}
