package quant

import "fmt"

// GradientBits is qgZ's width: all_to_all_quant_reduce quantizes to int4.
const GradientBits = 4

// GradientGroups is qgZ's group count for a gradient of the given shape
// on world ranks (all_to_all_quant_reduce's intra_quant_group), and
// whether qgZ takes it at all. DeepSpeed reduce-scatters a 1-D tensor,
// and a tensor whose numel is not a multiple of 2·world, without
// quantization; ok is false for those. ok is also false where the
// groups do not split into the world's partitions (G not a multiple of
// world, or the groups of one device's chunk not a multiple of nodes):
// there DeepSpeed's swizzle kernel launches G/(nodes·devices) groups per
// partition, rounded down, and reduces memory it never wrote, so dszero
// reduce-scatters those tensors too, and why says so.
func GradientGroups(shape []int, nodes, devices int) (groups int, ok bool, why string) {
	world := nodes * devices
	n := 1
	for _, d := range shape {
		n *= d
	}
	switch {
	case len(shape) < 2:
		return 0, false, "1-D"
	case n%(2*world) != 0:
		return 0, false, fmt.Sprintf("%d elements, not a multiple of 2·world = %d", n, 2*world)
	}
	g := max(shape[0], shape[1], world)
	if g%world != 0 {
		return 0, false, fmt.Sprintf("%d quantization groups, not a multiple of the world of %d (DeepSpeed 0.14.5 would reduce unwritten memory)", g, world)
	}
	if per := n / g; per%2 != 0 {
		return 0, false, fmt.Sprintf("%d quantization groups of %d elements, odd for int4", g, per)
	}
	return g, true, ""
}

// SwizzleQuantize is swizzle_quant(x, groups, bits, Symmetric, 1,
// nodes, devices): x is nodes·devices partitions of equal length, each
// a whole number of the len(scales) groups; partition p = k·devices+d
// is quantized to position d·nodes+k of dst and of scales (its groups
// and their scales keep their order).
func SwizzleQuantize(dst []byte, scales []float32, x []float32, bits, nodes, devices int) {
	per := groupLen(len(x), len(scales), bits)
	parts := nodes * devices
	if len(scales)%parts != 0 {
		panic(fmt.Sprintf("quant: %d groups in %d partitions", len(scales), parts))
	}
	gpp := len(scales) / parts
	for p := range parts {
		out := (p%devices)*nodes + p/devices
		for j := range gpp {
			in, o := p*gpp+j, out*gpp+j
			quantizeGroup(dst[PackedLen(o*per, bits):PackedLen((o+1)*per, bits)], &scales[o], x[in*per:(in+1)*per], bits)
		}
	}
}

// ReduceQuantized is quantized_reduction(src, srcScales, in_groups,
// out_groups, bits, Symmetric, devices): src is devices tensors of
// len(dst) bytes, each in len(srcScales)/devices groups; element by
// element their dequantized values are added, tensor 0 first, each value
// and each sum passed through round (fp16's for DeepSpeed's kernels:
// half.NearestF16; nil: float32), and the sums requantized into dst in
// len(dstScales) groups. acc is scratch of len(dst)'s values.
func ReduceQuantized(dst []byte, dstScales []float32, src []byte, srcScales []float32, bits, devices int, acc []float32, round func(float32) float32) {
	m := len(dst)
	if len(src) != devices*m || len(srcScales)%devices != 0 {
		panic(fmt.Sprintf("quant: reducing %d bytes and %d scales over %d devices into %d bytes", len(src), len(srcScales), devices, m))
	}
	n := m
	if bits == 4 {
		n = 2 * m
	}
	if len(acc) != n {
		panic(fmt.Sprintf("quant: scratch of %d for %d values", len(acc), n))
	}
	gin := len(srcScales) / devices
	per := groupLen(n, gin, bits)
	clear(acc)
	for j := range devices {
		q, sc := src[j*m:(j+1)*m], srcScales[j*gin:(j+1)*gin]
		for i := range acc {
			acc[i] = add(acc[i], rounded(float32(Value(q, i, bits))*sc[i/per], round), round)
		}
	}
	Quantize(dst, dstScales, acc, bits)
}

// SumNodes is the last step of all_to_all_quant_reduce: x is nodes
// chunks of len(dst); dst = (Σ chunks) / nodes, each addition and the
// division passed through round (fp16's for DeepSpeed's kernels; nil:
// float32), chunk 0 first (torch's sum starts from the integer 0, which
// adds exactly).
func SumNodes(dst, x []float32, nodes int, round func(float32) float32) {
	m := len(dst)
	if len(x) != nodes*m {
		panic(fmt.Sprintf("quant: %d values in %d chunks of %d", len(x), nodes, m))
	}
	copy(dst, x[:m])
	for k := 1; k < nodes; k++ {
		for i, v := range x[k*m : (k+1)*m] {
			dst[i] = add(dst[i], v, round)
		}
	}
	d := float32(nodes)
	for i := range dst {
		dst[i] = rounded(dst[i]/d, round)
	}
}
