//go:build purego || !amd64

package optim

// haveAVX2FMA is false without the assembly kernels (build tag purego, or
// not amd64): every element runs the scalar code of adam.go.
const haveAVX2FMA = false

// vector does nothing here; the scalar kernels start at lo.
func (k *adamKernel) vector(lo, hi int) int { return lo }
