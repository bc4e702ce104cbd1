package seqgemm

import "fmt"

// Mul sets, for i < m and j < n,
//
//	c[i*ldc+j] = Σ_{l<k} a[i*ai+l*al] · b[l*ldb+j]
//
// summed in order of l from +0, every product and every sum rounded to
// float32 (see the package documentation). k = 0 gives zeros. It panics
// when a dimension or stride is negative or a slice is too short for the
// indices it implies (a programmer error).
func Mul(m, n, k int, a []float32, ai, al int, b []float32, ldb int, c []float32, ldc int) {
	if m <= 0 || n <= 0 {
		if m < 0 || n < 0 {
			panic(fmt.Sprintf("seqgemm: negative dimension m=%d n=%d", m, n))
		}
		return
	}
	check(m, n, k, len(a), ai, al, len(b), ldb, len(c), ldc)
	if k == 0 {
		for i := range m {
			clear(c[i*ldc : i*ldc+n])
		}
		return
	}
	vn := mulVector(m, n, k, a, ai, al, b, ldb, c, ldc) // the columns the vector kernels did
	if vn < n {
		scalar(m, n, vn, k, a, ai, al, b, ldb, c, ldc)
	}
}

// scalar is the defining loop for columns [j0, n).
func scalar(m, n, j0, k int, a []float32, ai, al int, b []float32, ldb int, c []float32, ldc int) {
	for i := range m {
		for j := j0; j < n; j++ {
			var s float32
			for l := range k {
				// The conversion keeps the compiler from fusing the
				// multiply into the add (the Go spec allows fusing
				// otherwise, and some architectures do).
				s += float32(a[i*ai+l*al] * b[l*ldb+j])
			}
			c[i*ldc+j] = s
		}
	}
}

// check panics unless every index Mul will touch is inside its slice.
func check(m, n, k, na, ai, al, nb, ldb, nc, ldc int) {
	if k < 0 || ai < 0 || al < 0 || ldb < 0 || ldc < n {
		panic(fmt.Sprintf("seqgemm: bad arguments m=%d n=%d k=%d ai=%d al=%d ldb=%d ldc=%d", m, n, k, ai, al, ldb, ldc))
	}
	if k > 0 && (m-1)*ai+(k-1)*al >= na {
		panic(fmt.Sprintf("seqgemm: a has %d elements, needs %d", na, (m-1)*ai+(k-1)*al+1))
	}
	if k > 0 && (k > 1 && ldb < n || (k-1)*ldb+n > nb) {
		panic(fmt.Sprintf("seqgemm: b has %d elements (ldb %d), needs %d", nb, ldb, (k-1)*ldb+n))
	}
	if (m-1)*ldc+n > nc {
		panic(fmt.Sprintf("seqgemm: c has %d elements (ldc %d), needs %d", nc, ldc, (m-1)*ldc+n))
	}
}
