//go:build !purego

package optim

// scaleVector and divideVector run their kernel over the vector prefix of
// x (vectorPrefix) and return where the scalar loop must continue.
func scaleVector(x []float32, c float32) int {
	return vectorPrefix(len(x), func(i, n int) { scaleAVX(&x[i], n, c) })
}

func divideVector(x []float32, d float32) int {
	return vectorPrefix(len(x), func(i, n int) { divideAVX(&x[i], n, d) })
}

// scaleAVX is x[i] *= c for n elements, n a positive multiple of 8.
//
//go:noescape
func scaleAVX(x *float32, n int, c float32)

// divideAVX is x[i] /= d for n elements, n a positive multiple of 8.
//
//go:noescape
func divideAVX(x *float32, n int, d float32)
