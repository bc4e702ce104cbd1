package partition

import "fmt"

// ParamPartitionSize is the number of elements every rank holds of one
// parameter at stage 3: ceil(numel/world) (partition_parameters.py:
// aligned = numel + pad, partition = aligned / world; zero_to_fp32.py
// zero3_partitioned_param_info).
func ParamPartitionSize(numel, world int) int {
	mustWorld(world)
	mustNumel(numel)
	return (numel + world - 1) / world
}

// ParamPadding is the number of padding elements a stage 3 parameter is
// extended by so that it splits evenly: (world − numel%world) % world
// (partition_parameters.py _padding_size).
func ParamPadding(numel, world int) int {
	mustWorld(world)
	mustNumel(numel)
	return (world - numel%world) % world
}

// PerParam is rank's share of one parameter at stage 3. The parameter,
// extended by ParamPadding(numel, world) elements, is cut into world equal
// partitions of ps = ParamPartitionSize(numel, world); rank r owns
// [r·ps, (r+1)·ps) of the padded parameter. PerParam returns the real
// elements of that range, [lo, hi) of the full parameter (clamped to
// numel, so lo == hi for a rank holding only padding), and pad, the
// number of padding slots at the tail of the rank's partition:
// hi − lo + pad == ps always.
//
// Padding therefore ends the last rank's partition, and fills whole
// partitions of the last ranks when numel ≤ (world−1)·ps (numel = 5 over
// 4 ranks: ps = 2; the ranks hold [0,2), [2,4), [4,5) + 1 slot, and 2
// slots).
// DeepSpeed allocates the padding with torch.empty and never reads it;
// dszero zeroes it.
func PerParam(numel, world, rank int) (lo, hi, pad int) {
	mustRank(world, rank)
	ps := ParamPartitionSize(numel, world)
	lo = min(rank*ps, numel)
	hi = min(lo+ps, numel)
	return lo, hi, ps - (hi - lo)
}

// SubGroups is DeepSpeed's _create_fp16_sub_groups (stage3.py): it groups
// consecutive parameters of one parameter group, given by their partition
// sizes, into optimizer sub-groups and returns the parameter indices of
// each. When subGroupSize ≥ the sum of the sizes, there is one group with
// every parameter. Otherwise parameters are appended to the current group
// until its summed partition size reaches (≥) subGroupSize, or the last
// parameter is added, and the group is closed. A sub-group can therefore
// exceed subGroupSize by up to one partition; subGroupSize 0 puts each
// parameter in its own group. An empty parameter group gives one empty
// sub-group, as in DeepSpeed.
//
// Each sub-group has its own flat fp32 buffer on each rank — the
// concatenation of the rank's partitions of its parameters — and is one
// optimizer step call and one offload/NVMe swap unit. It panics on a
// negative size.
func SubGroups(partitionSizes []int, subGroupSize int) [][]int {
	if subGroupSize < 0 {
		panic(fmt.Sprintf("partition: negative sub_group_size %d", subGroupSize))
	}
	total := 0
	for _, s := range partitionSizes {
		mustNumel(s)
		total += s
	}
	if subGroupSize >= total {
		all := make([]int, len(partitionSizes))
		for i := range all {
			all[i] = i
		}
		return [][]int{all}
	}
	var groups [][]int
	var cur []int
	acc := 0
	for i, s := range partitionSizes {
		cur = append(cur, i)
		acc += s
		if acc >= subGroupSize || i == len(partitionSizes)-1 {
			groups = append(groups, cur)
			cur, acc = nil, 0
		}
	}
	return groups
}

// Stage3Layout is the stage 3 layout of one parameter group on World
// ranks (DeepSpeedZeroOptimizer_Stage3): every parameter partitioned on
// its own (PerParam), and each rank's partitions concatenated in parameter
// order into one rank-local flat buffer of RankNumel elements, cut into
// the sub-groups of SubGroups. The rank-local layout is the same on every
// rank: parameter i's partition starts at Offsets[i] on each of them.
//
// In a DeepSpeed checkpoint each rank's fp32_flat_groups holds one tensor
// per sub-group (SubGroupNumel elements, padding included), and
// param_shapes one ordered name→shape dict per sub-group.
//
// Build it with Stage3. The value is immutable; its slices must not be
// modified.
type Stage3Layout struct {
	Params         []Param
	World          int
	PartitionSizes []int   // PartitionSizes[i] = ParamPartitionSize(Params[i].Numel, World)
	Offsets        []int   // start of parameter i's partition in each rank's flat buffer
	RankNumel      int     // Σ PartitionSizes: elements per rank, padding included
	SubGroups      [][]int // parameter indices per sub-group (SubGroups)
}

