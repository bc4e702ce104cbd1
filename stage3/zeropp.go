package stage3

import (
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/partition"
	"github.com/dszero/dszero/zero/quant"
)

// ZeRO++ qwZ (zero_quantized_weights): the all-gather of a unit group's
// parameters carries int8 values and one float32 scale per block instead
// of the 16-bit values, as DeepSpeed 0.14.5's all_gather_coalesced with
// quantize=True runs it (partition_parameters.py, CUDAQuantizer; the
// arithmetic is package quant's):
//
//   - each rank concatenates its partitions of the group's non-persistent
//     parameters (parameter order, each padded to its partition size: P
//     elements), quantizes them in quant.WeightGroups(P) symmetric 8-bit
//     groups, and all-gathers the bytes and the scales;
//   - every rank dequantizes every rank's bytes, its own included, to
//     fp16, and the parameters are those values until they are released:
//     the partitions and the fp32 master are untouched, and the gathered
//     weights are the same on every rank.
//
// A group with one such parameter is DeepSpeed's single-parameter path:
// its gathered bytes are cut to the parameter's numel before they are
// dequantized, so the dequantizer's group length is numel/(world·groups)
// rounded down (the same as the quantizer's when numel splits evenly;
// shorter otherwise, the scales shifting towards the end). dszero
// dequantizes the same way, and refuses at New a parameter for which that
// would read past the gathered scales, as DeepSpeed's kernel does with
// memory it never wrote.
//
// The persistent parameters are gathered exactly (gatherPersistent), as
// DeepSpeed gathers them after every step; DeepSpeed's very first gather
// of them, in the first forward, is quantized with their unit's other
// parameters, so the first step's forward may differ from dszero's in
// them. The conformance cases set stage3_param_persistence_threshold 0.
//
// DeepSpeed's kernels read the tensor as fp16 whatever its dtype
// (pt_binding.cpp casts data_ptr to __half*), so qwZ and qgZ run with
// fp16 only; the engine refuses them otherwise.
type weightQuant struct {
	plans map[int][]qwPlan // world (the primary world, or the hpZ group's) → per group
	spare [][]uint16       // landed flights' wire buffers
}

// qwPlan is one group's quantized gather on a world of ranks.
type qwPlan struct {
	p      int // elements each rank contributes (Σ partition sizes)
	groups int // quantization groups of each rank's p
	t      int // elements dequantized: world·p, or the one parameter's numel
	per    int // the dequantizer's group length: t/(world·groups)
	words  int // wire words of one rank: quant.WordsFor(p, groups)
}

// qflight is a quantized gather in flight.
type qflight struct {
	wire  []uint16 // world slots of plan.words
	plan  qwPlan
	world int
}

// newWeightQuant plans every group's quantized gather on each world, and
// refuses, naming the unit, what DeepSpeed's quantizer asserts against.
func newWeightQuant(s *Strategy, worlds ...int) (*weightQuant, error) {
	w := &weightQuant{plans: map[int][]qwPlan{}}
	for _, world := range worlds {
		if _, ok := w.plans[world]; ok {
			continue
		}
		plans := make([]qwPlan, len(s.groups))
		for g := range s.groups {
			gr := &s.groups[g]
			var pl qwPlan
			count, numel := 0, 0
			for i := gr.First; i <= gr.Last; i++ {
				if s.persist[i] {
					continue
				}
				count++
				numel = s.l.Specs[i].Numel
				pl.p += partition.ParamPartitionSize(numel, world)
			}
			if count == 0 {
				plans[g] = pl
				continue
			}
			var err error
			if pl.groups, err = quant.WeightGroups(pl.p); err != nil {
				return nil, fmt.Errorf("stage 3: zero_quantized_weights: unit %q (%d parameter elements per rank on %d ranks): %w", gr.Name, pl.p, world, err)
			}
			pl.t = world * pl.p
			if count == 1 {
				pl.t = numel
			}
			pl.per = pl.t / (world * pl.groups)
			if pl.per == 0 || (pl.t-1)/pl.per >= world*pl.groups {
				return nil, fmt.Errorf("stage 3: zero_quantized_weights: unit %q gathers one parameter of %d elements, which does not split evenly over %d ranks: DeepSpeed 0.14.5 dequantizes it in groups of %d elements, reading past its %d scales; use a world that divides it, or turn qwZ off", gr.Name, numel, world, pl.per, world*pl.groups)
			}
			pl.words = quant.WordsFor(pl.p, pl.groups)
			plans[g] = pl
		}
		w.plans[world] = plans
	}
	return w, nil
}

