package comm

import (
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/dszero/dszero/device"
)

// This file is for backends: what every implementation of Comm (package
// inproc, package mpi) does the same way — checking a collective's
// arguments, comparing buffer views, counting traffic, naming ranks in
// messages.

// Args is a collective's arguments on one rank, as a backend queues them.
// Which fields a kind uses is as in Comm: all_reduce and broadcast use Out
// only; reduce_scatter and all_gather use Out and In; Op is for all_reduce
// and reduce_scatter, Root for broadcast; barrier and split use none.
type Args struct {
	Kind    Kind
	Out, In Buffer
	Op      Op
	Root    int
}

// Check panics when a's arguments break Comm's rules on rank of a
// communicator of size ranks: an invalid op or dtype, buffers that are not
// one dtype and size chunks, a chunk buffer that overlaps the whole buffer
// but is not chunk rank of it, or a root outside the communicator. backend
// starts the message ("inproc", "mpi"). Split's color and key are the
// backend's to check.
func (a Args) Check(backend string, rank, size int) {
	switch a.Kind {
	case KindAllReduce:
		checkOp(backend, a.Op)
		checkDType(backend, a.Out)
	case KindReduceScatter:
		checkOp(backend, a.Op)
		checkChunked(backend, "ReduceScatter", rank, size, a.In, a.Out)
	case KindAllGather:
		checkChunked(backend, "AllGather", rank, size, a.Out, a.In)
	case KindAllToAll:
		checkAllToAll(backend, size, a.Out, a.In)
	case KindBroadcast:
		checkDType(backend, a.Out)
		if a.Root < 0 || a.Root >= size {
			panic(fmt.Sprintf("%s: Broadcast from root %d in a communicator of %d", backend, a.Root, size))
		}
	}
}

func checkOp(backend string, op Op) {
	if !op.Valid() {
		panic(fmt.Sprintf("%s: invalid reduction %v", backend, op))
	}
}

func checkDType(backend string, b Buffer) {
	if !b.DType().Valid() {
		panic(fmt.Sprintf("%s: buffer of invalid dtype %v", backend, b.DType()))
	}
}

// checkChunked checks that whole is n chunks of part's length and dtype,
// and that part is disjoint from whole or exactly chunk rank.
func checkChunked(backend, name string, rank, n int, whole, part Buffer) {
	checkDType(backend, whole)
	if whole.DType() != part.DType() || whole.Len() != n*part.Len() {
		panic(fmt.Sprintf("%s: %s of %v and %v in a communicator of %d: want one dtype and %d chunks", backend, name, whole, part, n, n))
	}
	if Overlap(whole, part) && !Same(part, whole.Slice(rank*part.Len(), (rank+1)*part.Len())) {
		panic(fmt.Sprintf("%s: %s on rank %d: the chunk buffer overlaps the whole one but is not chunk %d of it", backend, name, rank, rank))
	}
}

// Payload is the b of NominalTraffic for a's kind: the input of
// reduce_scatter and all_to_all, the output of all_reduce, all_gather and broadcast, and 0
// for barrier and split.
func (a Args) Payload() int64 {
	switch a.Kind {
	case KindReduceScatter, KindAllToAll:
		return a.In.Bytes()
	case KindAllReduce, KindAllGather, KindBroadcast:
		return a.Out.Bytes()
	}
	return 0
}

// Counts is what one completed collective with arguments a adds to the
// Traffic of rank in a communicator of size ranks.
func (a Args) Counts(rank, size int) Counts {
	c := Counts{Calls: 1, Bytes: a.Payload()}
	c.Sent, c.Received = NominalTraffic(a.Kind, size, rank, a.Root, c.Bytes)
	return c
}

// Ptr is the address of a buffer's first element; nil when it is empty.
func Ptr(b Buffer) unsafe.Pointer {
	if b.Len() == 0 {
		return nil
	}
	if b.DType() == device.F32 {
		return unsafe.Pointer(unsafe.SliceData(b.f32))
	}
	return unsafe.Pointer(unsafe.SliceData(b.bits))
}

func span(b Buffer) (lo, hi uintptr) {
	p := uintptr(Ptr(b))
	return p, p + uintptr(b.Bytes())
}

// Overlap reports whether two buffers share memory.
func Overlap(a, b Buffer) bool {
	if a.Len() == 0 || b.Len() == 0 {
		return false
	}
	alo, ahi := span(a)
	blo, bhi := span(b)
	return alo < bhi && blo < ahi
}

// Same reports whether a and b are the same view: one dtype, one length and
// one address (any two empty views of a dtype are the same).
func Same(a, b Buffer) bool {
	return a.Len() == b.Len() && a.DType() == b.DType() && Ptr(a) == Ptr(b)
}

// Who names ranks of a communicator for messages, with world ranks in
// sub-groups (any group but "world"; members are the world ranks by rank):
// "rank 3", "ranks 1 (world rank 2), 2 (world rank 5)".
func Who(group string, members, peers []int) string {
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = strconv.Itoa(p)
		if group != "world" {
			parts[i] += fmt.Sprintf(" (world rank %d)", members[p])
		}
	}
	if len(parts) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ", ")
}

// FaultError is the error a backend gives a broken communicator: a message,
// the cause kind (one of the Err* values) and the underlying error, if any.
// *Error wraps it.
type FaultError struct {
	Msg   string
	Kind  error
	Cause error
}

func (e *FaultError) Error() string {
	if e.Cause != nil {
		return e.Msg + ": " + e.Cause.Error()
	}
	return e.Msg
}

func (e *FaultError) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Kind, e.Cause}
	}
	return []error{e.Kind}
}
