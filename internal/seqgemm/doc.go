// Package seqgemm multiplies small float32 matrices so that every output
// element is the sum of its products taken in order of the inner index,
// starting from +0, with each product and each sum rounded to float32 on
// its own:
//
//	c[i][j] = ((0 + a[i][0]·b[0][j]) + a[i][1]·b[1][j]) + … + a[i][k-1]·b[k-1][j]
//
// That is the value of the plain loop
//
//	var s float32
//	for l := range k { s += float32(a[i][l] * b[l][j]) }
//
// so code written as such loops (the fp32 attention of model/gpt, whose
// order reproduces PyTorch's reference runs within their tolerances) can
// call Mul instead and get the same bits, much faster.
//
// # Why not a BLAS
//
// An optimised SGEMM is free to split the inner sum into partial sums and
// to fuse multiply and add; both change the rounding, and a chaotic
// training run (Adam divides by √v + ε) turns a last-bit difference in an
// attention score into weight differences above the 1e-5 the conformance
// tests allow. Mul keeps one order per element and gets its speed from
// the other two dimensions instead: on amd64 with AVX, a kernel holds a
// 4×16 block of c in eight vector registers and, for each l in order,
// multiplies a broadcast a[i][l] by eight columns of b[l] and adds the
// product to the accumulators — eight independent elements per
// instruction, each updated exactly as the scalar loop updates it. Edges
// that fill no vector run the scalar loop. Without AVX (or with the
// purego build tag) everything runs the scalar loop.
//
// # Layout
//
// a is addressed with two strides, a[i*ai + l*al], so Mul reads a matrix or
// its transpose in place (attention needs both P and Pᵀ). b is row-major
// with leading dimension ldb and c with ldc; their rows are read and
// written contiguously.
package seqgemm
