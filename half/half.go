package half

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/dszero/dszero/internal/vecloop"
)

// Bit patterns of special values.
const (
	F16Inf    uint16 = 0x7C00 // +Inf in fp16
	F16NegInf uint16 = 0xFC00 // -Inf in fp16
	F16NaN    uint16 = 0x7E00 // the quiet NaN torch writes for fp16 (with the sign of the input)
	F16Max    uint16 = 0x7BFF // 65504, the largest finite fp16 value
	BF16Inf   uint16 = 0x7F80 // +Inf in bf16
	BF16NaN   uint16 = 0x7FC0 // the NaN torch writes for every float32 NaN
)

// float32 bit patterns used by the conversions.
const (
	f32SignMask = 0x80000000
	f32Inf      = 0x7F800000
	f32QuietBit = 0x00400000

	// f16Overflow is 65536 = 2^16: |f| at or above it is not finite in fp16.
	// Values in [65520, 65536) are finite in float32 but round up to Inf.
	f16Overflow = (127 + 16) << 23
	// f16MinNormal is 2^-14, the smallest normal fp16 value.
	f16MinNormal = (127 - 14) << 23
	// f16Rebias moves a float32 exponent (bias 127) to fp16's (bias 15).
	f16Rebias = (127 - 15) << 23
)

// f16SubnormalMagic is 0.5. Adding it to |f| < 2^-14 leaves float32's last
// fraction bit worth 2^-24, the fp16 subnormal step, so the float32 adder
// (round to nearest even) rounds |f| to the nearest fp16 subnormal, and the
// fraction bits of the sum are that subnormal's 10-bit fraction (1024 when
// the value rounds up to 2^-14, which is also the right fp16 bit pattern).
const f16SubnormalMagic float32 = 0.5

// F16FromF32 rounds f to the nearest fp16 value (ties to even) and returns
// its bit pattern. See the package documentation for Inf, NaN and overflow.
func F16FromF32(f float32) uint16 {
	x := math.Float32bits(f)
	sign := uint16(x>>16) & 0x8000
	a := x &^ f32SignMask
	switch {
	case a >= f16Overflow:
		if a > f32Inf {
			return sign | F16NaN
		}
		return sign | F16Inf
	case a >= f16MinNormal:
		// Round the 23-bit fraction to 10 bits: add just under half an fp16
		// ulp, plus one when the kept part is odd (ties to even). A carry
		// out of the fraction increments the exponent, which is correct, and
		// from 65504 yields exactly the Inf pattern.
		a += 0xFFF + (a>>13)&1
		return sign | uint16((a-f16Rebias)>>13)
	default:
		s := math.Float32frombits(a) + f16SubnormalMagic
		return sign | uint16(math.Float32bits(s)-math.Float32bits(f16SubnormalMagic))
	}
}

// F32FromF16 returns the float32 value of the fp16 bit pattern h. It is
// exact; a NaN comes back as a quiet float32 NaN with h's sign and payload.
func F32FromF16(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	e := uint32(h>>10) & 0x1F
	frac := uint32(h & 0x3FF)
	switch e {
	case 0x1F:
		if frac == 0 {
			return math.Float32frombits(sign | f32Inf)
		}
		return math.Float32frombits(sign | f32Inf | f32QuietBit | frac<<13)
	case 0:
		// Zero or subnormal: frac × 2^-24, exact in float32.
		v := float32(frac) * 0x1p-24
		return math.Float32frombits(sign | math.Float32bits(v))
	default:
		return math.Float32frombits(sign | (e<<23 + f16Rebias) | frac<<13)
	}
}

// BF16FromF32 rounds f to the nearest bf16 value (ties to even) and returns
// its bit pattern: c10::detail::round_to_nearest_even. Every NaN becomes
// 0x7FC0; finite values that round past the largest bf16 become ±Inf.
func BF16FromF32(f float32) uint16 {
	x := math.Float32bits(f)
	// Add 0x7FFF, plus one when bit 16 (the lowest kept bit) is set, then
	// truncate: halfway cases go to the even neighbour.
	r := uint16((x + 0x7FFF + (x>>16)&1) >> 16)
	if x&^f32SignMask > f32Inf {
		r = BF16NaN // selected, not branched to: a conditional move in the loops
	}
	return r
}

