//go:build cgo

package blas

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// CBLAS constants, fixed by the CBLAS standard (cblas.h): no header needed.
enum { dsz_RowMajor = 101, dsz_NoTrans = 111, dsz_Trans = 112 };

// cblas_sgemm with LP64 ints, as exported by libopenblas.so.0 and libblas.so.3.
typedef void (*dsz_sgemm_fn)(int order, int transA, int transB, int m, int n, int k,
	float alpha, const float *a, int lda, const float *b, int ldb,
	float beta, float *c, int ldc);
typedef void (*dsz_set_threads_fn)(int);
typedef int (*dsz_get_threads_fn)(void);
typedef char *(*dsz_get_string_fn)(void);
typedef void (*dsz_void_fn)(void);

// dsz_open dlopens name; on failure it copies dlerror's message into err,
// because dlerror's own buffer belongs to the calling thread and the next
// dl call may overwrite it.
static void *dsz_open(const char *name, char *err, size_t errlen) {
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *msg = dlerror();
		snprintf(err, errlen, "%s", msg ? msg : "dlopen failed");
	}
	return h;
}

static void *dsz_sym(void *h, const char *name) {
	return dlsym(h, name);
}

static void dsz_sgemm(void *fn, int ta, int tb, int m, int n, int k,
		float alpha, const float *a, int lda, const float *b, int ldb,
		float beta, float *c, int ldc) {
	((dsz_sgemm_fn)fn)(dsz_RowMajor, ta ? dsz_Trans : dsz_NoTrans, tb ? dsz_Trans : dsz_NoTrans,
		m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// dsz_sgemm_loop calls the same pointer reps times without leaving C: the
// baseline BenchmarkSgemm sets the Go path against.
static void dsz_sgemm_loop(void *fn, long reps, int ta, int tb, int m, int n, int k,
		float alpha, const float *a, int lda, const float *b, int ldb,
		float beta, float *c, int ldc) {
	for (long i = 0; i < reps; i++) {
		((dsz_sgemm_fn)fn)(dsz_RowMajor, ta ? dsz_Trans : dsz_NoTrans, tb ? dsz_Trans : dsz_NoTrans,
			m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
	}
}

static void dsz_set_threads(void *fn, int n) { ((dsz_set_threads_fn)fn)(n); }
static int dsz_get_threads(void *fn) { return ((dsz_get_threads_fn)fn)(); }
static const char *dsz_get_string(void *fn) { return ((dsz_get_string_fn)fn)(); }
static void dsz_call(void *fn) { ((dsz_void_fn)fn)(); }
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"
)

// retuneMu serialises re-tuning OpenBLAS's kernels (see retune): the library
// is one copy per process, so its core type is process state too.
var retuneMu sync.Mutex

// cblasEngine calls cblas_sgemm of a library loaded at run time. The
// function pointers stay valid for the life of the process (see the package
// documentation).
type cblasEngine struct {
	library    string         // the name that loaded
	handle     unsafe.Pointer // from dlopen, never closed
	config     string         // openblas_get_config(), or "" for a non-OpenBLAS CBLAS
	retuned    string         // why the kernels are not OpenBLAS's own choice, or ""
	sgemm      unsafe.Pointer // cblas_sgemm
	getThreads unsafe.Pointer // openblas_get_num_threads, or nil
}

var _ Engine = (*cblasEngine)(nil)

// openCBLAS loads the first library in libs that exports cblas_sgemm and
// sets its thread count when threads > 0.
func openCBLAS(libs []string, threads int) (Engine, error) {
	lerr := &LibraryError{}
	for _, lib := range libs {
		e, err := openOne(lib)
		if err != nil {
			lerr.Attempts = append(lerr.Attempts, Attempt{Library: lib, Err: err.Error()})
			continue
		}
		if threads > 0 {
			set := e.sym("openblas_set_num_threads")
			if set == nil {
				return nil, fmt.Errorf("blas: %s cannot set its thread count (no openblas_set_num_threads); run it with its own thread count", lib)
			}
			C.dsz_set_threads(set, C.int(threads))
		}
		return e, nil
	}
	return nil, lerr
}

func openOne(lib string) (*cblasEngine, error) {
	name := C.CString(lib)
	defer C.free(unsafe.Pointer(name))
	var errbuf [512]C.char
	h := C.dsz_open(name, &errbuf[0], C.size_t(len(errbuf)))
	if h == nil {
		return nil, fmt.Errorf("%s", C.GoString(&errbuf[0]))
	}
	e := &cblasEngine{library: lib, handle: h}
	if e.sgemm = e.sym("cblas_sgemm"); e.sgemm == nil {
		// The handle is not closed: dlclose of a library that other code
		// may share is not worth the risk for one failed probe.
		return nil, fmt.Errorf("%s: no cblas_sgemm symbol", lib)
	}
	e.config = e.readConfig()
	e.getThreads = e.sym("openblas_get_num_threads")
	if err := e.retune(); err != nil {
		return nil, fmt.Errorf("%s: %w", lib, err)
	}
	return e, nil
}

// retune switches a DYNAMIC_ARCH OpenBLAS whose detection fell back to
// pre-AVX kernels on a CPU that has AVX2 or AVX-512 (RetuneCore) to the
// kernels of its features, as OPENBLAS_CORETYPE would at load time: it sets
// that variable, drops the chosen core (gotoblas_dynamic_quit) and detects
// again (gotoblas_dynamic_init, which reads the variable), then restores
// the environment. It runs before this engine's first GEMM, under retuneMu;
// a library already re-tuned reports its new core and is left alone.
func (e *cblasEngine) retune() error {
	if e.sym("gotoblas_dynamic_init") == nil {
		return nil // not a DYNAMIC_ARCH OpenBLAS: its kernels are fixed
	}
	retuneMu.Lock()
	defer retuneMu.Unlock()
	old := e.corename()
	want := RetuneCore(old, os.Getenv(CoreTypeEnv), HostFeatures())
	if want == "" {
		return nil
	}
	got, err := e.switchCore(want)
	if err != nil {
		return err
	}
	e.retuned = fmt.Sprintf("kernels %s chosen by the CPU's features: OpenBLAS detected %s for this CPU model; set %s to override", got, old, CoreTypeEnv)
	return nil
}

// corename is OpenBLAS's name of the kernels in use, or "" for another CBLAS.
func (e *cblasEngine) corename() string {
	fn := e.sym("openblas_get_corename")
	if fn == nil {
		return ""
	}
	return strings.TrimSpace(C.GoString(C.dsz_get_string(fn)))
}

// switchCore makes a DYNAMIC_ARCH OpenBLAS use core type want (a name
// OPENBLAS_CORETYPE takes) and returns the core now in use: OpenBLAS keeps
// its own choice when the CPU lacks what want needs. The caller holds
// retuneMu, and no GEMM runs on the library meanwhile.
func (e *cblasEngine) switchCore(want string) (string, error) {
	quit, init := e.sym("gotoblas_dynamic_quit"), e.sym("gotoblas_dynamic_init")
	if quit == nil || init == nil {
		return "", fmt.Errorf("blas: %s cannot change its kernels (no gotoblas_dynamic_init): not a DYNAMIC_ARCH OpenBLAS", e.library)
	}
	prev, had := os.LookupEnv(CoreTypeEnv)
	if err := os.Setenv(CoreTypeEnv, want); err != nil {
		return "", err
	}
	C.dsz_call(quit)
	C.dsz_call(init)
	var err error
	if had {
		err = os.Setenv(CoreTypeEnv, prev)
	} else {
		err = os.Unsetenv(CoreTypeEnv)
	}
	e.config = e.readConfig() // names the new core
	return e.corename(), err
}

// readConfig is openblas_get_config() ("OpenBLAS" when it says nothing),
// or "" for a CBLAS that is not OpenBLAS.
func (e *cblasEngine) readConfig() string {
	fn := e.sym("openblas_get_config")
	if fn == nil {
		return ""
	}
	if s := C.dsz_get_string(fn); s != nil {
		if cfg := strings.TrimSpace(C.GoString(s)); cfg != "" {
			return cfg
		}
	}
	return "OpenBLAS"
}

// sym looks up a symbol in the library, or returns nil.
func (e *cblasEngine) sym(name string) unsafe.Pointer {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return C.dsz_sym(e.handle, cs)
}

func (e *cblasEngine) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !prepare(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) {
		return
	}
	if !fitsCInt(m, n, k, lda, ldb, ldc) {
		panic(fmt.Sprintf("blas.Sgemm: sizes m=%d n=%d k=%d lda=%d ldb=%d ldc=%d exceed the 32-bit int of %s", m, n, k, lda, ldb, ldc, e.library))
	}
	C.dsz_sgemm(e.sgemm, cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k),
		C.float(alpha), (*C.float)(unsafe.Pointer(&a[0])), C.int(lda),
		(*C.float)(unsafe.Pointer(&b[0])), C.int(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}

func (e *cblasEngine) Name() string {
	if e.config != "" {
		return "openblas"
	}
	return "cblas"
}

func (e *cblasEngine) Description() string {
	what := e.config
	if what == "" {
		what = "CBLAS"
	}
	s := fmt.Sprintf("%s (%s)", what, e.library)
	if e.retuned != "" {
		s += " [" + e.retuned + "]"
	}
	if e.getThreads != nil {
		n := int(C.dsz_get_threads(e.getThreads))
		unit := "threads"
		if n == 1 {
			unit = "thread"
		}
		s += fmt.Sprintf(", %d %s", n, unit)
	}
	return s
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// directSgemmLoop calls e's cblas_sgemm reps times from a C loop, with no
// validation and no Go in between: the baseline for BenchmarkSgemm. It
// reports false when e is not a CBLAS engine. The caller guarantees valid,
// non-empty arguments.
func directSgemmLoop(e Engine, reps int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	ce, ok := e.(*cblasEngine)
	if !ok {
		return false
	}
	C.dsz_sgemm_loop(ce.sgemm, C.long(reps), cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k),
		C.float(alpha), (*C.float)(unsafe.Pointer(&a[0])), C.int(lda),
		(*C.float)(unsafe.Pointer(&b[0])), C.int(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
	return true
}

// switchCoreOf is switchCore for tests: ok is false when e is not a CBLAS
// engine.
func switchCoreOf(e Engine, want string) (got string, ok bool, err error) {
	ce, ok := e.(*cblasEngine)
	if !ok {
		return "", false, nil
	}
	retuneMu.Lock()
	defer retuneMu.Unlock()
	got, err = ce.switchCore(want)
	return got, true, err
}

// corenameOf is OpenBLAS's core name of e, or "" for any other engine.
func corenameOf(e Engine) string {
	if ce, ok := e.(*cblasEngine); ok {
		return ce.corename()
	}
	return ""
}
