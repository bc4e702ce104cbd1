package nccl

import (
	"errors"
	"unsafe"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
)

// The host path: comm.Comm's collectives take host buffers (comm.Buffer
// wraps Go slices today), and prepare turns one into an NCCL collective
// on device memory. Each buffer is staged on the communicator's stream
// (Stream.Stage: uploaded into device memory on a GPU, used in place on a
// device that addresses host memory), and the part the collective writes
// is returned after it. An in-place reduce-scatter or all-gather stages
// the whole buffer once and passes NCCL the chunk's address inside it, so
// NCCL runs in place too.
//
// The reductions keep comm's definition (see comm.Reduce) wherever NCCL
// allows it:
//
//   - Sum is ncclSum.
//   - Avg is ncclSum and then one float32 division of each result on the
//     host (rounded to the dtype), not ncclAvg: NCCL averages floats by
//     pre-multiplying every input by 1/n, which is not DeepSpeed's
//     post-division.
//   - PreAvg is ncclRedOpCreatePreMulSum with 1/n when n is a power of
//     two: multiplying by an exact power of two and dividing by it round
//     alike, so this is comm's x/n bit for bit. For any other n, 1/n is
//     inexact (in bf16 off by up to half an ulp) and the quotient x/n is
//     computed on the host into the staged copy instead, and summed with
//     ncclSum.
//
// NCCL's summation order is its own (ring or tree, by size and topology):
// for two ranks a + b is the same either way, so a two-rank job matches
// package inproc bit for bit; with more ranks the bits may differ from
// inproc's rank order, as they differ between NCCL runs on different
// topologies. The fake NCCL of package fakenccl sums in rank order.

// prepare stages x's host buffers and fills in x.ops, x.staged and
// x.post.
func (c *Comm) prepare(x *call) error {
	a := *x.host
	n, me := c.Size(), c.rank
	dt := a.Out.DType()
	if a.Kind == comm.KindBarrier {
		dt = device.F32
	}
	o := op{kind: a.Kind, dt: DataTypeOf(dt), root: a.Root}
	var pre bool // divide the inputs by n on the host
	switch a.Kind {
	case comm.KindAllReduce, comm.KindReduceScatter:
		switch a.Op {
		case comm.Avg:
			out := a.Out
			x.post = func() { divide(out, out, n) }
		case comm.PreAvg:
			if n&(n-1) == 0 {
				o.red = redPreAvg
			} else {
				pre = true
			}
		}
	}
	esize := dt.Size()
	var err error
	switch a.Kind {
	case comm.KindAllReduce:
		o.count = a.Out.Len()
		if pre {
			err = c.stageApart(x, &o, divided(a.Out, n), a.Out)
		} else {
			err = c.stageInPlace(x, &o, a.Out, 0, 0, 0, a.Out.Bytes())
		}
	case comm.KindReduceScatter:
		m := a.Out.Len()
		o.count = m
		inPlace := m > 0 && comm.Same(a.Out, a.In.Slice(me*m, (me+1)*m))
		if inPlace && !pre {
			off := me * m * esize
			err = c.stageInPlace(x, &o, a.In, 0, off, off, a.Out.Bytes())
			break
		}
		in := a.In
		if pre {
			in = divided(a.In, n)
		}
		err = c.stageApart(x, &o, in, a.Out)
	case comm.KindAllGather:
		m := a.In.Len()
		o.count = m
		if m > 0 && comm.Same(a.In, a.Out.Slice(me*m, (me+1)*m)) {
			err = c.stageInPlace(x, &o, a.Out, me*m*esize, 0, 0, a.Out.Bytes())
			break
		}
		err = c.stageApart(x, &o, a.In, a.Out)
	case comm.KindBroadcast:
		o.count = a.Out.Len()
		var s Staged
		if s, err = c.stage(x, a.Out, me == a.Root); err == nil {
			o.send, o.recv = s.Ptr(), s.Ptr()
			x.returns(s, 0, a.Out.Bytes())
		}
	case comm.KindBarrier:
		o.kind, o.count = comm.KindAllReduce, 1
		err = c.stageInPlace(x, &o, comm.F32(make([]float32, 1)), 0, 0, 0, 0)
	}
	if err != nil {
		return err
	}
	x.ops = []op{o}
	return nil
}

