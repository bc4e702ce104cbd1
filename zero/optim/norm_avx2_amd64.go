//go:build !purego

package optim

// sumSquaresVector runs the lane loop of SumSquaresF32 in assembly over the
// longest multiple-of-8 prefix of x, adding into acc, and returns where the
// scalar code must continue (0 when there is nothing to vectorise).
//
// The prefix is cut into blocks of at most vecBlock elements
// (vectorPrefix), one assembly call each, with the accumulators carried
// from block to block through acc (see package vecloop).
func sumSquaresVector(acc *[8]float32, x []float32) int {
	return vectorPrefix(len(x), func(i, n int) { sumSquaresAVX2(acc, &x[i], n) })
}

// sumSquaresAVX2 adds x[d+j]*x[d+j] into acc[j], fused, for d = 0, 8, …,
// n-8 in that order; n is a positive multiple of 8.
//
//go:noescape
func sumSquaresAVX2(acc *[8]float32, x *float32, n int)
