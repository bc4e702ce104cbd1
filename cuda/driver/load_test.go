package driver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dszero/dszero/cuda/internal/libpath"
	"github.com/google/go-cmp/cmp"
)

// isolatedEnv searches only dirs (as --cuda-lib-dir): no environment
// variables, no ld.so.cache, no system folders.
func isolatedEnv(dirs ...string) libpath.Env {
	return libpath.Env{LibDirs: dirs, Stat: os.Stat, Glob: filepath.Glob, EvalSymlinks: filepath.EvalSymlinks}
}

// isolatedLibs are the real library descriptions with sonames no machine
// has, so the dynamic loader's own search cannot find an installed CUDA.
func isolatedLibs() libSet {
	s := defaultLibs
	s.cuda.Sonames = []string{"libcuda-dszero-test-absent.so.1"}
	s.nvrtc.Sonames = []string{"libnvrtc-dszero-test-absent.so.12"}
	s.blasLt.Sonames = []string{"libcublasLt-dszero-test-absent.so.12"}
	return s
}

func TestLoadMissingDriver(t *testing.T) {
	dir := t.TempDir()
	env := isolatedEnv(dir)
	env.LDLibraryPath = filepath.Join(dir, "ldlp")
	_, err := load(env, isolatedLibs())
	if !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("load = %v, want an error wrapping ErrNoCUDA", err)
	}
	var nc *NoCUDAError
	if !errors.As(err, &nc) {
		t.Fatalf("load = %T, want *NoCUDAError", err)
	}
	got := make([]string, len(nc.Tried))
	for i, a := range nc.Tried {
		got[i] = a.Path + " | " + a.Source
	}
	want := []string{
		filepath.Join(dir, "libcuda.so.1") + " | --cuda-lib-dir",
		filepath.Join(dir, "ldlp", "libcuda.so.1") + " | LD_LIBRARY_PATH",
		"libcuda-dszero-test-absent.so.1 | dynamic loader search",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("paths tried (-want +got):\n%s", d)
	}
	msg := err.Error()
	for _, w := range append(want[:0:0], filepath.Join(dir, "libcuda.so.1"), filepath.Join(dir, "ldlp", "libcuda.so.1"),
		"libcuda-dszero-test-absent.so.1", "--cuda-lib-dir", "not found", "Install the NVIDIA driver") {
		if !strings.Contains(msg, w) {
			t.Errorf("error does not mention %q:\n%s", w, msg)
		}
	}
	if nc.Lib != LibCUDA || nc.File != "libcuda.so.1" {
		t.Errorf("NoCUDAError names %s/%s", nc.Lib, nc.File)
	}
}

// A file that is not a shared library is tried and reported with the
// dynamic loader's reason, and the search goes on.
func TestLoadReportsUnloadableFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(bad, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := load(isolatedEnv(dir), isolatedLibs())
	var nc *NoCUDAError
	if !errors.As(err, &nc) || len(nc.Tried) != 2 {
		t.Fatalf("load = %v, want a NoCUDAError with 2 attempts", err)
	}
	if a := nc.Tried[0]; a.Path != bad || a.Err == "" || a.Err == "not found" {
		t.Errorf("first attempt = %+v, want %s with the dlopen error", a, bad)
	}
}

func TestErrorClassification(t *testing.T) {
	for _, c := range []struct {
		e           Error
		oom, sticky bool
	}{
		{Error{Lib: LibCUDA, Code: ErrOutOfMemory}, true, false},
		{Error{Lib: LibCUDA, Code: ErrIllegalAddress}, false, true},
		{Error{Lib: LibCUDA, Code: ErrLaunchFailed}, false, true},
		{Error{Lib: LibCUDA, Code: ErrAssert}, false, true},
		{Error{Lib: LibCUDA, Code: ErrInvalidValue}, false, false},
		{Error{Lib: LibCublasLt, Code: 3}, true, false},
		{Error{Lib: LibCublasLt, Code: 700}, false, false},
	} {
		err := error(&c.e)
		wrapped := errors.Join(errors.New("context"), err)
		if IsOutOfMemory(wrapped) != c.oom || IsSticky(wrapped) != c.sticky {
			t.Errorf("%+v: OutOfMemory %v Sticky %v, want %v %v", c.e, IsOutOfMemory(wrapped), IsSticky(wrapped), c.oom, c.sticky)
		}
	}
	e := &Error{Lib: LibCUDA, Func: "cuMemAllocFromPoolAsync", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Msg: "out of memory"}
	if got, want := e.Error(), "cuda: cuMemAllocFromPoolAsync failed: out of memory (CUDA_ERROR_OUT_OF_MEMORY = 2)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
