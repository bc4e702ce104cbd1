//go:build !purego

package gpt

import "golang.org/x/sys/cpu"

// haveExpVec: the CPU runs expvec_amd64.s (AVX2 and FMA).
var haveExpVec = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// expSubSumAVX2 adds e^((x[i]−a)−b) into sums[i mod 8] for i < n, in
// order; n is a positive multiple of 8.
//
//go:noescape
func expSubSumAVX2(x *float32, n int, a, b float32, sums *[8]float32)

// expSubScaleAVX2 sets x[i] = e^((x[i]−a)−b)·d for i < n; n is a positive
// multiple of 8.
//
//go:noescape
func expSubScaleAVX2(x *float32, n int, a, b, d float32)

// expSubSum is Σ e^((x[i]−a)−b) over x, in float64 (vecExp).
func expSubSum(x []float32, a, b float32) float64 {
	n := 0
	var sum float64
	if haveExpVec {
		var lanes [8]float32
		for n+vecExpBlock <= len(x)&^7 {
			expSubSumAVX2(&x[n], vecExpBlock, a, b, &lanes)
			n += vecExpBlock
		}
		if m := len(x)&^7 - n; m > 0 {
			expSubSumAVX2(&x[n], m, a, b, &lanes)
			n += m
		}
		for _, l := range lanes {
			sum += float64(l)
		}
	}
	for _, v := range x[n:] {
		sum += float64(fastExp((v - a) - b))
	}
	return sum
}

// expSubScale sets x[i] = e^((x[i]−a)−b)·d (vecExp).
func expSubScale(x []float32, a, b, d float32) {
	n := 0
	if haveExpVec && len(x) >= 8 {
		n = len(x) &^ 7
		for lo := 0; lo < n; lo += vecExpBlock {
			expSubScaleAVX2(&x[lo], min(vecExpBlock, n-lo), a, b, d)
		}
	}
	for i, v := range x[n:] {
		x[n+i] = fastExp((v-a)-b) * d
	}
}

func haveVec() bool { return haveExpVec }
