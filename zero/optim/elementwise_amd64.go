//go:build !purego

package optim

// elementwise runs f (scaleAVX or divideAVX) over the longest
// multiple-of-8 prefix of x in calls of at most vecBlock elements (so the
// goroutine stays preemptible between them) and returns where the scalar
// loop must continue. Without AVX2 it returns 0.
func elementwise(x []float32, c float32, f func(*float32, int, float32)) int {
	if !haveAVX2FMA || len(x) < 8 {
		return 0
	}
	end := len(x) &^ 7
	for i := 0; i < end; i += vecBlock {
		f(&x[i], min(vecBlock, end-i), c)
	}
	return end
}

func scaleVector(x []float32, c float32) int  { return elementwise(x, c, scaleAVX) }
func divideVector(x []float32, d float32) int { return elementwise(x, d, divideAVX) }

// scaleAVX is x[i] *= c for n elements, n a positive multiple of 8.
//
//go:noescape
func scaleAVX(x *float32, n int, c float32)

// divideAVX is x[i] /= d for n elements, n a positive multiple of 8.
//
//go:noescape
func divideAVX(x *float32, n int, d float32)
