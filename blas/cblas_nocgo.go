//go:build !cgo

package blas

// openCBLAS cannot load anything without cgo: New falls back to gonum under
// Auto and reports a *LibraryError under OpenBLAS.
func openCBLAS(libs []string, threads int) (Engine, error) {
	return nil, &LibraryError{NoCgo: true}
}

// directSgemmLoop has no C to call without cgo.
func directSgemmLoop(e Engine, reps int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	return false
}

// switchCoreOf has no library to switch without cgo.
func switchCoreOf(e Engine, want string) (string, bool, error) { return "", false, nil }

// corenameOf has no library to name without cgo.
func corenameOf(e Engine) string { return "" }
