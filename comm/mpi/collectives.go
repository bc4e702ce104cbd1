//go:build mpi

package mpi

import (
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
)

// defaultMaxCount is the most elements one MPI call moves: 2^28, 1 GiB of
// fp32. MPI's counts and displacements are C ints (at most 2^31−1), and
// some transports mishandle messages of 2 GiB and more, so larger
// collectives are cut into segments of at most this many elements (see
// each collective below). Reductions are element-wise, so segmenting does
// not change a single bit of the result.
const defaultMaxCount = 1 << 28

// defaultScratchMax bounds the scratch a collective holds: 2^20 elements,
// 4 MiB of fp32. An all-reduce or a reduce-scatter receives the other
// ranks' chunks into scratch that the communicator keeps for its next
// calls, so without a bound one reduce-scatter of a large gradient (a
// GPT's 38.6M-element LM head: 74 MiB with 2 ranks) stays resident, beside
// the accounted memory, for the rest of the run. Collectives larger than
// the bound are cut into segments whose scratch fits it; 4 MiB messages
// still run at the transport's bandwidth.
const defaultScratchMax = 1 << 20

// run is the collective itself, on the worker: the signature check when
// Options.Verify is set, then the MPI calls.
func (c *communicator) run(x *call) *fault {
	if c.verify {
		if f := c.verifySig(x); f != nil {
			return f
		}
	}
	var err error
	switch x.Kind {
	case comm.KindAllReduce:
		err = c.allReduce(x.Out, x.Op)
	case comm.KindReduceScatter:
		err = c.reduceScatter(x.Out, x.In, x.Op)
	case comm.KindAllGather:
		err = c.allGather(x.Out, x.In)
	case comm.KindAllToAll:
		err = c.allToAll(x.Out, x.In)
	case comm.KindBroadcast:
		err = c.broadcast(x.Out, x.Root)
	case comm.KindBarrier:
		err = barrier(c.h)
	case comm.KindSplit:
		x.split, err = c.split(x)
	}
	if err != nil {
		return c.mpiFault(err)
	}
	return nil
}

// chunk is rank r's share [lo, hi) of n elements cut into size parts (the
// in-process backend's cut).
func chunk(n, size, r int) (lo, hi int) { return n * r / size, n * (r + 1) / size }

// slot is where peer k's chunk goes in a receive buffer of Size()−1 chunks:
// this rank's own chunk is never sent to itself.
func (c *communicator) slot(k int) int {
	if k > c.rank {
		return k - 1
	}
	return k
}

// allReduce, for each segment of buf of at most maxCount elements, and
// of at most n·scratchMax/(n−1) so that its scratch fits scratchMax:
//
//  1. MPI_Alltoallv: rank r receives chunk r of every other rank's segment
//     (its own chunk stays in place);
//  2. comm.ReduceRing: rank r reduces chunk r into its own segment in
//     gloo's ring order, by each element's place in the whole buffer — the
//     arithmetic of the in-process backend, bit for bit;
//  3. MPI_Allgatherv in place (MPI_Allgather when the chunks are equal):
//     every rank receives every reduced chunk.
//
// Each rank sends and receives 2·(n−1)/n of the buffer, as a ring would,
// but the order of the additions is fixed (MPI_Allreduce's is the
// implementation's choice). Scratch: (n−1)/n of a segment.
func (c *communicator) allReduce(buf comm.Buffer, op comm.Op) error {
	n, me, t := c.Size(), c.rank, typeOf(buf.DType())
	if n == 1 {
		return nil // the sum and the average of one buffer are the buffer
	}
	segLen := min(c.maxCount, n*max(1, c.scratchMax/(n-1)))
	for lo := 0; lo < buf.Len(); lo += segLen {
		if c.gone() {
			return errGone
		}
		seg := buf.Slice(lo, min(lo+segLen, buf.Len()))
		mlo, mhi := chunk(seg.Len(), n, me)
		m := mhi - mlo
		recv := c.s.buffer(1, buf.DType(), (n-1)*m)
		sc, sd, rc, rd := c.s.counts(n)
		for k := range n {
			klo, khi := chunk(seg.Len(), n, k)
			sc[k], sd[k] = cint(khi-klo), cint(klo)
			rc[k], rd[k] = cint(m), cint(c.slot(k)*m)
		}
		sc[me], rc[me], rd[me] = 0, 0, 0
		if err := alltoallv(c.h, comm.Ptr(seg), sc, sd, comm.Ptr(recv), rc, rd, t); err != nil {
			return err
		}
		if c.gone() {
			return errGone
		}
		own := seg.Slice(mlo, mhi)
		srcs := c.s.views(n)
		for k := range n {
			if k == me {
				srcs[k] = own
			} else {
				srcs[k] = recv.Slice(c.slot(k)*m, (c.slot(k)+1)*m)
			}
		}
		comm.ReduceRing([]comm.Buffer{own}, srcs, op, lo+mlo, buf.Len())
		clear(srcs)
		if c.gone() {
			return errGone
		}
		if seg.Len()%n == 0 { // equal chunks: MPI_Allgather is faster than its v form
			if err := allgather(c.h, nil, comm.Ptr(seg), m, t); err != nil {
				return err
			}
			continue
		}
		// The chunk cut again as counts and displacements in seg.
		for k := range n {
			klo, khi := chunk(seg.Len(), n, k)
			rc[k], rd[k] = cint(khi-klo), cint(klo)
		}
		if err := allgathervInPlace(c.h, comm.Ptr(seg), rc, rd, t); err != nil {
			return err
		}
	}
	return nil
}

