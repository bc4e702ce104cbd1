package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/dszero/dszero/device"
)

// Comm is one rank's handle on a communicator: a fixed, ordered set of ranks
// that run collectives together. Every collective is asynchronous: it is
// queued and returns a Handle at once; Handle.Wait blocks until it is done.
// The synchronous form is c.AllReduce(ctx, buf, Sum).Wait().
//
// Matching: the n-th collective a rank issues on a communicator meets the
// n-th collective every other member issues on it (its sequence number, from
// 1). All members must issue the same kinds, with the same dtype, lengths,
// op and root, in the same order; a mismatch fails with ErrMismatch where the
// backend can see it. Collectives of one Comm run one after another in issue
// order. A rank that issues from several goroutines must order the calls
// itself; Comm's methods are safe for concurrent use, but concurrent issues
// have no defined order.
//
// Ownership: from the call until Wait returns, a collective's buffers belong
// to the communicator. The caller must neither read nor write them (nor
// reuse them in another collective) until then; other ranks may be reading
// or writing them. After Wait returns — with or without an error — the
// buffers are the caller's again; after an error their contents are
// unspecified. Buffers of different ranks must not overlap.
//
// Reduction: for every Op, each element is reduced in float32 in the
// fixed order rank 0, 1, …, n−1 of the communicator, a 16-bit buffer
// rounded to its dtype after every addition (see Reduce), so the bits of a
// result never depend on timing.
//
// Failure: a collective that cannot complete returns a *Error naming the
// collective, its sequence number and the ranks at fault, within the
// communicator's timeout. After one failure the communicator is broken:
// every later collective on it fails at once with the same cause.
type Comm interface {
	// Rank is this rank's index in the communicator, 0 ≤ Rank < Size.
	Rank() int
	// Size is the number of ranks in the communicator.
	Size() int

	// AllReduce replaces buf on every rank by the reduction of all ranks'
	// buf (torch.distributed.all_reduce).
	AllReduce(ctx context.Context, buf Buffer, op Op) Handle
	// ReduceScatter reduces the ranks' in (length Size()·out.Len()) and
	// leaves chunk r — elements [r·out.Len(), (r+1)·out.Len()) — of the
	// result in rank r's out (torch.distributed.reduce_scatter_tensor). out
	// is either disjoint from in or exactly chunk Rank() of in (in place).
	ReduceScatter(ctx context.Context, out, in Buffer, op Op) Handle
	// AllGather concatenates the ranks' in (all of one length) in rank order
	// into every rank's out (length Size()·in.Len())
	// (torch.distributed.all_gather_into_tensor). in is either disjoint
	// from out or exactly chunk Rank() of out (in place).
	AllGather(ctx context.Context, out, in Buffer) Handle
	// Broadcast copies root's buf into every other rank's buf.
	Broadcast(ctx context.Context, buf Buffer, root int) Handle
	// Barrier completes once every rank has issued it.
	Barrier(ctx context.Context) Handle

	// Split is a collective over this communicator that makes
	// sub-communicators (MPI_Comm_split, ncclCommSplit): ranks that pass the
	// same color ≥ 0 form one communicator, ordered by (key, Rank()). A rank
	// passing NoColor takes part but gets a nil Comm. It is ordered with the
	// other collectives of this Comm like any of them.
	Split(ctx context.Context, color, key int) (Comm, error)

	// Traffic is what this rank has moved on this communicator so far, by
	// collective kind (see Traffic for the exact definition).
	Traffic() Traffic
}

// NoColor passed to Split leaves the rank out of every new communicator.
const NoColor = -1

// Handle is one collective in flight. Wait blocks until it has completed on
// this rank and returns its error; the collective's buffers belong to the
// caller again once Wait returns. Wait may be called more than once and from
// any goroutine; it returns the same error each time.
type Handle interface {
	Wait() error
}

