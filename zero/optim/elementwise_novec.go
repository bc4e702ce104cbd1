//go:build purego || !amd64

package optim

// Without the assembly kernels the scalar loops do every element.
func scaleVector(x []float32, c float32) int  { return 0 }
func divideVector(x []float32, d float32) int { return 0 }
