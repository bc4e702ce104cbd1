package dcp

import "fmt"

// Box is a hyperrectangle of a tensor: Sizes elements along each dimension
// from Offsets, the shape of a chunk.
type Box struct {
	Offsets, Sizes []int64
}

// RowChunk is the box rank holds of a tensor of size sharded on dim 0 over
// world ranks, as FSDP does (FSDP2's Shard(0) DTensors and FSDP1's
// SHARDED_STATE_DICT ShardedTensors both follow torch.chunk): every rank
// gets c = ceil(size[0]/world) rows, rank r those from r·c, the last ranks
// fewer or none. ok is false for a rank with no rows (FSDP1 gives it no
// shard) and for a 0-dimensional tensor, which is not sharded.
func RowChunk(size []int64, world, rank int) (b Box, ok bool) {
	if world < 1 || rank < 0 || rank >= world {
		panic(fmt.Sprintf("dcp.RowChunk: rank %d of %d", rank, world))
	}
	if len(size) == 0 {
		return Box{}, false
	}
	c := (size[0] + int64(world) - 1) / int64(world)
	lo := min(int64(rank)*c, size[0])
	hi := min(lo+c, size[0])
	if hi <= lo {
		return Box{}, false
	}
	b = Box{Offsets: make([]int64, len(size)), Sizes: append([]int64{}, size...)}
	b.Offsets[0], b.Sizes[0] = lo, hi-lo
	return b, true
}

// FlatBoxes splits the row-major element range [start, end) of a tensor of
// size into the fewest boxes that tile it: the partial leading row, the
// whole rows between, the partial trailing row, recursively in every
// dimension. A ZeRO partition — a contiguous piece of a flat buffer that
// may start and end inside a row — is saved as these chunks.
func FlatBoxes(size []int64, start, end int64) []Box {
	n := Numel(size)
	if start < 0 || end > n || start > end {
		panic(fmt.Sprintf("dcp.FlatBoxes: range [%d, %d) of %d elements", start, end, n))
	}
	if start == end {
		return nil
	}
	if len(size) == 0 {
		return []Box{{Offsets: []int64{}, Sizes: []int64{}}}
	}
	inner := Numel(size[1:]) // elements per index of dim 0
	sub := func(row int64, s, e int64) []Box {
		var out []Box
		for _, b := range FlatBoxes(size[1:], s, e) {
			out = append(out, Box{Offsets: append([]int64{row}, b.Offsets...), Sizes: append([]int64{1}, b.Sizes...)})
		}
		return out
	}
	r0, o0 := start/inner, start%inner
	r1, o1 := end/inner, end%inner
	if r0 == r1 { // inside one index of dim 0
		return sub(r0, o0, o1)
	}
	var out []Box
	whole := r0 // first index of dim 0 wholly in the range
	if o0 != 0 {
		out = append(out, sub(r0, o0, inner)...)
		whole++
	}
	if r1 > whole {
		b := Box{Offsets: make([]int64, len(size)), Sizes: append([]int64{}, size...)}
		b.Offsets[0], b.Sizes[0] = whole, r1-whole
		out = append(out, b)
	}
	if o1 != 0 {
		out = append(out, sub(r1, 0, o1)...)
	}
	return out
}

// intersect returns the box a and b share, and whether it is non-empty.
func intersect(a, b Box) (Box, bool) {
	out := Box{Offsets: make([]int64, len(a.Offsets)), Sizes: make([]int64, len(a.Offsets))}
	for d := range a.Offsets {
		lo := max(a.Offsets[d], b.Offsets[d])
		hi := min(a.Offsets[d]+a.Sizes[d], b.Offsets[d]+b.Sizes[d])
		if hi <= lo {
			return Box{}, false
		}
		out.Offsets[d], out.Sizes[d] = lo, hi-lo
	}
	return out, true
}
