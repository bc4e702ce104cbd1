package partition

import "fmt"

// Param is one trainable parameter as partitioning sees it: a name (as in
// named_parameters()) and its element count. Shapes do not matter here; a
// parameter is always flattened row-major.
type Param struct {
	Name  string
	Numel int
}

// NCCLStartAlignmentFactor is DeepSpeed's nccl_start_alignment_factor
// (stage_1_and_2.py, bf16_optimizer.py): every partition starts on a
// 4-byte boundary for 2-byte elements.
const NCCLStartAlignmentFactor = 2

// Alignment is the multiple the stage 1/2 flat buffer of one parameter
// group is padded to: NCCLStartAlignmentFactor × world.
func Alignment(world int) int {
	mustWorld(world)
	return NCCLStartAlignmentFactor * world
}

// Split is DeepSpeed's get_data_parallel_partitions: it cuts n elements
// into world contiguous ranges, base = n/world each, and the first n%world
// ranks one element more. It returns rank's range [lo, hi).
//
// A flat buffer is padded to a multiple of 2·world before it is split, so
// every rank gets exactly n/world elements there; Split keeps the uneven
// rule for completeness.
func Split(n, world, rank int) (lo, hi int) {
	mustWorld(world)
	mustRank(world, rank)
	if n < 0 {
		panic(fmt.Sprintf("partition: negative length %d", n))
	}
	base, extra := n/world, n%world
	lo = rank*base + min(rank, extra)
	hi = lo + base
	if rank < extra {
		hi++
	}
	return lo, hi
}

// FlatLayout is the stage 1/2 layout of one parameter group (DeepSpeed's
// DeepSpeedZeroOptimizer, and BF16_Optimizer at stage 0): the trainable
// parameters concatenated in flattening order into one flat buffer of
// Total elements, zero-padded to Padded = Total rounded up to a multiple of
// Alignment(World), and cut into World equal partitions of PartitionSize
// elements; rank r owns [r·PartitionSize, (r+1)·PartitionSize). All padding
// lies at the end of the buffer, so it falls in the last rank's partition,
// or — when the group is smaller than the padding — in the last few ranks'.
//
// Build it with Flat. The value is immutable; its slices must not be
// modified.
type FlatLayout struct {
	Params        []Param // in flattening order
	Offsets       []int   // Offsets[i]: where Params[i] starts in the flat buffer
	World         int
	Total         int // Σ numel
	Padded        int // Total rounded up to a multiple of Alignment(World)
	PartitionSize int // Padded / World
}

// Flat lays out params, given in flattening order, over world ranks. For
// round_robin_gradients, pass Permute(params, RoundRobinOrder(len(params),
// world)). It panics when world < 1 or a numel is negative (programmer
// errors: both were validated when the config and the model were built).
func Flat(params []Param, world int) FlatLayout {
	mustWorld(world)
	l := FlatLayout{
		Params:  append([]Param(nil), params...),
		Offsets: make([]int, len(params)),
		World:   world,
	}
	for i, p := range params {
		if p.Numel < 0 {
			panic(fmt.Sprintf("partition: parameter %d (%q) has negative numel %d", i, p.Name, p.Numel))
		}
		l.Offsets[i] = l.Total
		l.Total += p.Numel
	}
	l.Padded = roundUp(l.Total, Alignment(world))
	l.PartitionSize = l.Padded / world
	return l
}

// Partition returns the range [lo, hi) of the flat buffer that rank owns.
func (l FlatLayout) Partition(rank int) (lo, hi int) {
	return Split(l.Padded, l.World, rank)
}

// Padding is the number of padding elements inside rank's partition:
// PartitionSize when the partition starts at or after Total, the part
// beyond Total when it straddles Total, else 0. It is what DeepSpeed
// ≥ 0.16.5 records per rank in group_paddings and strips from the saved
// single_partition_of_fp32_groups (see SavedLen).
//
// DeepSpeed 0.14.5 recorded Padded−Total on the last rank and 0 elsewhere;
// the two agree whenever Padded−Total ≤ PartitionSize, which holds for
// every group of at least 2·World² elements (and for the reference runs,
// whose padding is 0).
func (l FlatLayout) Padding(rank int) int {
	lo, hi := l.Partition(rank)
	return hi - max(lo, min(hi, l.Total))
}

// SavedLen is the length of rank's single_partition_of_fp32_groups entry
// in a DeepSpeed checkpoint: the partition with its padding removed. The
// concatenation of every rank's saved partition is the unpadded flat
// buffer of Total elements.
func (l FlatLayout) SavedLen(rank int) int {
	return l.PartitionSize - l.Padding(rank)
}

