//go:build purego || !amd64

package seqgemm

// mulVector does nothing without the assembly kernels: every column runs
// the scalar loop.
func mulVector(m, n, k int, a []float32, ai, al int, b []float32, ldb int, c []float32, ldc int) int {
	return 0
}
