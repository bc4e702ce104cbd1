//go:build purego || !amd64

package seqgemm

// haveAVX is false without the assembly kernels: every column runs the
// scalar loop.
const haveAVX = false

func mul4x16(a *float32, ai, al int, b *float32, ldb, k int, c *float32, ldc int) {
	panic("seqgemm: no vector kernel in this build")
}

func mul1x8(a *float32, al int, b *float32, ldb, k int, c *float32) {
	panic("seqgemm: no vector kernel in this build")
}
