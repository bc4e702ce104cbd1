package optim

import (
	"math"
)

// This file reproduces the gradient-norm arithmetic of PyTorch 1.13 (CPU,
// AVX2 kernels) and of DeepSpeed's clipping paths, so that a total norm and
// a clip coefficient come out with the same bits. Combining partial results
// across ranks is the caller's job (it owns the communicator); each function
// says which value travels.

// SumSquaresF32 is the float32 sum of squares that torch.norm(x, 2) takes
// the root of, for a contiguous float32 x (ReduceOpsKernel.cpp,
// norm_kernel_tensor_iterator_impl fast path, AVX2, GCC contraction):
//
//   - 8 lane accumulators over the first len-len%8 elements, acc += x*x
//     fused into one fma per element;
//   - the lanes folded left into lane 0;
//   - the remaining r = len%8 elements added to lane 0 in order, the first
//     4·⌊r/4⌋ as a rounded square then an add (GCC vectorised that part of
//     the scalar loop 4 wide), the rest as fmas.
//
// Golden tests pin all of this against real torch output.
//
// Where the CPU has AVX2 and FMA3 the lane loop runs in assembly
// (sumSquaresVector): one YMM register holds the 8 accumulators and
// VFMADD231PS is the fma of every lane, which rounds exactly as fma32, so
// the result has the same bits as the scalar code on every input.
func SumSquaresF32(x []float32) float32 {
	var acc [8]float32
	d := sumSquaresVector(&acc, x)
	return sumSquaresFinish(acc, x, d)
}

// sumSquaresScalar is SumSquaresF32 without the assembly: the reference the
// vector path is tested and benchmarked against.
func sumSquaresScalar(x []float32) float32 {
	return sumSquaresFinish([8]float32{}, x, 0)
}

// sumSquaresFinish continues SumSquaresF32 from element d (a multiple of 8)
// with the lane accumulators acc: the remaining lane steps (fma32 emulates
// the hardware fma in float64, which is why the assembly pays off), the
// fold and the tails. The fold and the tails stay here for both paths:
// they touch at most 15 values, and keeping one copy of them keeps the
// order of their roundings in one place.
func sumSquaresFinish(acc [8]float32, x []float32, d int) float32 {
	n := len(x)
	for ; d+8 <= n; d += 8 {
		v := x[d : d+8 : d+8]
		acc[0] = fma32(v[0], v[0], acc[0])
		acc[1] = fma32(v[1], v[1], acc[1])
		acc[2] = fma32(v[2], v[2], acc[2])
		acc[3] = fma32(v[3], v[3], acc[3])
		acc[4] = fma32(v[4], v[4], acc[4])
		acc[5] = fma32(v[5], v[5], acc[5])
		acc[6] = fma32(v[6], v[6], acc[6])
		acc[7] = fma32(v[7], v[7], acc[7])
	}
	b := acc[0]
	for _, a := range acc[1:] {
		b += a
	}
	if n-d >= 4 {
		for e := d + 4; d < e; d++ {
			b += float32(x[d] * x[d])
		}
	}
	for ; d < n; d++ {
		b = fma32(x[d], x[d], b)
	}
	return b
}

// Norm2F32 is torch.norm(x, 2) (= torch.linalg.vector_norm) of a
// contiguous float32 tensor: the float32 root of SumSquaresF32.
func Norm2F32(x []float32) float32 { return sqrt32(SumSquaresF32(x)) }

// Norm2F64 is torch.norm(x.double(), 2): a sequential float64 sum of
// squares (binary_kernel_reduce, one thread; squares of float32 values are
// exact in float64) and its root. DeepSpeed's ZeRO stages use it.
func Norm2F64(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(float64(v) * float64(v))
	}
	return math.Sqrt(s)
}

// SumF32 is torch.sum of a contiguous float32 vector (SumKernel.cpp
// cascade_sum, float accumulation, Vectorized<float> of 8 lanes, 4-way ILP,
// 4-level cascade). DeepSpeed's stage-0 norm sums the squared per-tensor
// norms with it.
func SumF32(x []float32) float32 { return cascadeSum(x, 8) }

// SumF64 is torch.sum of a contiguous float64 vector (as SumF32 with the 4
// lanes of Vectorized<double>).
func SumF64(x []float64) float64 { return cascadeSum(x, 4) }

type floatT interface{ ~float32 | ~float64 }

// lanes is one Vectorized<T> register (up to 8 lanes; w are used).
type lanes[T floatT] [8]T