// WaitAll waits for every handle, in order, and returns their errors
// joined. When a communicator breaks, every collective queued on it fails
// with the same cause; WaitAll reports each cause once, with the first
// collective that failed with it.
func WaitAll(hs ...Handle) error {
	var errs []error
	var causes []*FaultError // of the errors kept
	for _, h := range hs {
		err := h.Wait()
		if err == nil {
			continue
		}
		if e, ok := err.(*Error); ok {
			if f, ok := e.Err.(*FaultError); ok {
				if slices.Contains(causes, f) {
					continue
				}
				causes = append(causes, f)
			}
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Done returns a Handle that has already completed with err. Backends use it
// for calls refused before they start (a closed communicator).
func Done(err error) Handle { return doneHandle{err} }

type doneHandle struct{ err error }

func (h doneHandle) Wait() error { return h.err }

// Op is the reduction of AllReduce and ReduceScatter (torch ReduceOp).
type Op int

const (
	// Sum adds the ranks' elements in float32, rank 0 first (16-bit
	// buffers rounded after every addition).
	Sum Op = iota
	// Avg is Sum followed by one float32 division by the communicator size
	// (DeepSpeed's post-division, tensor.div_(world_size), after a sum).
	Avg
	// PreAvg divides every rank's elements by the communicator size (one
	// float32 division each, a 16-bit buffer rounded to its dtype) and
	// sums the quotients: ZeRO's tensor.div_(world_size) before a SUM,
	// with the division done inside the reduction's one pass over the
	// data instead of in a pass of its own. The inputs are not changed.
	PreAvg
	numOps
)

var opNames = [...]string{"sum", "avg", "pre_avg"}

func (o Op) String() string {
	if o < 0 || o >= numOps {
		return fmt.Sprintf("Op(%d)", int(o))
	}
	return opNames[o]
}

// Valid reports whether o is Sum, Avg or PreAvg.
func (o Op) Valid() bool { return o >= 0 && o < numOps }

// Kind names a collective, for errors, fault injection and traffic counts.
type Kind int

const (
	KindAllReduce Kind = iota
	KindReduceScatter
	KindAllGather
	KindBroadcast
	KindBarrier
	KindSplit
	KindAllToAll // AllToAller's all_to_all (the compressed all-reduce's first phase)
	NumKinds     // the number of kinds; not a kind
)

// The torch.distributed names.
var kindNames = [...]string{"all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier", "split", "all_to_all"}

func (k Kind) String() string {
	if k < 0 || k >= NumKinds {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// Buffer is the data of one collective on one rank: a dtype and a slice.
// fp32 data is a []float32; fp16 and bf16 data are []uint16 bit patterns as
// in package half. A Buffer is a view: it does not own or copy its data, and
// Slice makes views of parts of it. The zero Buffer is an empty fp32 buffer.
//
// The in-process backend reads and writes the slices directly. A GPU backend
// will carry device memory in a Buffer instead; code that only passes
// Buffers to a Comm does not depend on where the data lives.
type Buffer struct {
	dtype device.DType
	f32   []float32 // F32 data
	bits  []uint16  // F16 and BF16 bit patterns
}

// F32 is a buffer of float32 values.
func F32(x []float32) Buffer { return Buffer{dtype: device.F32, f32: x} }

// F16 is a buffer of IEEE fp16 bit patterns.
func F16(bits []uint16) Buffer { return Buffer{dtype: device.F16, bits: bits} }

// BF16 is a buffer of bfloat16 bit patterns.
func BF16(bits []uint16) Buffer { return Buffer{dtype: device.BF16, bits: bits} }

// Of is a view of all of a device buffer's elements.
func Of(b *device.Buffer) Buffer {
	if b.DType() == device.F32 {
		return F32(b.F32())
	}
	return Buffer{dtype: b.DType(), bits: b.Bits()}
}

// DType is the element type.
func (b Buffer) DType() device.DType { return b.dtype }

// Len is the number of elements.
func (b Buffer) Len() int {
	if b.dtype == device.F32 {
		return len(b.f32)
	}
	return len(b.bits)
}

// Bytes is Len × DType.Size.
func (b Buffer) Bytes() int64 { return int64(b.Len()) * int64(b.dtype.Size()) }

// Slice is the view of elements [lo, hi). It panics when the range is out of
// bounds.
func (b Buffer) Slice(lo, hi int) Buffer {
	if b.dtype == device.F32 {
		return Buffer{dtype: b.dtype, f32: b.f32[lo:hi:hi]}
	}
	return Buffer{dtype: b.dtype, bits: b.bits[lo:hi:hi]}
}

// F32 is the data of an fp32 buffer. It panics for other dtypes.
func (b Buffer) F32() []float32 {
	if b.dtype != device.F32 {
		panic(fmt.Sprintf("comm: F32 view of a %v buffer", b.dtype))
	}
	return b.f32
}

// Bits is the bit patterns of an fp16 or bf16 buffer. It panics for fp32.
func (b Buffer) Bits() []uint16 {
	if b.dtype == device.F32 {
		panic("comm: Bits view of an fp32 buffer")
	}
	return b.bits
}

// Copy copies min(dst.Len(), src.Len()) elements from src to dst, bit for
// bit, like the built-in copy, and returns how many. The dtypes must agree.
func Copy(dst, src Buffer) int {
	if dst.dtype != src.dtype {
		panic(fmt.Sprintf("comm: Copy of %v into %v", src, dst))
	}
	if dst.dtype == device.F32 {
		return copy(dst.f32, src.f32)
	}
	return copy(dst.bits, src.bits)
}

func (b Buffer) String() string { return fmt.Sprintf("%v[%d]", b.dtype, b.Len()) }