// reduceScatter: MPI_Alltoallv sends chunk k of in to rank k (rank r
// receives chunk r of every other rank's in), and comm.Reduce reduces them
// in rank order into out. Each chunk is cut into segments of at most
// scratchMax/(n−1) elements, so that the other ranks' segments fit the
// scratch. When the n chunks of in exceed maxCount, the segments are of
// at most maxCount/n elements, packed into one send buffer per segment
// (the displacements k·m of in itself would overflow a C int). In place,
// out is chunk Rank() of in: a segment of it is written only after it has
// been read.
func (c *communicator) reduceScatter(out, in comm.Buffer, op comm.Op) error {
	n, me, m, dt := c.Size(), c.rank, out.Len(), out.DType()
	if n == 1 {
		comm.Reduce([]comm.Buffer{out}, []comm.Buffer{in}, op)
		return nil
	}
	pack := n*m > c.maxCount
	step := min(m, max(1, c.scratchMax/(n-1)))
	if pack {
		step = min(step, max(1, c.maxCount/n))
	}
	for a := 0; a < m; a += step {
		if c.gone() {
			return errGone
		}
		b := min(a+step, m)
		s := b - a
		send, stride := in.Slice(a, in.Len()), m // chunk k's segment at k·m
		if pack {
			send, stride = c.s.buffer(0, dt, n*s), s
			for k := range n {
				if k != me {
					comm.Copy(send.Slice(k*s, (k+1)*s), in.Slice(k*m+a, k*m+b))
				}
			}
		}
		recv := c.s.buffer(1, dt, (n-1)*s)
		sc, sd, rc, rd := c.s.counts(n)
		for k := range n {
			sc[k], sd[k] = cint(s), cint(k*stride)
			rc[k], rd[k] = cint(s), cint(c.slot(k)*s)
		}
		sc[me], rc[me], rd[me] = 0, 0, 0
		if err := alltoallv(c.h, comm.Ptr(send), sc, sd, comm.Ptr(recv), rc, rd, typeOf(dt)); err != nil {
			return err
		}
		if c.gone() {
			return errGone
		}
		srcs := c.s.views(n)
		for k := range n {
			if k == me {
				srcs[k] = in.Slice(me*m+a, me*m+b)
			} else {
				srcs[k] = recv.Slice(c.slot(k)*s, (c.slot(k)+1)*s)
			}
		}
		comm.Reduce([]comm.Buffer{out.Slice(a, b)}, srcs, op)
		clear(srcs)
	}
	return nil
}

// allGather is MPI_Allgather of in into out (MPI_IN_PLACE when in is chunk
// Rank() of out). When out exceeds maxCount, each chunk is cut into
// segments of at most maxCount/n and scratchMax/n elements, gathered into
// a scratch buffer and copied to their places.
func (c *communicator) allGather(out, in comm.Buffer) error {
	n, me, m, dt := c.Size(), c.rank, in.Len(), in.DType()
	inPlace := comm.Same(in, out.Slice(me*m, (me+1)*m))
	if m == 0 {
		return nil
	}
	if n == 1 {
		if !inPlace {
			comm.Copy(out, in)
		}
		return nil
	}
	if n*m <= c.maxCount {
		send := comm.Ptr(in)
		if inPlace {
			send = nil
		}
		return allgather(c.h, send, comm.Ptr(out), m, typeOf(dt))
	}
	step := max(1, min(c.maxCount, c.scratchMax)/n)
	for a := 0; a < m; a += step {
		b := min(a+step, m)
		s := b - a
		recv := c.s.buffer(1, dt, n*s)
		if err := allgather(c.h, comm.Ptr(in.Slice(a, b)), comm.Ptr(recv), s, typeOf(dt)); err != nil {
			return err
		}
		if c.gone() {
			return errGone
		}
		for k := range n {
			if k != me || !inPlace {
				comm.Copy(out.Slice(k*m+a, k*m+b), recv.Slice(k*s, (k+1)*s))
			}
		}
	}
	return nil
}

