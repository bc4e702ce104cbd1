package model

import "math"

// 16-bit floating point conversions and rounding, as PyTorch does them.
//
// bf16 keeps float32's 8-bit exponent and 7 of its 23 mantissa bits;
// fp16 has a 5-bit exponent (bias 15, subnormals below 2^-14) and 10
// mantissa bits. Narrowing rounds to nearest, ties to even, and overflows
// to ±Inf; widening is exact.

// F32ToBF16 rounds f to bf16 (nearest, ties to even) like c10::BFloat16:
// every NaN becomes 0x7FC0.
func F32ToBF16(f float32) uint16 {
	x := math.Float32bits(f)
	if x&0x7fffffff > 0x7f800000 {
		return 0x7fc0
	}
	x += 0x7fff + (x>>16)&1
	return uint16(x >> 16)
}

// BF16ToF32 widens a bf16 bit pattern; exact.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToF16 rounds f to IEEE binary16 (nearest, ties to even), with
// subnormals, overflow to ±Inf, and NaN kept quiet (0x7E00 with f's sign).
func F32ToF16(f float32) uint16 {
	x := math.Float32bits(f)
	sign := uint16(x>>16) & 0x8000
	exp := int(x>>23) & 0xff
	mant := x & 0x7fffff
	switch {
	case exp == 0xff && mant != 0:
		return sign | 0x7e00
	case exp == 0xff:
		return sign | 0x7c00
	case exp == 0: // float32 zero or subnormal: far below half of fp16's smallest subnormal
		return sign
	}
	e := exp - 127
	if e > 15 {
		return sign | 0x7c00
	}
	full := mant | 0x800000 // 24 significant bits
	// Normal results keep 11 significant bits; subnormals fewer, in units of 2^-24.
	shift := uint(13)
	var h uint32
	if e >= -14 {
		h = uint32(e+15)<<10 | mant>>13
	} else {
		shift = uint(13 + (-14 - e))
		if shift > 24 {
			return sign // below 2^-25: rounds to zero
		}
		h = full >> shift
	}
	rem := full & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || rem == half && h&1 == 1 {
		h++ // a carry into the exponent is correct, up to Inf (0x7C00)
	}
	return sign | uint16(h)
}

// F16ToF32 widens an IEEE binary16 bit pattern; exact.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: mant * 2^-24
		v := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// RoundBF16 rounds every element of s to the nearest bf16 value, in
// place. It emulates a bf16 op output on a float32 buffer.
func RoundBF16(s []float32) {
	for i, v := range s {
		s[i] = BF16ToF32(F32ToBF16(v))
	}
}

// RoundFP16 rounds every element of s to the nearest fp16 value, in place.
func RoundFP16(s []float32) {
	for i, v := range s {
		s[i] = F16ToF32(F32ToF16(v))
	}
}