// stageApart stages in (uploaded) and out (not uploaded) as two device
// buffers, points o at them, and notes that out comes back after x.
func (c *Comm) stageApart(x *call, o *op, in, out comm.Buffer) error {
	send, err := c.stage(x, in, true)
	if err != nil {
		return err
	}
	recv, err := c.stage(x, out, false)
	if err != nil {
		return err
	}
	o.send, o.recv = send.Ptr(), recv.Ptr()
	x.returns(recv, 0, out.Bytes())
	return nil
}

// stageInPlace stages b once (uploaded), points o's send and receive at
// byte offsets sendOff and recvOff inside it, and notes that bytes
// [retOff, retOff+retN) come back after x (none when retN is 0).
func (c *Comm) stageInPlace(x *call, o *op, b comm.Buffer, sendOff, recvOff, retOff int, retN int64) error {
	s, err := c.stage(x, b, true)
	if err != nil {
		return err
	}
	o.send, o.recv = s.Ptr()+driver.DevicePtr(sendOff), s.Ptr()+driver.DevicePtr(recvOff)
	if retN > 0 {
		x.returns(s, retOff, retN)
	}
	return nil
}

// stage stages b on the communicator's stream and keeps it with x.
func (c *Comm) stage(x *call, b comm.Buffer, upload bool) (Staged, error) {
	s, err := c.st.Stage(bytesOf(b), upload)
	if err != nil {
		return nil, err
	}
	x.staged = append(x.staged, s)
	return s, nil
}

// returns notes that bytes [off, off+n) of s come back after x.
func (x *call) returns(s Staged, off int, n int64) {
	x.back = append(x.back, span{s, off, int(n)})
}

// span is a part of a staged buffer that a collective writes.
type span struct {
	s      Staged
	off, n int
}

// returnStaged queues the copies back, after x's NCCL calls.
func (c *Comm) returnStaged(x *call) error {
	for _, b := range x.back {
		if err := b.s.Return(b.off, b.n); err != nil {
			return err
		}
	}
	return nil
}

// finishStaged hands x's staged buffers back (ok: with their results).
func (c *Comm) finishStaged(x *call, ok bool) error {
	var errs []error
	for _, s := range x.staged {
		errs = append(errs, s.Finish(ok))
	}
	x.staged, x.back = nil, nil
	return errors.Join(errs...)
}

// bytesOf is the memory of b.
func bytesOf(b comm.Buffer) []byte {
	if b.Len() == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(comm.Ptr(b)), b.Bytes())
}

// divided is a new buffer of b's elements divided by n (one float32
// division each, rounded to the dtype): comm.PreAvg's terms.
func divided(b comm.Buffer, n int) comm.Buffer {
	var out comm.Buffer
	switch b.DType() {
	case device.F32:
		out = comm.F32(make([]float32, b.Len()))
	case device.F16:
		out = comm.F16(make([]uint16, b.Len()))
	default:
		out = comm.BF16(make([]uint16, b.Len()))
	}
	divide(out, b, n)
	return out
}

// divide sets dst[i] = src[i]/n, in float32, rounded to the dtype.
func divide(dst, src comm.Buffer, n int) {
	d := float32(n)
	switch src.DType() {
	case device.F32:
		s, o := src.F32(), dst.F32()
		for i, v := range s {
			o[i] = v / d
		}
	case device.F16:
		s, o := src.Bits(), dst.Bits()
		for i, v := range s {
			o[i] = half.F16FromF32(half.F32FromF16(v) / d)
		}
	case device.BF16:
		s, o := src.Bits(), dst.Bits()
		for i, v := range s {
			o[i] = half.BF16FromF32(half.F32FromBF16(v) / d)
		}
	}
}
