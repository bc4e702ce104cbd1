package blas

import (
	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// gonumEngine is the pure-Go engine: gonum's blocked, goroutine-parallel
// Sgemm. note says why it was chosen.
type gonumEngine struct {
	note string
}

var _ Engine = gonumEngine{}

func (g gonumEngine) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !prepare(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) {
		return
	}
	gonum.Implementation{}.Sgemm(transpose(transA), transpose(transB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func (gonumEngine) Name() string { return "gonum" }

func (g gonumEngine) Description() string {
	return "gonum (pure Go; " + g.note + ")"
}

func transpose(t bool) gblas.Transpose {
	if t {
		return gblas.Trans
	}
	return gblas.NoTrans
}
