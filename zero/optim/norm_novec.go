//go:build purego || !amd64

package optim

// sumSquaresVector does nothing here (build tag purego, or not amd64):
// SumSquaresF32 runs every lane step in the scalar code from element 0.
func sumSquaresVector(acc *[8]float32, x []float32) int { return 0 }
