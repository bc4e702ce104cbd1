package blas

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// engines returns every engine this machine can build: gonum always,
// OpenBLAS when it loads (one thread, so results do not depend on the
// machine's core count).
func engines(t *testing.T) []Engine {
	t.Helper()
	g, err := New(Options{Backend: Gonum})
	if err != nil {
		t.Fatal(err)
	}
	out := []Engine{g}
	o, err := New(Options{Backend: OpenBLAS, Threads: 1})
	var lerr *LibraryError
	switch {
	case errors.As(err, &lerr):
		t.Logf("OpenBLAS part skipped: %v", err)
	case err != nil:
		t.Fatal(err)
	default:
		t.Logf("testing %s", o.Description())
		out = append(out, o)
	}
	return out
}

// stored describes op(X) of size rows×cols stored with leading dimension ld.
type stored struct {
	trans bool
	ld    int
	data  []float32
}

// at returns element (i, j) of op(X).
func (s stored) at(i, j int) float32 {
	if s.trans {
		return s.data[j*s.ld+i]
	}
	return s.data[i*s.ld+j]
}

// randStored fills an op(X) of size rows×cols with padding pad beyond each
// stored row; padding holds NaN so that reading it would show.
func randStored(r *rand.Rand, trans bool, rows, cols, pad int) stored {
	sr, sc := rows, cols
	if trans {
		sr, sc = cols, rows
	}
	ld := sc + pad
	data := make([]float32, max(0, (sr-1)*ld+sc))
	for i := range data {
		if i%ld < sc {
			data[i] = float32(r.NormFloat64())
		} else {
			data[i] = float32(math.NaN())
		}
	}
	return stored{trans, max(ld, 1), data}
}

type gemmCase struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	pad            int
}

func (c gemmCase) String() string {
	return fmt.Sprintf("tA=%v,tB=%v,m=%d,n=%d,k=%d,alpha=%v,beta=%v,pad=%d", c.transA, c.transB, c.m, c.n, c.k, c.alpha, c.beta, c.pad)
}

// check runs one GEMM on e and compares every element of C with a float64
// triple loop, within the forward error bound of a float32 dot product,
// γ(k+2)·(|alpha|·Σ|a||b| + |beta|·|c|) with γ(j) = j·2^-24/(1 - j·2^-24),
// doubled for slack. Padding of C must be untouched.
func check(t *testing.T, e Engine, r *rand.Rand, tc gemmCase) {
	t.Helper()
	a := randStored(r, tc.transA, tc.m, tc.k, tc.pad)
	b := randStored(r, tc.transB, tc.k, tc.n, tc.pad+1)
	ldc := tc.n + tc.pad
	c := make([]float32, max(0, (tc.m-1)*ldc+tc.n))
	const sentinel = 12345.5
	for i := range c {
		if i%ldc < tc.n {
			c[i] = float32(r.NormFloat64())
			if tc.beta == 0 {
				c[i] = float32(math.NaN()) // beta = 0 must ignore C
			}
		} else {
			c[i] = sentinel
		}
	}
	c0 := append([]float32(nil), c...)
	e.Sgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a.data, a.ld, b.data, b.ld, tc.beta, c, max(ldc, 1))

	u := math.Exp2(-24)
	gamma := float64(tc.k+2) * u / (1 - float64(tc.k+2)*u)
	for i := range tc.m {
		for j := range tc.n {
			var sum, abs float64
			for p := range tc.k {
				x := float64(a.at(i, p)) * float64(b.at(p, j))
				sum += x
				abs += math.Abs(x)
			}
			want := float64(tc.alpha) * sum
			bound := math.Abs(float64(tc.alpha)) * abs
			if tc.beta != 0 {
				old := float64(c0[i*ldc+j])
				want += float64(tc.beta) * old
				bound += math.Abs(float64(tc.beta) * old)
			}
			bound = 2*gamma*bound + 1e-30
			got := float64(c[i*ldc+j])
			if math.IsNaN(got) || math.Abs(got-want) > bound {
				t.Fatalf("%s %v: C[%d,%d] = %v, want %v ± %.3g", e.Name(), tc, i, j, got, want, bound)
			}
		}
		for j := tc.n; j < ldc && i*ldc+j < len(c); j++ {
			if c[i*ldc+j] != sentinel {
				t.Fatalf("%s %v: padding C[%d,%d] overwritten with %v", e.Name(), tc, i, j, c[i*ldc+j])
			}
		}
	}
}

