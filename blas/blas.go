package blas

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Engine computes single-precision GEMMs.
type Engine interface {
	// Sgemm computes C = alpha·op(A)·op(B) + beta·C on row-major matrices,
	// where op(A) = Aᵀ when transA (A stored k×m, else m×k) and op(B) = Bᵀ
	// when transB (B stored n×k, else k×n); C is m×n. See the package
	// documentation for leading dimensions. It panics on impossible
	// arguments (a programmer error).
	Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
	// Name is a short identifier: "openblas", "cblas" or "gonum".
	Name() string
	// Description says what runs for a human: the library, its build
	// configuration, its file and its thread count, or why gonum runs.
	Description() string
}

// Backend selects the engine New builds.
type Backend int

const (
	Auto     Backend = iota // OpenBLAS when a library loads, gonum otherwise
	OpenBLAS                // a run-time-loaded CBLAS library; an error when none loads
	Gonum                   // pure Go, always available
)

var backendNames = [...]string{"auto", "openblas", "gonum"}

func (b Backend) String() string {
	if b < 0 || int(b) >= len(backendNames) {
		return fmt.Sprintf("Backend(%d)", int(b))
	}
	return backendNames[b]
}

// ParseBackend reads "auto", "openblas" or "gonum" (as in a --blas flag).
func ParseBackend(s string) (Backend, error) {
	for i, name := range backendNames {
		if strings.EqualFold(s, name) {
			return Backend(i), nil
		}
	}
	return 0, fmt.Errorf("blas: unknown backend %q (want %s)", s, strings.Join(backendNames[:], ", "))
}

// DebianPackage provides libopenblas.so.0 on Debian and Ubuntu.
const DebianPackage = "libopenblas0-pthread"

// DefaultLibraries are the names New tries, in order, when
// Options.Libraries is empty: OpenBLAS by its soname, by its development
// symlink, then whatever the system's libblas.so.3 alternative is (which
// must export cblas_sgemm).
func DefaultLibraries() []string {
	return []string{"libopenblas.so.0", "libopenblas.so", "libblas.so.3"}
}

// Options configure New.
type Options struct {
	// Backend to build; the zero value is Auto.
	Backend Backend
	// Threads, when positive, sets OpenBLAS's thread count with
	// openblas_set_num_threads. The setting is process-wide (see the
	// package documentation). Zero leaves the library's own choice
	// (OPENBLAS_NUM_THREADS, else one per core). Gonum ignores it: it
	// follows GOMAXPROCS.
	Threads int
	// Libraries are the file names or paths to dlopen, tried in order;
	// empty means DefaultLibraries().
	Libraries []string
}

func (o Options) validate() error {
	var errs []error
	if o.Backend < Auto || o.Backend > Gonum {
		errs = append(errs, fmt.Errorf("blas: unknown backend %v", o.Backend))
	}
	if o.Threads < 0 {
		errs = append(errs, fmt.Errorf("blas: threads = %d, want ≥ 0 (0 = library default)", o.Threads))
	}
	return errors.Join(errs...)
}

// Attempt records one library New tried to load and why it failed.
type Attempt struct {
	Library string
	Err     string
}

// LibraryError reports that a CBLAS library was requested (Backend
// OpenBLAS) but none could be loaded.
type LibraryError struct {
	Attempts []Attempt // one per library tried, in order
	NoCgo    bool      // the binary was built without cgo, so nothing can be loaded
}

func (e *LibraryError) Error() string {
	if e.NoCgo {
		return "blas: OpenBLAS requested, but this binary was built with CGO_ENABLED=0 and cannot load shared libraries; rebuild with cgo or use the gonum backend"
	}
	var b strings.Builder
	b.WriteString("blas: OpenBLAS requested, but no CBLAS library loaded (")
	for i, a := range e.Attempts {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(a.Err)
	}
	fmt.Fprintf(&b, "); install the Debian package %s or use the gonum backend", DebianPackage)
	return b.String()
}

// New builds the engine opts ask for. With Backend Auto it falls back to
// gonum when no library loads (the Description then says why); with
// Backend OpenBLAS that failure is a *LibraryError.
func New(opts Options) (Engine, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	libs := opts.Libraries
	if len(libs) == 0 {
		libs = DefaultLibraries()
	}
	switch opts.Backend {
	case Gonum:
		return gonumEngine{note: "requested"}, nil
	case OpenBLAS:
		return openCBLAS(libs, opts.Threads)
	}
	e, err := openCBLAS(libs, opts.Threads)
	var lerr *LibraryError
	switch {
	case err == nil:
		return e, nil
	case errors.As(err, &lerr) && lerr.NoCgo:
		return gonumEngine{note: "built without cgo, so OpenBLAS cannot be loaded"}, nil
	case errors.As(err, &lerr):
		return gonumEngine{note: fmt.Sprintf("OpenBLAS not found; install the Debian package %s for several times faster matmul", DebianPackage)}, nil
	default:
		return nil, err
	}
}

// checkSgemm panics unless the arguments describe matrices that fit their
// slices. It is the one validation both engines share; the C call relies on
// it for memory safety.
func checkSgemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("blas.Sgemm: negative size m=%d n=%d k=%d", m, n, k))
	}
	rowsA, colsA := m, k
	if transA {
		rowsA, colsA = k, m
	}
	rowsB, colsB := k, n
	if transB {
		rowsB, colsB = n, k
	}
	checkMatrix("A", rowsA, colsA, a, lda)
	checkMatrix("B", rowsB, colsB, b, ldb)
	checkMatrix("C", m, n, c, ldc)
}

// prepare validates a GEMM's arguments and does the calls that need no
// product: an empty C, or k = 0 or alpha = 0, where A and B are not read
// and C = beta·C. It reports whether the product remains to be computed.
func prepare(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	checkSgemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return false
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return false
	}
	return true
}

// checkMatrix checks a stored rows×cols matrix with leading dimension ld.
// An empty matrix needs no elements, but its ld must still be valid.
func checkMatrix(name string, rows, cols int, x []float32, ld int) {
	if ld < max(1, cols) {
		panic(fmt.Sprintf("blas.Sgemm: ld%s = %d < max(1, %d columns)", strings.ToLower(name), ld, cols))
	}
	if rows == 0 || cols == 0 {
		return
	}
	if need := (rows-1)*ld + cols; len(x) < need {
		panic(fmt.Sprintf("blas.Sgemm: len(%s) = %d < %d for a %d×%d matrix with leading dimension %d", strings.ToLower(name), len(x), need, rows, cols, ld))
	}
}

// scaleC sets C = beta·C, the whole GEMM when k = 0 (an empty sum); beta = 0
// writes zeros whatever C held.
func scaleC(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// fitsCInt reports whether every size fits the 32-bit int of an LP64 CBLAS.
func fitsCInt(vals ...int) bool {
	for _, v := range vals {
		if v > math.MaxInt32 {
			return false
		}
	}
	return true
}
