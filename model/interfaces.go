package model

// Gemmer is the one matrix multiplication the models need: single
// precision, row-major,
//
//	C = alpha * op(A) * op(B) + beta * C
//
// where op(X) is X or Xᵀ (transA, transB), op(A) is m×k, op(B) is k×n and
// C is m×n; lda, ldb and ldc are the row strides of A, B and C as stored.
// gonum's blas/gonum Implementation and package blas's OpenBLAS engine
// both have exactly this method.
type Gemmer interface {
	Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
}

// UnitHooks is called by a model at unit boundaries, in both passes:
//
//	forward:  BeforeForward(0), unit 0, AfterForward(0), BeforeForward(1), ...
//	backward: BeforeBackward(last), unit last, AfterBackward(last), ..., AfterBackward(0)
//
// A ZeRO stage gathers a unit's parameters in BeforeForward/BeforeBackward
// (and the units it Borrows), releases them in AfterForward, and reduces
// the unit's gradients in AfterBackward. With activation checkpointing a
// block is recomputed between BeforeBackward and its backward, so the
// gathered parameters serve both. A non-nil error stops the pass and is
// returned, wrapped with the unit's name.
type UnitHooks interface {
	BeforeForward(unit int) error
	AfterForward(unit int) error
	BeforeBackward(unit int) error
	AfterBackward(unit int) error
}