func TestSgemmAgainstTripleLoop(t *testing.T) {
	sizes := [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 13, 9}, {64, 33, 65}, {130, 97, 71}}
	for _, e := range engines(t) {
		r := rand.New(rand.NewPCG(7, 8))
		for _, tA := range []bool{false, true} {
			for _, tB := range []bool{false, true} {
				for _, s := range sizes {
					for _, ab := range [][2]float32{{1, 0}, {-0.5, 1}, {1.5, 0.75}} {
						for _, pad := range []int{0, 3} {
							check(t, e, r, gemmCase{tA, tB, s[0], s[1], s[2], ab[0], ab[1], pad})
						}
					}
				}
				// A long k, beyond the k-block of a blocked GEMM (a few
				// hundred), so partial sums meet in C across blocks; one
				// alpha/beta keeps the float64 reference cheap.
				check(t, e, r, gemmCase{tA, tB, 53, 41, 777, 1.5, 0.75, 3})
			}
		}
	}
}

// TestSgemmDegenerate covers the calls with no product: empty C, k = 0 and
// alpha = 0 (C = beta·C, A and B not read, so they may be empty or NaN).
func TestSgemmDegenerate(t *testing.T) {
	for _, e := range engines(t) {
		r := rand.New(rand.NewPCG(9, 10))
		for _, tc := range []gemmCase{
			{false, false, 0, 5, 3, 1, 0, 0},
			{true, false, 4, 0, 3, 1, 0, 2},
			{false, true, 4, 5, 0, 1, 0.5, 0},
			{true, true, 4, 5, 0, 1, 0, 1},
			{false, false, 4, 5, 3, 0, 2, 0},
			{false, false, 4, 5, 3, 0, 0, 1},
		} {
			check(t, e, r, tc)
		}
		// k = 0 with no A or B at all.
		c := []float32{1, 2, 3, 4}
		e.Sgemm(false, false, 2, 2, 0, 1, nil, 1, nil, 2, 3, c, 2)
		if want := []float32{3, 6, 9, 12}; fmt.Sprint(c) != fmt.Sprint(want) {
			t.Errorf("%s: k=0 gives %v, want %v", e.Name(), c, want)
		}
	}
}

func TestSgemmPanicsOnBadArguments(t *testing.T) {
	a, b, c := make([]float32, 6), make([]float32, 6), make([]float32, 4)
	cases := []struct {
		name string
		call func(Engine)
		msg  string
	}{
		{"negative m", func(e Engine) { e.Sgemm(false, false, -1, 2, 3, 1, a, 3, b, 2, 0, c, 2) }, "negative size"},
		{"lda below k", func(e Engine) { e.Sgemm(false, false, 2, 2, 3, 1, a, 2, b, 2, 0, c, 2) }, "lda = 2"},
		{"lda below m when transposed", func(e Engine) { e.Sgemm(true, false, 2, 2, 3, 1, a, 1, b, 2, 0, c, 2) }, "lda = 1"},
		{"ldb below n", func(e Engine) { e.Sgemm(false, false, 2, 2, 3, 1, a, 3, b, 1, 0, c, 2) }, "ldb = 1"},
		{"ldc below n", func(e Engine) { e.Sgemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, c, 1) }, "ldc = 1"},
		{"short a", func(e Engine) { e.Sgemm(false, false, 2, 2, 3, 1, a[:5], 3, b, 2, 0, c, 2) }, "len(a) = 5 < 6"},
		{"short b transposed", func(e Engine) { e.Sgemm(false, true, 2, 2, 3, 1, a, 3, b[:5], 3, 0, c, 2) }, "len(b) = 5 < 6"},
		{"short c", func(e Engine) { e.Sgemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, c[:3], 2) }, "len(c) = 3 < 4"},
	}
	for _, e := range engines(t) {
		for _, tc := range cases {
			func() {
				defer func() {
					r := recover()
					if r == nil || !strings.Contains(fmt.Sprint(r), tc.msg) {
						t.Errorf("%s %s: panic %v, want one mentioning %q", e.Name(), tc.name, r, tc.msg)
					}
				}()
				tc.call(e)
			}()
		}
	}
}

