package quant

import (
	"fmt"
	"math"
)

// PackedLen is the bytes of n values of bits bits (8 or 4; n even for 4).
func PackedLen(n, bits int) int {
	checkBits(bits)
	if bits == 4 {
		return n / 2
	}
	return n
}

func checkBits(bits int) {
	if bits != 8 && bits != 4 {
		panic(fmt.Sprintf("quant: %d bits (want 8 or 4)", bits))
	}
}

// WeightTargetGroup is CUDAQuantizer.target_group_size: qwZ's groups
// hold about this many elements ("the optimal size is 4k").
const WeightTargetGroup = 8000

// WeightGroups is CUDAQuantizer.quantize's group count for a tensor of n
// elements: from ⌈n/8000⌉ up, the first g with n a multiple of 8·g, then
// doubled while n is a multiple of 16·g and n/g > 8000. DeepSpeed
// asserts that n is a multiple of 8 and n/g < 16000; the error says so
// where either fails.
func WeightGroups(n int) (int, error) {
	if n <= 0 {
		return 0, fmt.Errorf("quant: qwZ of %d elements", n)
	}
	g := (n + WeightTargetGroup - 1) / WeightTargetGroup
	for g < n && n%(8*g) != 0 {
		g++
	}
	for n%(16*g) == 0 && float64(n)/float64(g) > WeightTargetGroup {
		g *= 2
	}
	if n%(8*g) != 0 {
		return 0, fmt.Errorf("quant: qwZ of %d elements: CUDAQuantizer needs a multiple of 8 (DeepSpeed asserts \"Qantized weight requires the number of weights be a multiple of 8\")", n)
	}
	if float64(n)/float64(g) >= 16000 {
		return 0, fmt.Errorf("quant: qwZ of %d elements: %d groups of more than 16k (DeepSpeed asserts)", n, g)
	}
	return g, nil
}

// levels is the clamp range of bits-bit values.
func levels(bits int) (lo, hi int32) { return -(1 << (bits - 1)), 1<<(bits-1) - 1 }

// scaleOf is Params<Symmetric, bits>(max).scale.
func scaleOf(m float32, bits int) float32 {
	if m == 0 {
		return 1
	}
	return float32(int32(1)<<bits) / (2 * m)
}

// level is Params::quantize: clamp(__float2int_rn(x·s)).
func level(x, s float32, lo, hi int32) int32 {
	v := x * s
	if v != v { // NaN: __float2int_rn gives INT_MIN
		return lo
	}
	r := math.RoundToEven(float64(v))
	if r < float64(lo) {
		return lo
	}
	if r > float64(hi) {
		return hi
	}
	return int32(r)
}

// absMax is max |x| of a group. A NaN makes it NaN (the group then
// dequantizes to NaN, as an overflowed fp16 group must).
func absMax(x []float32) float32 {
	var m float32
	for _, v := range x {
		a := float32(math.Abs(float64(v)))
		if a > m || a != a {
			m = a
		}
		if m != m {
			return m
		}
	}
	return m
}

// Quantize quantizes x into dst (PackedLen(len(x), bits) bytes) in
// len(scales) groups of len(x)/len(scales) elements each, writing each
// group's stored scale (see the package doc). len(scales) must divide
// len(x), and a group's length must be even for 4 bits; anything else
// is a programmer error and panics.
func Quantize(dst []byte, scales []float32, x []float32, bits int) {
	per := groupLen(len(x), len(scales), bits)
	if len(dst) != PackedLen(len(x), bits) {
		panic(fmt.Sprintf("quant: %d bytes for %d %d-bit values", len(dst), len(x), bits))
	}
	for g := range scales {
		quantizeGroup(dst[PackedLen(g*per, bits):PackedLen((g+1)*per, bits)], &scales[g], x[g*per:(g+1)*per], bits)
	}
}

// quantizeGroup quantizes one group with its own max.
func quantizeGroup(dst []byte, scale *float32, x []float32, bits int) {
	s := scaleOf(absMax(x), bits)
	*scale = 1 / s
	lo, hi := levels(bits)
	if bits == 8 {
		for i, v := range x {
			dst[i] = byte(int8(level(v, s, lo, hi)))
		}
		return
	}
	for i := 0; i < len(x); i += 2 {
		a, b := level(x[i], s, lo, hi), level(x[i+1], s, lo, hi)
		dst[i/2] = byte(a)<<4 | byte(b)&0xF
	}
}

func groupLen(n, groups, bits int) int {
	checkBits(bits)
	if groups <= 0 || n%groups != 0 {
		panic(fmt.Sprintf("quant: %d elements in %d groups", n, groups))
	}
	per := n / groups
	if bits == 4 && per%2 != 0 {
		panic(fmt.Sprintf("quant: 4-bit groups of %d elements (want even)", per))
	}
	return per
}

// Value is the bits-bit value at index i of packed bytes q.
func Value(q []byte, i, bits int) int32 {
	if bits == 8 {
		return int32(int8(q[i]))
	}
	b := q[i/2]
	if i%2 == 0 {
		return int32(int8(b) >> 4)
	}
	return int32(int8(b<<4) >> 4)
}

// Dequantize writes the len(dst) values of q, in len(scales) equal
// groups, as f32(q·scale), each passed through round when it is not nil
// (DeepSpeed's dequantize rounds to fp16: half.NearestF16).
func Dequantize(dst []float32, q []byte, scales []float32, bits int, round func(float32) float32) {
	per := groupLen(len(dst), len(scales), bits)
	if len(q) != PackedLen(len(dst), bits) {
		panic(fmt.Sprintf("quant: %d bytes for %d %d-bit values", len(q), len(dst), bits))
	}
	for g, s := range scales {
		for i := g * per; i < (g+1)*per; i++ {
			dst[i] = rounded(float32(Value(q, i, bits))*s, round)
		}
	}
}

// add is the sum of two values of round's dtype held as float32: their
// float32 sum passed through round, which for fp16 is __hadd (the float32
// sum of two fp16 values rounded to fp16 is the correctly rounded fp16
// sum: 24 ≥ 2·11+2 bits; likewise for bf16's 8).
func add(a, b float32, round func(float32) float32) float32 { return rounded(a+b, round) }

// rounded is round(x), or x when round is nil.
func rounded(x float32, round func(float32) float32) float32 {
	if round == nil {
		return x
	}
	return round(x)
}