// Stage3 lays out params over world ranks with DeepSpeed's sub_group_size
// (default 1e9). It panics when world < 1, a numel is negative or
// subGroupSize is negative.
func Stage3(params []Param, world, subGroupSize int) Stage3Layout {
	mustWorld(world)
	l := Stage3Layout{
		Params:         append([]Param(nil), params...),
		World:          world,
		PartitionSizes: make([]int, len(params)),
		Offsets:        make([]int, len(params)),
	}
	for i, p := range params {
		l.PartitionSizes[i] = ParamPartitionSize(p.Numel, world)
		l.Offsets[i] = l.RankNumel
		l.RankNumel += l.PartitionSizes[i]
	}
	l.SubGroups = SubGroups(l.PartitionSizes, subGroupSize)
	return l
}

// Owned is PerParam for parameter i: the real elements [lo, hi) of it
// that rank holds, and the padding slots after them.
func (l Stage3Layout) Owned(i, rank int) (lo, hi, pad int) {
	return PerParam(l.Params[i].Numel, l.World, rank)
}

// SubGroupNumel is the length of sub-group g's flat buffer on each rank.
func (l Stage3Layout) SubGroupNumel(g int) int {
	n := 0
	for _, i := range l.SubGroups[g] {
		n += l.PartitionSizes[i]
	}
	return n
}

// SubGroupOffset is where sub-group g's flat buffer starts in the rank's
// flat buffer (the concatenation of all sub-groups).
func (l Stage3Layout) SubGroupOffset(g int) int {
	if len(l.SubGroups[g]) == 0 {
		return l.RankNumel
	}
	return l.Offsets[l.SubGroups[g][0]]
}

// Padding is the number of padding elements in rank's flat buffer.
func (l Stage3Layout) Padding(rank int) int {
	mustRank(l.World, rank)
	n := 0
	for _, p := range l.Params {
		_, _, pad := PerParam(p.Numel, l.World, rank)
		n += pad
	}
	return n
}

func mustNumel(n int) {
	if n < 0 {
		panic(fmt.Sprintf("partition: negative numel %d", n))
	}
}

// OffloadOrder is which end of a rank's sub-groups partial optimizer
// offload (zero_optimization.offload_optimizer.ratio, ZeRO-3) sends to the
// host; DeepSpeed changed it in 0.18.0 (SuperOffload, #7559). The zero
// value is the newer rule.
type OffloadOrder int

const (
	// OffloadLast is DeepSpeed ≥ 0.18.0's _create_fp32_partitions:
	//	if i >= int((1 - self.partial_offload) * sub_group_size): 'cpu'
	// the last k − int((1−r)·k) of k sub-groups go to the host.
	OffloadLast OffloadOrder = iota
	// OffloadFirst is DeepSpeed 0.14.5 (to 0.17.x):
	//	if i < int(self.partial_offload * sub_group_size): 'cpu'
	// the first int(r·k) of k sub-groups go to the host.
	OffloadFirst
)

func (o OffloadOrder) String() string {
	switch o {
	case OffloadLast:
		return "last"
	case OffloadFirst:
		return "first"
	}
	return fmt.Sprintf("OffloadOrder(%d)", int(o))
}

// HostSubGroups is the range [lo, hi) of a rank's k sub-groups whose fp32
// master, gradient partition and optimizer state partial offload with
// ratio r puts on the host; the others stay on the device. (DeepSpeed's
// "sub_group_size" there is len(fp16_partitioned_groups_flat): the number
// of sub-groups, k.) The products are float64 and truncated toward zero,
// as Python's int() does: r = 0.57 of k = 100 puts int(56.99999999999999)
// = 56 on the host with OffloadFirst, and 100 − int(43.00000000000001) =
// 57 with OffloadLast; r = 0.9 of k = 10 puts 9, and 10 − int(0.99999…) =
// 10. It panics when r is outside [0, 1] or k < 0.
func (o OffloadOrder) HostSubGroups(k int, r float64) (lo, hi int) {
	if k < 0 || !(r >= 0 && r <= 1) {
		panic(fmt.Sprintf("partition: HostSubGroups(%d, %v)", k, r))
	}
	switch o {
	case OffloadFirst:
		return 0, int(r * float64(k))
	case OffloadLast:
		return int((1 - r) * float64(k)), k
	}
	panic(fmt.Sprintf("partition: unknown %v", o))
}
