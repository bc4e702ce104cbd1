package comm

// Gloo's ring order. torch's CPU backend (gloo) all-reduces a buffer of n
// elements over W ranks with a ring (gloo/allreduce.cc): the buffer is cut
// into S segments — the number of 1 MiB segments it needs, at least 2·W,
// rounded up to a multiple of W — of e elements each (⌈bytes/S⌉ rounded up
// to whole elements), and block j = segments [j·S/W, (j+1)·S/W) travels the
// ring from rank j−1 down to rank j: its sum is
//
//	x_{j−1}, + x_{j−2}, + x_{j−3}, …, + x_j      (ranks mod W)
//
// each addition a float32 add (16-bit dtypes rounded after each, as
// gloo's sum<bfloat16> does). With two ranks the order cannot matter; with
// three or more it does, and an in-process or MPI run that adds in rank
// order differs from DeepSpeed on gloo (and from PyTorch's own DDP on
// CPU) in the last bits from the first all-reduce on. AllReduce in the
// CPU backends therefore adds in this order (ReduceRing), so that a
// 3-rank stage-0 run reproduces theirs bit for bit as a 2-rank run does.
//
// Every all-reduce takes the order, a ZeRO stage's bucket all-reduce too
// (DeepSpeed's stage 1/2 path with reduce_scatter false is one).
// ReduceScatter keeps rank order: DeepSpeed's stages 1 and 2
// reduce each partition with dist.reduce, whose ring (gloo/reduce.cc)
// follows the same chain over the partition for partitions below
// 2·W MiB, and its stage 3 reduce-scatter, which torch 1.13's gloo lacks,
// is an all-reduce of the whole bucket; neither is reproduced yet.

// glooMaxSegment is gloo's kMaxSegmentSize: the largest send or receive
// of its ring algorithms.
const glooMaxSegment = 1 << 20

// RingBlock is the number of elements of each rank's block in gloo's ring
// all-reduce of n elements of esize bytes over world ranks: block j is
// elements [j·b, min((j+1)·b, n)). It is 0 when n is.
func RingBlock(n, esize, world int) int {
	if n <= 0 || world < 1 {
		return 0
	}
	total := n * esize
	maxSeg := esize * max(1, glooMaxSegment/esize)
	segs := roundUp(max(ceilDiv(total, maxSeg), 2*world), world)
	seg := roundUp(ceilDiv(total, segs), esize) / esize
	return segs / world * seg
}

// ReduceRing is Reduce for an all-reduce in gloo's ring order: srcs, in
// rank order, hold elements [off, off+len) of a buffer of n elements that
// every rank all-reduces, and each element is summed in the order of the
// ring block it falls in. With one or two sources it is Reduce.
func ReduceRing(dsts, srcs []Buffer, op Op, off, n int) {
	w := len(srcs)
	if w <= 2 || srcs[0].Len() == 0 {
		Reduce(dsts, srcs, op)
		return
	}
	b := RingBlock(n, srcs[0].dtype.Size(), w)
	size := srcs[0].Len()
	var ob, sb [16]Buffer // no allocation for up to 16 ranks
	order, sub := ob[:0], sb[:0]
	if w > len(ob) || len(dsts) > len(sb) {
		order, sub = make([]Buffer, 0, w), make([]Buffer, 0, len(dsts))
	}
	order, sub = order[:w], sub[:len(dsts)]
	for lo := 0; lo < size; {
		j := (off + lo) / b
		hi := min(size, (j+1)*b-off)
		for k := range w {
			order[k] = srcs[((j-1-k)%w+w)%w].Slice(lo, hi)
		}
		for k, d := range dsts {
			sub[k] = d.Slice(lo, hi)
		}
		Reduce(sub, order, op)
		lo = hi
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func roundUp(a, m int) int { return ceilDiv(a, m) * m }