// TestSgemmConcurrent calls each engine from several goroutines at once, as
// in-process ranks do.
func TestSgemmConcurrent(t *testing.T) {
	const n = 48
	for _, e := range engines(t) {
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for g := range 4 {
			wg.Go(func() {
				a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
				for i := range n {
					a[i*n+i] = float32(g + 1) // (g+1)·I
				}
				for i := range b {
					b[i] = float32(i % 7)
				}
				for range 20 {
					e.Sgemm(false, false, n, n, n, 1, a, n, b, n, 0, c, n)
				}
				for i := range c {
					if c[i] != float32(g+1)*b[i] {
						errs <- fmt.Errorf("%s goroutine %d: c[%d] = %v, want %v", e.Name(), g, i, c[i], float32(g+1)*b[i])
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
}

// TestMissingLibrary always runs: a library that does not exist, and one
// that exists but is no BLAS, give a *LibraryError naming both attempts.
func TestMissingLibrary(t *testing.T) {
	libs := []string{"libdszero-no-such-blas.so.0", "libm.so.6"}
	_, err := New(Options{Backend: OpenBLAS, Libraries: libs})
	var lerr *LibraryError
	if !errors.As(err, &lerr) {
		t.Fatalf("New(OpenBLAS) with missing libraries: err = %v, want *LibraryError", err)
	}
	if lerr.NoCgo {
		if !strings.Contains(err.Error(), "CGO_ENABLED=0") {
			t.Errorf("error %q does not name the cause", err)
		}
	} else {
		if len(lerr.Attempts) != 2 || lerr.Attempts[0].Library != libs[0] || lerr.Attempts[1].Library != libs[1] {
			t.Errorf("attempts = %+v, want one per library", lerr.Attempts)
		}
		for _, want := range []string{"libdszero-no-such-blas.so.0", "libm.so.6: no cblas_sgemm symbol", DebianPackage} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
	}

	// Auto falls back to gonum and says why.
	e, err := New(Options{Libraries: libs})
	if err != nil {
		t.Fatal(err)
	}
	if e.Name() != "gonum" || !strings.Contains(e.Description(), "gonum (pure Go;") {
		t.Errorf("Auto without a library: %s / %q, want gonum with a reason", e.Name(), e.Description())
	}
	if !lerr.NoCgo && !strings.Contains(e.Description(), DebianPackage) {
		t.Errorf("description %q does not say how to get OpenBLAS", e.Description())
	}
}

func TestOptionsValidation(t *testing.T) {
	_, err := New(Options{Backend: Backend(7), Threads: -1})
	if err == nil || !strings.Contains(err.Error(), "unknown backend") || !strings.Contains(err.Error(), "threads = -1") {
		t.Errorf("New with two bad options: %v, want both reported", err)
	}
}

func TestParseBackend(t *testing.T) {
	for s, want := range map[string]Backend{"auto": Auto, "OpenBLAS": OpenBLAS, "gonum": Gonum} {
		got, err := ParseBackend(s)
		if err != nil || got != want {
			t.Errorf("ParseBackend(%q) = %v, %v; want %v", s, got, err, want)
		}
		if got.String() != strings.ToLower(s) {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
	if _, err := ParseBackend("mkl"); err == nil {
		t.Error("ParseBackend(mkl) succeeded")
	}
}

func TestDefaultDescribesItself(t *testing.T) {
	e, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("New(Options{}): %s — %s", e.Name(), e.Description())
	if e.Name() == "" || e.Description() == "" {
		t.Error("the default engine has no name or description")
	}
	if e.Name() == "openblas" && !strings.Contains(e.Description(), "OpenBLAS") {
		t.Errorf("OpenBLAS engine description %q does not name it", e.Description())
	}
}
