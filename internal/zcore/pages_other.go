//go:build !linux

package zcore

type mapping struct{}

func mapF32(n int) ([]float32, mapping, error) { return make([]float32, n), mapping{}, nil }

func (mapping) release(f []float32, lo, hi, _, _ int) { clear(f[lo:hi]) }

func (mapping) unmap() {}
