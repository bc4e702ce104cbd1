package partition

import "fmt"

// Moving data between full parameters, flat buffers and rank partitions.
// These are copies at load, save and setup time, not the training step's
// hot path (which works on the offsets directly). Functions that take what
// the caller built panic on wrong lengths; the Assemble functions, which
// take what a checkpoint holds, return an error naming the rank.

// Flatten copies params, one slice per FlatLayout.Params entry in the same
// order, into a new flat buffer of l.Padded elements; the padding is zero.
func Flatten[T any](l FlatLayout, params [][]T) []T {
	if len(params) != len(l.Params) {
		panic(fmt.Sprintf("partition: %d parameter slices for %d parameters", len(params), len(l.Params)))
	}
	flat := make([]T, l.Padded)
	for i, p := range params {
		if len(p) != l.Params[i].Numel {
			panic(fmt.Sprintf("partition: parameter %q has %d elements, want %d", l.Params[i].Name, len(p), l.Params[i].Numel))
		}
		copy(flat[l.Offsets[i]:], p)
	}
	return flat
}

// Unflatten returns each parameter's view of flat (no copy). flat needs
// at least l.Total elements: the padded buffer, or the concatenation of a
// checkpoint's saved partitions (zero_to_fp32's narrow(offset, numel)).
func Unflatten[T any](l FlatLayout, flat []T) [][]T {
	if len(flat) < l.Total {
		panic(fmt.Sprintf("partition: flat buffer has %d elements, layout needs %d", len(flat), l.Total))
	}
	out := make([][]T, len(l.Params))
	for i, p := range l.Params {
		o := l.Offsets[i]
		out[i] = flat[o : o+p.Numel : o+p.Numel]
	}
	return out
}

// Shard copies rank's partition (l.PartitionSize elements) out of a flat
// buffer. flat may be the padded buffer or just its first l.Total
// elements; positions past its end are padding and come back zero.
func Shard[T any](l FlatLayout, flat []T, rank int) []T {
	if len(flat) < l.Total || len(flat) > l.Padded {
		panic(fmt.Sprintf("partition: flat buffer has %d elements, want %d to %d", len(flat), l.Total, l.Padded))
	}
	lo, hi := l.Partition(rank)
	part := make([]T, hi-lo)
	if lo < len(flat) {
		copy(part, flat[lo:min(hi, len(flat))])
	}
	return part
}

// AssembleFlat rebuilds the padded flat buffer (l.Padded elements) from
// every rank's partition, parts[r] for rank r. A part may be whole
// (l.PartitionSize elements) or have its padding stripped, as DeepSpeed
// saves single_partition_of_fp32_groups (l.SavedLen(r) elements); the
// missing padding is zero. Pass the result to Unflatten for the
// parameters.
func AssembleFlat[T any](l FlatLayout, parts [][]T) ([]T, error) {
	if len(parts) != l.World {
		return nil, fmt.Errorf("partition: %d partitions for world size %d", len(parts), l.World)
	}
	flat := make([]T, l.Padded)
	for r, p := range parts {
		if len(p) != l.PartitionSize && len(p) != l.SavedLen(r) {
			return nil, fmt.Errorf("partition: rank %d partition has %d elements, want %d (or %d without padding)",
				r, len(p), l.PartitionSize, l.SavedLen(r))
		}
		lo, _ := l.Partition(r)
		copy(flat[lo:], p)
	}
	return flat, nil
}

// ShardParam copies rank's stage 3 partition of one full parameter:
// ParamPartitionSize(len(full), world) elements, padding zero (PerParam).
func ShardParam[T any](full []T, world, rank int) []T {
	lo, hi, pad := PerParam(len(full), world, rank)
	part := make([]T, hi-lo+pad)
	copy(part, full[lo:hi])
	return part
}

// AssembleParam rebuilds a stage 3 parameter of numel elements from its
// partitions, parts[r] for rank r, each ParamPartitionSize(numel,
// len(parts)) elements: their concatenation with the padding cut off.
func AssembleParam[T any](parts [][]T, numel int) ([]T, error) {
	if len(parts) < 1 {
		return nil, fmt.Errorf("partition: no partitions")
	}
	if numel < 0 {
		return nil, fmt.Errorf("partition: negative numel %d", numel)
	}
	ps := ParamPartitionSize(numel, len(parts))
	full := make([]T, numel)
	for r, p := range parts {
		if len(p) != ps {
			return nil, fmt.Errorf("partition: rank %d partition has %d elements, want %d", r, len(p), ps)
		}
		lo, hi, _ := PerParam(numel, len(parts), r)
		copy(full[lo:hi], p)
	}
	return full, nil
}

// ShardStage3 builds rank's flat buffer (l.RankNumel elements: its
// partition of every parameter, in order, padding zero) from the full
// parameters, one slice per l.Params entry.
func ShardStage3[T any](l Stage3Layout, params [][]T, rank int) []T {
	if len(params) != len(l.Params) {
		panic(fmt.Sprintf("partition: %d parameter slices for %d parameters", len(params), len(l.Params)))
	}
	mustRank(l.World, rank)
	flat := make([]T, l.RankNumel)
	for i, p := range params {
		if len(p) != l.Params[i].Numel {
			panic(fmt.Sprintf("partition: parameter %q has %d elements, want %d", l.Params[i].Name, len(p), l.Params[i].Numel))
		}
		lo, hi, _ := PerParam(len(p), l.World, rank)
		copy(flat[l.Offsets[i]:], p[lo:hi])
	}
	return flat
}

// AssembleStage3 rebuilds every parameter from the ranks' flat buffers,
// rankFlats[r] for rank r, each l.RankNumel elements (in a DeepSpeed
// checkpoint: the rank's fp32_flat_groups concatenated). This is
// zero_to_fp32's stage 3 reconstruction: parameter i is the concatenation
// of rankFlats[r][Offsets[i] : Offsets[i]+PartitionSizes[i]] over the
// ranks, cut to its numel.
func AssembleStage3[T any](l Stage3Layout, rankFlats [][]T) ([][]T, error) {
	if len(rankFlats) != l.World {
		return nil, fmt.Errorf("partition: %d rank buffers for world size %d", len(rankFlats), l.World)
	}
	for r, f := range rankFlats {
		if len(f) != l.RankNumel {
			return nil, fmt.Errorf("partition: rank %d flat buffer has %d elements, want %d", r, len(f), l.RankNumel)
		}
	}
	out := make([][]T, len(l.Params))
	for i, p := range l.Params {
		full := make([]T, p.Numel)
		for r, f := range rankFlats {
			lo, hi, _ := PerParam(p.Numel, l.World, r)
			copy(full[lo:hi], f[l.Offsets[i]:])
		}
		out[i] = full
	}
	return out, nil
}