// F32FromBF16 returns the float32 value of the bf16 bit pattern b (exact:
// the bits are the top half of the float32).
func F32FromBF16(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// NearestF16 returns the fp16 value nearest to f, as a float32. It
// equals F32FromF16(F16FromF32(f)) without the detour through 16 bits.
func NearestF16(f float32) float32 {
	x := math.Float32bits(f)
	sign := x & f32SignMask
	a := x &^ f32SignMask
	switch {
	case a >= f16Overflow:
		if a > f32Inf {
			return math.Float32frombits(sign | f32Inf | f32QuietBit)
		}
		return math.Float32frombits(sign | f32Inf)
	case a >= f16MinNormal:
		a = (a + 0xFFF + (a>>13)&1) &^ 0x1FFF
		if a >= f16Overflow {
			a = f32Inf
		}
		return math.Float32frombits(sign | a)
	default:
		// (|f| + 0.5) rounds to the fp16 subnormal grid; subtracting 0.5
		// again is exact (Sterbenz).
		r := (math.Float32frombits(a) + f16SubnormalMagic) - f16SubnormalMagic
		return math.Float32frombits(sign | math.Float32bits(r))
	}
}

// NearestBF16 returns the bf16 value nearest to f, as a float32. It
// equals F32FromBF16(BF16FromF32(f)).
func NearestBF16(f float32) float32 {
	x := math.Float32bits(f)
	r := (x + 0x7FFF + (x>>16)&1) &^ 0xFFFF
	if x&^f32SignMask > f32Inf {
		r = uint32(BF16NaN) << 16
	}
	return math.Float32frombits(r)
}

func checkLen(op string, dst, src int) {
	if dst != src {
		panic(fmt.Sprintf("half.%s: len(dst)=%d != len(src)=%d", op, dst, src))
	}
}

// F32ToF16 writes the fp16 bit pattern of each src[i] to dst[i] (eight at
// a time with F16C, the same bits).
func F32ToF16(dst []uint16, src []float32) {
	checkLen("F32ToF16", len(dst), len(src))
	packF16(dst[:len(src)], src)
}

// packF16 is packBF16 for fp16.
func packF16(dst []uint16, src []float32) {
	n := vecloop.Prefix(haveF16C, len(src), func(i, n int) { packF16F16C(&dst[i], &src[i], n) })
	dst, src = dst[n:], src[n:]
	for i, f := range src {
		// Inline fast path for results that are normal fp16 values: the
		// same arithmetic as F16FromF32, which is too large to inline.
		x := math.Float32bits(f)
		if a := x &^ f32SignMask; a-f16MinNormal < f16Overflow-f16MinNormal {
			a += 0xFFF + (a>>13)&1
			dst[i] = uint16(x>>16)&0x8000 | uint16((a-f16Rebias)>>13)
			continue
		}
		dst[i] = F16FromF32(f)
	}
}

// F16ToF32 writes the float32 value of each fp16 pattern src[i] to dst[i]
// (eight at a time with F16C).
func F16ToF32(dst []float32, src []uint16) {
	checkLen("F16ToF32", len(dst), len(src))
	unpackF16(dst[:len(src)], src)
}

// unpackF16 is unpackBF16 for fp16: descending, so that src may be the
// first half of dst's bytes.
func unpackF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	m := 0
	if haveF16C {
		m = len(dst) &^ 7
	}
	for i := len(dst) - 1; i >= m; i-- {
		dst[i] = F32FromF16(src[i])
	}
	blocksDown(m, func(i, n int) { unpackF16F16C(&dst[i], &src[i], n) })
}

// F32ToBF16 writes the bf16 bit pattern of each src[i] to dst[i]
// (eight at a time with AVX2, the same bits).
func F32ToBF16(dst []uint16, src []float32) {
	checkLen("F32ToBF16", len(dst), len(src))
	packBF16(dst[:len(src)], src)
}

// BF16ToF32 writes the float32 value of each bf16 pattern src[i] to dst[i]
// (eight at a time with AVX2).
func BF16ToF32(dst []float32, src []uint16) {
	checkLen("BF16ToF32", len(dst), len(src))
	unpackBF16(dst[:len(src)], src)
}