// gatherQuantized is issue's quantized all-gather of group g on c (world
// ranks, this one rank): the rank's partitions read, quantized and put on
// the wire. On an error reading a partition the flight holds what was
// issued (nothing), for land to return.
func (f *fetcher) gatherQuantized(fl *flight, g int, c comm.Comm, world, rank int, hpz bool) error {
	s := f.s
	pl := s.qw.plans[world][g]
	if pl.p == 0 {
		return nil
	}
	mine, err := f.getStaging(pl.p)
	if err != nil {
		return err
	}
	defer f.putStaging(mine)
	gr := &s.groups[g]
	off := 0
	for i := gr.First; i <= gr.Last; i++ {
		if s.persist[i] {
			continue
		}
		ps := partition.ParamPartitionSize(s.l.Specs[i].Numel, world)
		dst := mine[off : off+ps]
		if hpz {
			copy(dst, s.hpz.bufs[i])
		} else if err := s.readPartition(i, dst); err != nil {
			return err
		}
		off += ps
	}
	if err := s.o.Acct.Reserve(mem.Comm, mem.Device, 2*int64(world*pl.words)+int64(pl.p)+4*int64(pl.groups)); err != nil {
		return err
	}
	defer s.o.Acct.Release(mem.Comm, mem.Device, int64(pl.p)+4*int64(pl.groups))
	q := &qflight{plan: pl, world: world, wire: s.qw.getWire(world * pl.words)}
	bytes, scales := make([]byte, pl.p), make([]float32, pl.groups)
	quant.Quantize(bytes, scales, mine, 8)
	slot := q.wire[rank*pl.words : (rank+1)*pl.words]
	quant.PutWords(slot, bytes, scales)
	fl.q = q
	fl.hs = append(fl.hs, c.AllGather(s.o.Ctx, comm.BF16(q.wire), comm.BF16(slot)))
	return nil
}

// landQuantized dequantizes a landed quantized gather of group g into
// the full buffer, to fp16, every rank's partitions.
func (f *fetcher) landQuantized(g int, q *qflight) {
	s := f.s
	pl, world := q.plan, q.world
	full := s.full.F32()
	gr := &s.groups[g]
	bytes := make([]byte, world*pl.p)
	scales := make([]float32, world*pl.groups)
	for r := range world {
		quant.GetWords(bytes[r*pl.p:(r+1)*pl.p], scales[r*pl.groups:(r+1)*pl.groups], q.wire[r*pl.words:(r+1)*pl.words])
	}
	// Element j of the flat gathered values: rank j/p's, at j%p of its
	// concatenated partitions; its scale is j/per (see qwPlan.per).
	deq := func(j int) float32 {
		return half.NearestF16(float32(int8(bytes[j])) * scales[j/pl.per])
	}
	off := 0
	for i := gr.First; i <= gr.Last; i++ {
		if s.persist[i] {
			continue
		}
		sp := &s.l.Specs[i]
		ps := partition.ParamPartitionSize(sp.Numel, world)
		for r := range world {
			lo, hi, _ := partition.PerParam(sp.Numel, world, r)
			base := r*pl.p + off
			for k := range hi - lo {
				full[sp.Offset+lo+k] = deq(base + k)
			}
		}
		off += ps
	}
}

// putWire takes a flight's wire buffer back.
func (w *weightQuant) putWire(acct *mem.Accountant, q *qflight) {
	w.spare = append(w.spare, q.wire)
	acct.Release(mem.Comm, mem.Device, 2*int64(len(q.wire)))
}

// getWire returns a wire buffer of n words, reusing a spare one.
func (w *weightQuant) getWire(n int) []uint16 {
	for i, b := range w.spare {
		if cap(b) >= n {
			w.spare[i] = w.spare[len(w.spare)-1]
			w.spare = w.spare[:len(w.spare)-1]
			return b[:n]
		}
	}
	return make([]uint16, n)
}
