// Package commtest is the conformance suite every comm.Comm backend must
// pass: each collective, dtype and op at awkward lengths, against a serial
// reference written here independently of comm.Reduce, compared bit for
// bit.
//
// Every rank runs the same cases on its own Comm (goroutines of one process
// or processes under mpirun alike): each rank generates every rank's input
// from the case and the rank number, so each can compute the expected
// result alone, without communicating.
package commtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
)

// Case is one collective call, the same on every rank.
type Case struct {
	Kind    comm.Kind
	DType   device.DType
	Len     int // all_reduce, broadcast: the buffer; reduce_scatter: out; all_gather: in
	Op      comm.Op
	Root    int  // broadcast
	InPlace bool // reduce_scatter: out is chunk Rank() of in; all_gather: in is chunk Rank() of out
	Seed    uint64
}

func (c Case) String() string {
	s := fmt.Sprintf("%v/%v/len=%d", c.Kind, c.DType, c.Len)
	switch c.Kind {
	case comm.KindAllReduce, comm.KindReduceScatter:
		s += "/" + c.Op.String()
	case comm.KindBroadcast:
		s += fmt.Sprintf("/root=%d", c.Root)
	}
	if c.InPlace {
		s += "/inplace"
	}
	return s
}

// Lengths is the suite's element counts: empty, one, odd, and odd lengths
// around comm.Reduce's block of 1024 so blocks end mid-chunk.
func Lengths() []int { return []int{0, 1, 7, 1031, 2*1024 + 3} }

// Cases is the table for a communicator of size ranks: every kind × dtype ×
// op × length, reduce_scatter and all_gather in place and not, broadcast
// from every root.
func Cases(size int) []Case {
	var cs []Case
	dts := []device.DType{device.F32, device.F16, device.BF16}
	ops := []comm.Op{comm.Sum, comm.Avg, comm.PreAvg}
	for _, dt := range dts {
		for _, n := range Lengths() {
			for _, op := range ops {
				cs = append(cs, Case{Kind: comm.KindAllReduce, DType: dt, Len: n, Op: op})
				for _, inPlace := range []bool{false, true} {
					cs = append(cs, Case{Kind: comm.KindReduceScatter, DType: dt, Len: n, Op: op, InPlace: inPlace})
				}
			}
			for _, inPlace := range []bool{false, true} {
				cs = append(cs, Case{Kind: comm.KindAllGather, DType: dt, Len: n, InPlace: inPlace})
			}
			for root := range size {
				cs = append(cs, Case{Kind: comm.KindBroadcast, DType: dt, Len: n, Root: root})
			}
		}
	}
	cs = append(cs, Case{Kind: comm.KindBarrier})
	for i := range cs {
		cs[i].Seed = uint64(i) + 1
	}
	return cs
}

// Check runs cases on c, in order, and returns every mismatch with the
// serial reference (a go-cmp diff of the bits), every error, and every
// traffic count that differs from comm.NominalTraffic.
func Check(ctx context.Context, c comm.Comm, cases []Case) error {
	var errs []error
	for _, tc := range cases {
		if err := checkCase(ctx, c, tc); err != nil {
			errs = append(errs, fmt.Errorf("%v on rank %d of %d: %w", tc, c.Rank(), c.Size(), err))
		}
	}
	return errors.Join(errs...)
}

// Values is rank's input for a case: n finite values of dtype dt, of mixed
// signs and magnitudes spread over 2^-8…2^8, so that a float32 sum depends
// on its order. Every value is exact in dt.
func Values(tc Case, rank, n int) []float32 {
	r := rand.New(rand.NewPCG(tc.Seed, uint64(rank)+1))
	v := make([]float32, n)
	for i := range v {
		x := (r.Float32()*2 - 1) * float32(math.Ldexp(1, r.IntN(17)-8))
		switch tc.DType {
		case device.F16:
			x = half.NearestF16(x)
		case device.BF16:
			x = half.NearestBF16(x)
		}
		v[i] = x
	}
	return v
}