// Fragment is the part of one parameter that lies in one rank's partition.
//
// In DeepSpeed's checkpoint, param_slice_mappings[group][Name] is a
// fragment_address{start: PartitionOffset, numel: Len}; ParamOffset (the
// lp_fragment_address start) is not saved.
type Fragment struct {
	Rank            int
	Param           int    // index into FlatLayout.Params
	Name            string // FlatLayout.Params[Param].Name
	ParamOffset     int    // first element of the fragment within the parameter
	PartitionOffset int    // where it lies within the rank's partition
	Len             int
}

// SliceMappings returns the fragments of the parameters that overlap rank's
// partition, in flattening order — DeepSpeed's param_slice_mappings for
// that rank. Parameters with no elements are never listed.
func (l FlatLayout) SliceMappings(rank int) []Fragment {
	lo, hi := l.Partition(rank)
	var out []Fragment
	for i := l.first(lo); i < len(l.Params); i++ {
		if l.Offsets[i] >= hi {
			break
		}
		if f, ok := l.fragment(i, rank, lo, hi); ok {
			out = append(out, f)
		}
	}
	return out
}

// Fragments returns where parameter i lives: one fragment per rank whose
// partition it overlaps, in rank order. Their Len add up to the
// parameter's numel.
func (l FlatLayout) Fragments(i int) []Fragment {
	if i < 0 || i >= len(l.Params) {
		panic(fmt.Sprintf("partition: parameter index %d out of range [0,%d)", i, len(l.Params)))
	}
	p := l.Params[i]
	if p.Numel == 0 || l.PartitionSize == 0 {
		return nil
	}
	first := l.Offsets[i] / l.PartitionSize
	last := (l.Offsets[i] + p.Numel - 1) / l.PartitionSize
	out := make([]Fragment, 0, last-first+1)
	for r := first; r <= last; r++ {
		lo, hi := l.Partition(r)
		f, _ := l.fragment(i, r, lo, hi)
		out = append(out, f)
	}
	return out
}

// fragment intersects parameter i with the partition [lo, hi) of rank
// (get_hp_fragment_mapping in deepspeed/utils/tensor_fragment.py).
func (l FlatLayout) fragment(i, rank, lo, hi int) (Fragment, bool) {
	pStart := l.Offsets[i]
	pEnd := pStart + l.Params[i].Numel
	start, end := max(pStart, lo), min(pEnd, hi)
	if start >= end {
		return Fragment{}, false
	}
	return Fragment{
		Rank:            rank,
		Param:           i,
		Name:            l.Params[i].Name,
		ParamOffset:     start - pStart,
		PartitionOffset: start - lo,
		Len:             end - start,
	}, true
}

// first returns the index of the first parameter that ends after off.
func (l FlatLayout) first(off int) int {
	lo, hi := 0, len(l.Params)
	for lo < hi {
		m := (lo + hi) / 2
		if l.Offsets[m]+l.Params[m].Numel <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// RoundRobinOrder is the flattening order DeepSpeed uses with
// round_robin_gradients (stage_1_and_2.py _round_robin_reorder): parameter
// i goes to bucket i % world; buckets are concatenated in bucket order,
// each keeping the original order. order[k] is the original index of the
// k-th flattened parameter. E.g. 5 parameters over 2 ranks: [0 2 4 1 3].
//
// DeepSpeed flattens in this order (and saves param_shapes in it), but
// builds param_slice_mappings by walking the original order as if it were
// the flattening order (link_hp_params receives bit16_groups, not
// round_robin_bit16_groups; 0.14.5 through 0.19.5). To reproduce those
// recorded mappings, use Flat(params, world).SliceMappings on the original
// order; the true location of the data is Flat(Permute(params, order),
// world).
func RoundRobinOrder(n, world int) []int {
	mustWorld(world)
	order := make([]int, 0, n)
	for b := 0; b < min(world, n); b++ {
		for i := b; i < n; i += world {
			order = append(order, i)
		}
	}
	return order
}

// Permute returns params reordered so that element k is params[order[k]].
// It panics unless order is a permutation of the indices of params.
func Permute(params []Param, order []int) []Param {
	if len(order) != len(params) {
		panic(fmt.Sprintf("partition: order has %d indices for %d parameters", len(order), len(params)))
	}
	seen := make([]bool, len(params))
	out := make([]Param, len(order))
	for k, i := range order {
		if i < 0 || i >= len(params) || seen[i] {
			panic(fmt.Sprintf("partition: order %v is not a permutation", order))
		}
		seen[i] = true
		out[k] = params[i]
	}
	return out
}

func roundUp(n, m int) int {
	return (n + m - 1) / m * m
}

func mustWorld(world int) {
	if world < 1 {
		panic(fmt.Sprintf("partition: world size %d < 1", world))
	}
}

func mustRank(world, rank int) {
	if rank < 0 || rank >= world {
		panic(fmt.Sprintf("partition: rank %d out of range [0,%d)", rank, world))
	}
}
