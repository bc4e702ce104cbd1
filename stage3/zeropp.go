package stage3

import (
	"fmt"
	"strings"

	"github.com/dszero/dszero/comm"
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
//     the model's dtype (fp16 in DeepSpeed's kernels; see below), and the
//     parameters are those values until they are released:
//     the partitions and the fp32 master are untouched, and the gathered
//     weights are the same on every rank.
//
// DeepSpeed quantizes what one all_gather_coalesced call gathers: a
// module's own parameters (fetch_sub_module), or, with prefetch, several
// modules' together. dszero quantizes module by module always (see
// qwPlan), so its values are DeepSpeed's without prefetch
// (stage3_prefetch_bucket_size 0) and may differ in the last level where
// DeepSpeed's prefetch merges modules.
//
// A module with one such parameter is DeepSpeed's single-parameter path:
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
// (pt_binding.cpp casts data_ptr to __half*, still in 0.19.6), so under
// bf16 or fp32 they quantize the wrong bits. dszero runs the same
// algorithm on the values of the model's dtype: it quantizes the bf16 or
// fp32 values and dequantizes (and, for qgZ, adds) in that dtype, so
// fp16 is DeepSpeed's bit for bit and bf16/fp32 are what its kernels
// would compute templated on the dtype. dsconfig warns that those are
// not DeepSpeed's numbers.
type weightQuant struct {
	plans map[int][]qwPlan // world (the primary world, or the hpZ group's) → per group
	spare [][]uint16       // landed flights' wire buffers
}

// qwPlan is one group's quantized gather on a world of ranks: DeepSpeed
// gathers module by module (fetch_sub_module: a module's own parameters
// in one all_gather_coalesced), so the group's non-persistent parameters
// are cut into runs of one module each (the parameters whose names
// share all but the last dotted part), each quantized on its own; their
// bytes and scales travel in one all-gather, run after run.
type qwPlan struct {
	runs  []qwRun
	p     int // elements each rank contributes (Σ partition sizes)
	words int // wire words of one rank
}

// qwRun is one module's quantized gather.
type qwRun struct {
	params []int // the parameters, in order
	p      int   // elements each rank contributes
	off    int   // where they start among the group's p
	groups int   // quantization groups of each rank's p
	t      int   // elements dequantized: world·p, or the one parameter's numel
	per    int   // the dequantizer's group length: t/(world·groups)
	words  int   // wire words of one rank: quant.WordsFor(p, groups)
	woff   int   // where they start in the rank's slot
}

// qflight is a quantized gather in flight.
type qflight struct {
	wire  []uint16 // world slots of plan.words
	plan  *qwPlan
	world int
}

// module is the module a parameter belongs to: its name less the last
// dotted part ("blocks.0.attn.qkv" for "blocks.0.attn.qkv.weight").
func module(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[:i]
	}
	return ""
}

// newWeightQuant plans every group's quantized gather on each world, and
// refuses, naming the unit and the module, what DeepSpeed's quantizer
// asserts against.
func newWeightQuant(s *Strategy, worlds ...int) (*weightQuant, error) {
	w := &weightQuant{plans: map[int][]qwPlan{}}
	for _, world := range worlds {
		if _, ok := w.plans[world]; ok {
			continue
		}
		plans := make([]qwPlan, len(s.groups))
		for g := range s.groups {
			gr := &s.groups[g]
			pl := &plans[g]
			for i := gr.First; i <= gr.Last; i++ {
				if s.persist[i] {
					continue
				}
				if k := len(pl.runs); k == 0 || module(s.l.Specs[pl.runs[k-1].params[0]].Name) != module(s.l.Specs[i].Name) {
					pl.runs = append(pl.runs, qwRun{off: pl.p})
				}
				ps := partition.ParamPartitionSize(s.l.Specs[i].Numel, world)
				r := &pl.runs[len(pl.runs)-1]
				r.params = append(r.params, i)
				r.p += ps
				pl.p += ps
			}
			for k := range pl.runs {
				r := &pl.runs[k]
				r.woff = pl.words
				name := module(s.l.Specs[r.params[0]].Name)
				var err error
				if r.groups, err = quant.WeightGroups(r.p); err != nil {
					return nil, fmt.Errorf("stage 3: zero_quantized_weights: unit %q, module %q (%d parameter elements per rank on %d ranks): %w", gr.Name, name, r.p, world, err)
				}
				r.t = world * r.p
				if len(r.params) == 1 {
					r.t = s.l.Specs[r.params[0]].Numel
				}
				r.per = r.t / (world * r.groups)
				if r.per == 0 || (r.t-1)/r.per >= world*r.groups {
					return nil, fmt.Errorf("stage 3: zero_quantized_weights: unit %q, module %q gathers one parameter of %d elements, which does not split evenly over %d ranks: DeepSpeed 0.14.5 dequantizes it in groups of %d elements, reading past its %d scales; use a world that divides it, or turn qwZ off", gr.Name, name, r.t, world, r.per, world*r.groups)
				}
				r.words = quant.WordsFor(r.p, r.groups)
				pl.words += r.words
			}
		}
		w.plans[world] = plans
	}
	return w, nil
}