// Encode is values as a buffer of dt (exact: Values are representable).
func Encode(dt device.DType, v []float32) comm.Buffer {
	switch dt {
	case device.F16:
		b := make([]uint16, len(v))
		half.F32ToF16(b, v)
		return comm.F16(b)
	case device.BF16:
		b := make([]uint16, len(v))
		half.F32ToBF16(b, v)
		return comm.BF16(b)
	}
	return comm.F32(append([]float32(nil), v...))
}

// Bits is a buffer's bit patterns, widened to uint32, for exact comparison.
func Bits(b comm.Buffer) []uint32 {
	out := make([]uint32, b.Len())
	if b.DType() == device.F32 {
		for i, x := range b.F32() {
			out[i] = math.Float32bits(x)
		}
	} else {
		for i, x := range b.Bits() {
			out[i] = uint32(x)
		}
	}
	return out
}

// Reference is the serial definition of the ops over ranks' values for
// one element, as comm.Reduce documents it, rounded to dt: for PreAvg each
// value divided by the rank count (and rounded to dt), a float32 sum in
// rank order (a 16-bit dt rounds after every addition), one float32
// division for Avg, one rounding.
func Reference(dt device.DType, op comm.Op, vals []float32) uint32 {
	round := func(x float32) float32 { return x }
	switch dt {
	case device.F16:
		round = half.NearestF16
	case device.BF16:
		round = half.NearestBF16
	}
	n := float32(len(vals))
	term := func(x float32) float32 {
		if op == comm.PreAvg {
			return round(x / n)
		}
		return x
	}
	s := term(vals[0])
	if len(vals) > 1 {
		for _, x := range vals[1:] {
			s = round(s + term(x))
		}
		if op == comm.Avg {
			s /= n
		}
	}
	switch dt {
	case device.F16:
		return uint32(half.F16FromF32(s))
	case device.BF16:
		return uint32(half.BF16FromF32(s))
	}
	return math.Float32bits(s)
}

// RingOrder is vals, one element's values in rank order, in the order
// gloo's ring all-reduce of n elements of esize bytes adds them (see
// comm.ReduceRing): element i lies in block j = i / b, whose sum starts
// at rank j−1 and goes down the ring to rank j. Written here from gloo's
// segment arithmetic, apart from comm.RingBlock.
func RingOrder(vals []float32, i, n, esize int) []float32 {
	w := len(vals)
	if w <= 2 {
		return vals
	}
	bytes := n * esize
	maxSeg := (1 << 20) / esize * esize
	segs := max((bytes+maxSeg-1)/maxSeg, 2*w)
	segs = (segs + w - 1) / w * w
	seg := ((bytes+segs-1)/segs + esize - 1) / esize // elements per segment
	j := i / (seg * segs / w)
	out := make([]float32, w)
	for k := range out {
		out[k] = vals[((j-1-k)%w+w)%w]
	}
	return out
}

// poison fills the parts of an output that a collective must overwrite.
const poison = float32(-12345)

