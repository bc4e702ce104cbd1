package comm

import (
	"context"
	"fmt"
)

// AllToAller is a Comm that also runs all_to_all
// (torch.distributed.all_to_all_single with equal splits): in and out have
// Size()·m elements each; chunk k of rank r's in — elements [k·m, (k+1)·m)
// — lands in chunk r of rank k's out. It is the first phase of
// CompressedAllReduce, where each rank sends every other rank the packed
// signs of the chunk that rank serves. It is a collective of the Comm it
// is a method of, matched and ordered with the others (KindAllToAll); in
// and out must be disjoint, of one dtype and one length.
//
// The in-process and MPI backends implement it; CompressedAllReduce falls
// back to an all_gather of every rank's whole input on a Comm that does
// not (more traffic, the same numbers).
type AllToAller interface {
	Comm
	AllToAll(ctx context.Context, out, in Buffer) Handle
}

func checkAllToAll(backend string, size int, out, in Buffer) {
	checkDType(backend, out)
	if out.DType() != in.DType() || out.Len() != in.Len() || out.Len()%size != 0 {
		panic(fmt.Sprintf("%s: AllToAll of %v into %v in a communicator of %d: want one dtype, one length, %d equal chunks", backend, in, out, size, size))
	}
	if Overlap(out, in) {
		panic(fmt.Sprintf("%s: AllToAll with overlapping in and out", backend))
	}
}