// cascadeSum follows cascade_sum → vectorized_inner_sum (len ≥ w) or
// scalar_inner_sum (len < w): row_sum over vectors (ilp 4), the scalar
// tail summed first into a fresh accumulator, then the lanes added to it.
func cascadeSum[T floatT](x []T, w int) T {
	n := len(x)
	if n < w {
		acc := rowSum(n, 1, func(i int) lanes[T] { return lanes[T]{x[i]} })
		return acc[0]
	}
	nv := n / w
	acc := rowSum(nv, w, func(i int) (v lanes[T]) {
		copy(v[:w], x[i*w:])
		return v
	})
	var f T
	for k := nv * w; k < n; k++ {
		f += x[k]
	}
	for l := 0; l < w; l++ {
		f += acc[l]
	}
	return f
}

// rowSum is SumKernel.cpp row_sum: size vectors viewed as rows of 4
// (multi_row_sum), the leftover vectors added to the first partial sum,
// then partial sums 1..3 folded into it.
func rowSum[T floatT](size, w int, load func(i int) lanes[T]) lanes[T] {
	const ilp = 4
	sizeIlp := size / ilp
	ps := multiRowSum(sizeIlp, w, func(i, k int) lanes[T] { return load(i*ilp + k) })
	for i := sizeIlp * ilp; i < size; i++ {
		addLanes(&ps[0], load(i), w)
	}
	for k := 1; k < ilp; k++ {
		addLanes(&ps[0], ps[k], w)
	}
	return ps[0]
}

// multiRowSum is SumKernel.cpp multi_row_sum with nrows = 4 and 4 levels:
// level 0 accumulates 2^p rows (p = max(4, ⌈log2 size⌉/4)), then carries
// into level 1, which carries into level 2 every 2^p of its own steps, etc.
func multiRowSum[T floatT](size, w int, load func(i, k int) lanes[T]) [4]lanes[T] {
	const levels, nrows = 4, 4
	power := ceilLog2(size) / levels
	if power < 4 {
		power = 4
	}
	step := 1 << power
	mask := step - 1
	var acc [levels][nrows]lanes[T]
	i := 0
	for i+step <= size {
		for j := 0; j < step; j, i = j+1, i+1 {
			for k := 0; k < nrows; k++ {
				addLanes(&acc[0][k], load(i, k), w)
			}
		}
		for j := 1; j < levels; j++ {
			for k := 0; k < nrows; k++ {
				addLanes(&acc[j][k], acc[j-1][k], w)
				acc[j-1][k] = lanes[T]{}
			}
			if i&(mask<<(j*power)) != 0 {
				break
			}
		}
	}
	for ; i < size; i++ {
		for k := 0; k < nrows; k++ {
			addLanes(&acc[0][k], load(i, k), w)
		}
	}
	for j := 1; j < levels; j++ {
		for k := 0; k < nrows; k++ {
			addLanes(&acc[0][k], acc[j][k], w)
		}
	}
	return acc[0]
}

func addLanes[T floatT](dst *lanes[T], v lanes[T], w int) {
	for l := 0; l < w; l++ {
		dst[l] += v[l]
	}
}

// ceilLog2 is c10::utils::CeilLog2: ⌈log2 x⌉, and 1 for x ≤ 2.
func ceilLog2(x int) int {
	if x <= 2 {
		return 1
	}
	r := 0
	for v := x - 1; v > 0; v >>= 1 {
		r++
	}
	return r
}

// SegmentNormsF32 writes torch.norm of each segment of flat into out.
func SegmentNormsF32(flat []float32, segs []Segment, out []float32) {
	for i, s := range segs {
		out[i] = Norm2F32(flat[s.Start : s.Start+s.Len])
	}
}

// SegmentNormsF64 writes torch.norm(x.double()) of each segment into out.
func SegmentNormsF64(flat []float32, segs []Segment, out []float64) {
	for i, s := range segs {
		out[i] = Norm2F64(flat[s.Start : s.Start+s.Len])
	}
}

// SquaredSumF32 is torch.stack(norms).square().sum(): each norm squared
// in float32, then SumF32. scratch must hold len(norms) values.
func SquaredSumF32(norms, scratch []float32) float32 {
	sq := scratch[:len(norms)]
	for i, v := range norms {
		sq[i] = float32(v * v)
	}
	return SumF32(sq)
}

// SquaredSumF64 is the float64 version (torch.stack(norms).square().sum()
// on double norms, or torch.sum(torch.pow(stack, 2))).
func SquaredSumF64(norms, scratch []float64) float64 {
	sq := scratch[:len(norms)]
	for i, v := range norms {
		sq[i] = float64(v * v)
	}
	return SumF64(sq)
}