func checkCase(ctx context.Context, c comm.Comm, tc Case) error {
	n, me, m := c.Size(), c.Rank(), tc.Len
	in := make([][]float32, n) // every rank's input values
	var whole int
	switch tc.Kind {
	case comm.KindReduceScatter:
		whole = n * m
	default:
		whole = m
	}
	for r := range in {
		in[r] = Values(tc, r, whole)
	}
	var want []uint32        // the expected result on this rank
	var out, src comm.Buffer // what this rank passes
	switch tc.Kind {
	case comm.KindAllReduce, comm.KindReduceScatter:
		off := 0
		if tc.Kind == comm.KindReduceScatter {
			off = me * m
		}
		want = make([]uint32, m)
		col := make([]float32, n)
		for i := range want {
			for r := range in {
				col[r] = in[r][off+i]
			}
			if tc.Kind == comm.KindAllReduce {
				col = RingOrder(col, i, m, tc.DType.Size())
			}
			want[i] = Reference(tc.DType, tc.Op, col)
		}
	case comm.KindAllGather:
		for r := range in {
			want = append(want, Bits(Encode(tc.DType, in[r]))...)
		}
	case comm.KindBroadcast:
		want = Bits(Encode(tc.DType, in[tc.Root]))
	}
	before := c.Traffic()
	var h comm.Handle
	switch tc.Kind {
	case comm.KindAllReduce:
		out = Encode(tc.DType, in[me])
		h = c.AllReduce(ctx, out, tc.Op)
	case comm.KindReduceScatter:
		src = Encode(tc.DType, in[me])
		if tc.InPlace {
			out = src.Slice(me*m, (me+1)*m)
		} else {
			out = Encode(tc.DType, filled(m))
		}
		h = c.ReduceScatter(ctx, out, src, tc.Op)
	case comm.KindAllGather:
		out = Encode(tc.DType, filled(n*m))
		if tc.InPlace {
			src = out.Slice(me*m, (me+1)*m)
			copyValues(src, Encode(tc.DType, in[me]))
		} else {
			src = Encode(tc.DType, in[me])
		}
		h = c.AllGather(ctx, out, src)
	case comm.KindBroadcast:
		if me == tc.Root {
			out = Encode(tc.DType, in[me])
		} else {
			out = Encode(tc.DType, filled(m))
		}
		h = c.Broadcast(ctx, out, tc.Root)
	case comm.KindBarrier:
		h = c.Barrier(ctx)
	default:
		return fmt.Errorf("commtest: no check for %v", tc.Kind)
	}
	if err := h.Wait(); err != nil {
		return err
	}
	var errs []error
	if tc.Kind != comm.KindBarrier {
		if err := diffBits("result bits (-want +got)", want, Bits(out)); err != nil {
			errs = append(errs, err)
		}
	}
	if !tc.InPlace && (tc.Kind == comm.KindReduceScatter || tc.Kind == comm.KindAllGather) {
		if err := diffBits("input changed (-before +after)", Bits(Encode(tc.DType, in[me])), Bits(src)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := checkTraffic(tc, c, before, c.Traffic(), out, src); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func checkTraffic(tc Case, c comm.Comm, before, after comm.Traffic, out, src comm.Buffer) error {
	b := out.Bytes()
	if tc.Kind == comm.KindReduceScatter {
		b = src.Bytes()
	}
	if tc.Kind == comm.KindBarrier {
		b = 0
	}
	want := comm.Counts{Calls: 1, Bytes: b}
	want.Sent, want.Received = comm.NominalTraffic(tc.Kind, c.Size(), c.Rank(), tc.Root, b)
	o, a := before.Of(tc.Kind), after.Of(tc.Kind)
	got := comm.Counts{Calls: a.Calls - o.Calls, Bytes: a.Bytes - o.Bytes, Sent: a.Sent - o.Sent, Received: a.Received - o.Received}
	if d := cmp.Diff(want, got); d != "" {
		return fmt.Errorf("traffic (-want +got):\n%s", d)
	}
	return nil
}

// diffBits is nil when the bits agree, else a go-cmp diff (compared by
// slices.Equal first: go-cmp is slow on long slices).
func diffBits(what string, want, got []uint32) error {
	if slices.Equal(want, got) {
		return nil
	}
	return fmt.Errorf("%s:\n%s", what, cmp.Diff(want, got, cmpopts.EquateEmpty()))
}

func filled(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = poison
	}
	return v
}

func copyValues(dst, src comm.Buffer) {
	if dst.DType() == device.F32 {
		copy(dst.F32(), src.F32())
	} else {
		copy(dst.Bits(), src.Bits())
	}
}