// gatherQuantized is issue's quantized all-gather of group g on c (world
// ranks, this one rank): the rank's partitions read, quantized module by
// module and put on the wire. On an error reading a partition the flight
// holds what was issued (nothing), for land to return.
func (f *fetcher) gatherQuantized(fl *flight, g int, c comm.Comm, world, rank int, hpz bool) error {
	s := f.s
	pl := &s.qw.plans[world][g]
	if pl.p == 0 {
		return nil
	}
	mine, err := f.getStaging(pl.p)
	if err != nil {
		return err
	}
	defer f.putStaging(mine)
	off := 0
	for _, r := range pl.runs {
		for _, i := range r.params {
			ps := partition.ParamPartitionSize(s.l.Specs[i].Numel, world)
			dst := mine[off : off+ps]
			if hpz {
				copy(dst, s.hpz.bufs[i])
			} else if err := s.params.Read(i, dst); err != nil {
				return err
			}
			off += ps
		}
	}
	// The wire (until the flight lands) and the bytes (until they are on it).
	if err := s.o.Acct.Reserve(mem.Comm, mem.Device, 2*int64(world*pl.words)+int64(pl.p)); err != nil {
		return err
	}
	defer s.o.Acct.Release(mem.Comm, mem.Device, int64(pl.p))
	q := &qflight{plan: pl, world: world, wire: s.qw.getWire(world * pl.words)}
	slot := q.wire[rank*pl.words : (rank+1)*pl.words]
	bytes := make([]byte, pl.p)
	for _, r := range pl.runs {
		scales := make([]float32, r.groups)
		quant.Quantize(bytes[r.off:r.off+r.p], scales, mine[r.off:r.off+r.p], 8)
		quant.PutWords(slot[r.woff:r.woff+r.words], bytes[r.off:r.off+r.p], scales)
	}
	fl.q = q
	fl.hs = append(fl.hs, c.AllGather(s.o.Ctx, comm.BF16(q.wire), comm.BF16(slot)))
	return nil
}

// landQuantized dequantizes a landed quantized gather into the full
// buffer, to the model's dtype, every rank's partitions.
func (f *fetcher) landQuantized(q *qflight) {
	s := f.s
	pl, world := q.plan, q.world
	full := s.full.F32()
	for _, run := range pl.runs {
		// The run's flat gathered values: rank r's p at r·p; element j's
		// scale is j/per (see qwRun.per).
		bytes := make([]byte, world*run.p)
		scales := make([]float32, world*run.groups)
		for r := range world {
			w := q.wire[r*pl.words+run.woff : r*pl.words+run.woff+run.words]
			quant.GetWords(bytes[r*run.p:(r+1)*run.p], scales[r*run.groups:(r+1)*run.groups], w)
		}
		off := 0
		for _, i := range run.params {
			sp := &s.l.Specs[i]
			for r := range world {
				lo, hi, _ := partition.PerParam(sp.Numel, world, r)
				base := r*run.p + off
				for k := range hi - lo {
					j := base + k
					v := float32(int8(bytes[j])) * scales[j/run.per]
					if s.nearest != nil {
						v = s.nearest(v)
					}
					full[sp.Offset+lo+k] = v
				}
			}
			off += partition.ParamPartitionSize(sp.Numel, world)
		}
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