// packBF16 writes the bf16 patterns of src to dst (len(src) of them) in
// ascending order, so that dst may alias the first half of src's bytes.
func packBF16(dst []uint16, src []float32) {
	n := vecloop.Prefix(haveRoundVec, len(src), func(i, n int) { packBF16AVX2(&dst[i], &src[i], n) })
	for i := n; i < len(src); i++ {
		dst[i] = BF16FromF32(src[i])
	}
}

// unpackBF16 writes the float32 values of the bf16 patterns src to dst
// (len(dst) of them) in descending order, so that src may be the first
// half of dst's bytes.
func unpackBF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	m := 0
	if haveRoundVec {
		m = len(dst) &^ 7
	}
	for i := len(dst) - 1; i >= m; i-- {
		dst[i] = F32FromBF16(src[i])
	}
	blocksDown(m, func(i, n int) { unpackBF16AVX2(&dst[i], &src[i], n) })
}

// blocksDown runs block(i, n) over [0, m) in blocks of at most
// vecloop.Block elements from the top down, the order an in-place
// widening needs (each block writes bytes above the patterns still
// unread below it).
func blocksDown(m int, block func(i, n int)) {
	for end := m; end > 0; {
		n := min(end, vecloop.Block)
		block(end-n, n)
		end -= n
	}
}

// RoundF16 replaces each x[i] by the nearest fp16 value, kept as float32.
// On amd64 with AVX2 eight elements at a time (round_amd64.s), the same
// bits.
func RoundF16(x []float32) {
	for i := 0; i < len(x); {
		if n := min((len(x)-i)&^7, vecloop.Block); haveRoundVec && n > 0 {
			done := roundF16AVX2(&x[i], n)
			i += done
			if done == n {
				continue
			}
		}
		// One eight (or the tail) the vector loop did not take: a lane
		// that overflows or is not finite.
		end := min(len(x), i+8)
		roundF16Scalar(x[i:end])
		i = end
	}
}

func roundF16Scalar(x []float32) {
	for i, f := range x {
		// Inline fast path for normal fp16 results, as in F32ToF16.
		b := math.Float32bits(f)
		if a := b &^ f32SignMask; a-f16MinNormal < f16Overflow-f16MinNormal {
			a = (a + 0xFFF + (a>>13)&1) &^ 0x1FFF
			if a < f16Overflow {
				x[i] = math.Float32frombits(b&f32SignMask | a)
				continue
			}
		}
		x[i] = NearestF16(f)
	}
}

// RoundBF16 replaces each x[i] by the nearest bf16 value, kept as float32.
// On amd64 with AVX2 eight elements at a time (round_amd64.s), the same
// bits.
func RoundBF16(x []float32) {
	n := vecloop.Prefix(haveRoundVec, len(x), func(i, n int) { roundBF16AVX2(&x[i], n) })
	for i, f := range x[n:] {
		x[n+i] = NearestBF16(f)
	}
}

// PackBF16 rounds each x[i] to bf16 and stores the bit patterns in x's
// own memory: the returned slice, of len(x), aliases the first half of
// x's bytes, so x's float32 values are overwritten (element i's pattern
// lands in bytes already read). UnpackBF16 brings the values back. A
// 16-bit collective can then run on the gradients' own memory, with no
// second buffer: DeepSpeed's tensor.to(communication_data_type).
func PackBF16(x []float32) []uint16 {
	p := packed(x)
	packBF16(p, x)
	return p
}

// UnpackBF16 widens patterns [lo, hi) of a buffer packed by PackBF16 back
// into x[lo:hi] (float32 i overwrites patterns 2i and 2i+1, which the
// descending loop has already read).
func UnpackBF16(x []float32, lo, hi int) {
	unpackBF16(x[lo:hi], packed(x)[lo:hi])
}

// PackF16 is PackBF16 for fp16.
func PackF16(x []float32) []uint16 {
	p := packed(x)
	packF16(p, x)
	return p
}

// UnpackF16 is UnpackBF16 for fp16.
func UnpackF16(x []float32, lo, hi int) {
	unpackF16(x[lo:hi], packed(x)[lo:hi])
}

// packed is x's memory as len(x) 16-bit words (its first half).
func packed(x []float32) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(x))), len(x))
}