// allToAll is MPI_Alltoallv with equal counts: chunk k of in to rank k,
// chunk k of out from rank k, this rank's own chunk copied locally. Each
// chunk is cut into segments of at most maxCount/n elements; when the n
// chunks exceed maxCount the segments are packed into scratch, one send
// and one receive buffer per segment (the displacements k·m of in itself
// would overflow a C int).
func (c *communicator) allToAll(out, in comm.Buffer) error {
	n, me, dt := c.Size(), c.rank, in.DType()
	m := in.Len() / n
	comm.Copy(out.Slice(me*m, (me+1)*m), in.Slice(me*m, (me+1)*m))
	if n == 1 || m == 0 {
		return nil
	}
	pack := n*m > c.maxCount
	step := m
	if pack {
		step = max(1, min(c.maxCount, c.scratchMax)/n)
	}
	for a := 0; a < m; a += step {
		if c.gone() {
			return errGone
		}
		b := min(a+step, m)
		s := b - a
		send, recv, stride := in.Slice(a, in.Len()), out.Slice(a, out.Len()), m
		if pack {
			send, recv, stride = c.s.buffer(0, dt, n*s), c.s.buffer(1, dt, n*s), s
			for k := range n {
				if k != me {
					comm.Copy(send.Slice(k*s, (k+1)*s), in.Slice(k*m+a, k*m+b))
				}
			}
		}
		sc, sd, rc, rd := c.s.counts(n)
		for k := range n {
			sc[k], sd[k] = cint(s), cint(k*stride)
			rc[k], rd[k] = cint(s), cint(k*stride)
		}
		sc[me], rc[me] = 0, 0
		if err := alltoallv(c.h, comm.Ptr(send), sc, sd, comm.Ptr(recv), rc, rd, typeOf(dt)); err != nil {
			return err
		}
		if pack {
			for k := range n {
				if k != me {
					comm.Copy(out.Slice(k*m+a, k*m+b), recv.Slice(k*s, (k+1)*s))
				}
			}
		}
	}
	return nil
}

// broadcast is MPI_Bcast, in segments of at most maxCount elements.
func (c *communicator) broadcast(buf comm.Buffer, root int) error {
	if c.Size() == 1 {
		return nil
	}
	for lo := 0; lo < buf.Len(); lo += c.maxCount {
		if c.gone() {
			return errGone
		}
		seg := buf.Slice(lo, min(lo+c.maxCount, buf.Len()))
		if err := bcast(c.h, comm.Ptr(seg), seg.Len(), typeOf(buf.DType()), root); err != nil {
			return err
		}
	}
	return nil
}

// split is MPI_Comm_split; ties of key are ordered by rank, as comm.Comm
// wants. A rank that passed comm.NoColor gets nil.
func (c *communicator) split(x *call) (*communicator, error) {
	h, ok, err := split(c.h, x.color, x.key)
	if err != nil || !ok {
		return nil, err
	}
	return c.w.newComm(h, fmt.Sprintf("%s/%d:%d", c.id, x.seq, x.color), false, c.maxCount, c.scratchMax, c.verify)
}

// scratch is a communicator's reusable memory, used by its worker only:
// two element buffers per width (0: packed sends, 1: receives), the count
// and displacement arrays of the v-collectives, views, and signatures.
type scratch struct {
	f32  [2][]float32
	u16  [2][]uint16
	ints [4][]cint
	bufs []comm.Buffer
	sig  []signature
}

// buffer is scratch slot i as a buffer of n elements of dt.
func (s *scratch) buffer(i int, dt device.DType, n int) comm.Buffer {
	if dt == device.F32 {
		if cap(s.f32[i]) < n {
			s.f32[i] = make([]float32, n)
		}
		return comm.F32(s.f32[i][:n])
	}
	if cap(s.u16[i]) < n {
		s.u16[i] = make([]uint16, n)
	}
	b := s.u16[i][:n]
	if dt == device.F16 {
		return comm.F16(b)
	}
	return comm.BF16(b)
}

// counts is four arrays of n C ints: send counts and displacements, receive
// counts and displacements.
func (s *scratch) counts(n int) (sc, sd, rc, rd []cint) {
	return cints(&s.ints[0], n), cints(&s.ints[1], n), cints(&s.ints[2], n), cints(&s.ints[3], n)
}

func (s *scratch) views(n int) []comm.Buffer {
	if cap(s.bufs) < n {
		s.bufs = make([]comm.Buffer, n)
	}
	return s.bufs[:n]
}

func (s *scratch) sigs(n int) []signature {
	if cap(s.sig) < n {
		s.sig = make([]signature, n)
	}
	return s.sig[:n]
}
