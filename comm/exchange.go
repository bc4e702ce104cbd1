package comm

import (
	"context"
	"fmt"

	"github.com/dszero/dszero/device"
)

// blockExchanger is a Comm with a native all_to_all (the method of
// comm.AllToAller where a backend has one): chunk k of rank r's in lands in
// chunk r of rank k's out.
type blockExchanger interface {
	AllToAll(ctx context.Context, out, in Buffer) Handle
}

// AllToAll runs all_to_all on c (torch.distributed.all_to_all_single with
// equal splits, DeepSpeed-Ulysses' _SeqAllToAll): in and out have
// c.Size()·m elements each, cut into Size() blocks of m; block j of rank
// r's in lands in block r of rank j's out. Every rank of c calls it with
// the same dtype and length, in the same order as its other collectives;
// in and out must not overlap. It waits for the result.
//
// Where c has a native AllToAll method it is used and scratch is not.
// Otherwise the exchange is an all_gather of every rank's whole in into
// scratch, AllToAllScratch(c, in.Len()) elements of in's dtype (allocated
// here when it is shorter), from which each rank copies the blocks meant
// for it: Size() times the traffic of a true all_to_all, the same bits.
func AllToAll(ctx context.Context, c Comm, out, in, scratch Buffer) error {
	n := c.Size()
	if out.DType() != in.DType() || out.Len() != in.Len() || in.Len()%n != 0 {
		return fmt.Errorf("comm: all_to_all of %v into %v on %d ranks: want one dtype, one length, %d equal blocks", in, out, n, n)
	}
	if Overlap(out, in) {
		return fmt.Errorf("comm: all_to_all with overlapping in and out")
	}
	if x, ok := c.(blockExchanger); ok {
		return x.AllToAll(ctx, out, in).Wait()
	}
	m, all := in.Len()/n, scratch
	if all.Len() < n*in.Len() || all.DType() != in.DType() {
		all = Buffer{dtype: in.dtype}
		if in.dtype == device.F32 {
			all.f32 = make([]float32, n*in.Len())
		} else {
			all.bits = make([]uint16, n*in.Len())
		}
	}
	all = all.Slice(0, n*in.Len())
	if Overlap(all, in) || Overlap(all, out) {
		return fmt.Errorf("comm: all_to_all with its scratch overlapping in or out")
	}
	if err := c.AllGather(ctx, all, in).Wait(); err != nil {
		return err
	}
	r := c.Rank()
	for j := range n {
		src := all.Slice(j*in.Len()+r*m, j*in.Len()+(r+1)*m)
		Copy(out.Slice(j*m, (j+1)*m), src)
	}
	return nil
}

// AllToAllScratch is the scratch AllToAll needs on c for in of n
// elements: none where c has a native all_to_all, else Size()·n.
func AllToAllScratch(c Comm, n int) int {
	if _, ok := c.(blockExchanger); ok {
		return 0
	}
	return c.Size() * n
}
