package libpath

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// touch creates empty files (and their folders) under root.
func touch(t *testing.T, root string, files ...string) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// testEnv is an Env over a temporary tree with nothing from the machine.
func testEnv() Env {
	return Env{
		Stat: os.Stat, Glob: filepath.Glob, ReadFile: os.ReadFile, EvalSymlinks: filepath.EvalSymlinks,
		Arch: "amd64",
	}
}

var nvrtc = Lib{
	Files:   []string{"libnvrtc.so.*", "libnvrtc.so"},
	Wheels:  []string{"cu13/lib", "cuda_nvrtc/lib"},
	Sonames: []string{"libnvrtc.so.13", "libnvrtc.so.12"},
}

func TestCandidatesOrder(t *testing.T) {
	root := t.TempDir()
	touch(t, root,
		"flag/libnvrtc.so.12",
		"ldlp/libnvrtc.so.12.4.127", "ldlp/libnvrtc.so.13", "ldlp/libnvrtc-builtins.so.13.0",
		"sys/libnvrtc.so",
		"cuda-12.9/lib64/libnvrtc.so.12", "cuda-12.10/lib64/libnvrtc.so.12",
		"venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
		"venv/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"site/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
	)
	// A second name of the same file in another folder is listed once.
	if err := os.Symlink(filepath.Join(root, "flag/libnvrtc.so.12"), filepath.Join(root, "sys/libnvrtc.so.12")); err != nil {
		t.Fatal(err)
	}
	e := testEnv()
	e.LibDirs = []string{filepath.Join(root, "flag"), filepath.Join(root, "empty")}
	e.LDLibraryPath = filepath.Join(root, "ldlp") + ":" + filepath.Join(root, "flag")
	e.SystemDirs = []string{filepath.Join(root, "sys")}
	e.ToolkitGlobs = []string{filepath.Join(root, "cuda-*/lib64")}
	e.PythonPrefixes = []string{filepath.Join(root, "venv")}
	e.SitePackages = []string{filepath.Join(root, "site")}

	got := e.Candidates(nvrtc)
	r := func(p string) string { return filepath.Join(root, p) }
	want := []Candidate{
		{Path: r("flag/libnvrtc.so.12"), Source: "--cuda-lib-dir", Exists: true},
		{Path: r("empty/libnvrtc.so.*"), Source: "--cuda-lib-dir"},
		{Path: r("ldlp/libnvrtc.so.13"), Source: "LD_LIBRARY_PATH", Exists: true},
		{Path: r("ldlp/libnvrtc.so.12.4.127"), Source: "LD_LIBRARY_PATH", Exists: true},
		{Path: r("sys/libnvrtc.so"), Source: "system folder", Exists: true},
		{Path: r("cuda-12.10/lib64/libnvrtc.so.12"), Source: "CUDA toolkit", Exists: true},
		{Path: r("cuda-12.9/lib64/libnvrtc.so.12"), Source: "CUDA toolkit", Exists: true},
		{Path: r("venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13"), Source: "Python wheel in " + r("venv/lib/python3.12/site-packages"), Exists: true},
		{Path: r("venv/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"), Source: "Python wheel in " + r("venv/lib/python3.12/site-packages"), Exists: true},
		{Path: r("site/nvidia/cu13/lib/libnvrtc.so.*"), Source: "Python wheel in " + r("site")},
		{Path: r("site/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"), Source: "Python wheel in " + r("site"), Exists: true},
		{Path: "libnvrtc.so.13", Source: "dynamic loader search"},
		{Path: "libnvrtc.so.12", Source: "dynamic loader search"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Candidates (-want +got):\n%s", d)
	}
}

func TestCandidatesPythonOnPath(t *testing.T) {
	root := t.TempDir()
	touch(t, root, "py/bin/python3.11", "py/lib/python3.11/site-packages/nvidia/cublas/lib/libcublasLt.so.12")
	e := testEnv()
	e.LookupPythonsIn = filepath.Join(root, "py/bin")
	got := e.Candidates(Lib{Files: []string{"libcublasLt.so.*"}, Wheels: []string{"cublas/lib"}})
	want := []Candidate{{Path: filepath.Join(root, "py/lib/python3.11/site-packages/nvidia/cublas/lib/libcublasLt.so.12"),
		Source: "Python wheel in " + filepath.Join(root, "py/lib/python3.11/site-packages"), Exists: true}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Candidates (-want +got):\n%s", d)
	}
}

func TestCompareVersions(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"libnvrtc.so.13", "libnvrtc.so.12.4.127", 1},
		{"libnvrtc.so.12.4.127", "libnvrtc.so.12", 1},
		{"cuda-12.10", "cuda-12.9", 1},
		{"cuda-11.8", "cuda-12.0", -1},
		{"libx.so.1", "libx.so.1", 0},
	} {
		if got := compareVersions(c.a, c.b); got != c.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// ldCacheImage lays out a new-format ld.so.cache as glibc's ldconfig
// writes it (elf/dl-cache.h), from (flags, soname, path) triples.
func ldCacheImage(entries [][3]any) []byte {
	le := binary.LittleEndian
	head := make([]byte, ldCacheHeader+ldCacheEntrySize*len(entries))
	copy(head, "glibc-ld.so.cache")
	copy(head[17:], "1.1")
	le.PutUint32(head[20:], uint32(len(entries)))
	var strs []byte
	str := func(s string) uint32 {
		off := uint32(len(head) + len(strs))
		strs = append(strs, s...)
		strs = append(strs, 0)
		return off
	}
	for i, e := range entries {
		off := ldCacheHeader + i*ldCacheEntrySize
		le.PutUint32(head[off:], uint32(e[0].(int)))
		le.PutUint32(head[off+4:], str(e[1].(string)))
		le.PutUint32(head[off+8:], str(e[2].(string)))
	}
	le.PutUint32(head[24:], uint32(len(strs)))
	return append(head, strs...)
}

func TestReadLDCache(t *testing.T) {
	img := ldCacheImage([][3]any{
		{0x0303, "libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
		{0x0a03, "libcuda.so.1", "/usr/lib/aarch64-linux-gnu/libcuda.so.1"},
		{0x0303, "libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"},
	})
	got := ReadLDCache(img, "amd64")
	want := []LDCacheEntry{
		{"libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
		{"libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ReadLDCache (-want +got):\n%s", d)
	}
	if got := ReadLDCache(img, "riscv64"); len(got) != 3 {
		t.Errorf("unknown arch: %d entries, want all 3", len(got))
	}
	// Truncated or foreign images give what can be read, without a panic.
	for n := range len(img) {
		ReadLDCache(img[:n], "amd64")
	}
	if got := ReadLDCache([]byte("ld.so-1.7.0\x00\x00\x00\x00"), "amd64"); got != nil {
		t.Errorf("old format: %v, want nothing", got)
	}

	// The cache leads the search to the driver's folder.
	root := t.TempDir()
	touch(t, root, "drv/libcuda.so.1")
	cache := filepath.Join(root, "ld.so.cache")
	if err := os.WriteFile(cache, ldCacheImage([][3]any{{0x0303, "libcuda.so.1", filepath.Join(root, "drv/libcuda.so.1")}}), 0o644); err != nil {
		t.Fatal(err)
	}
	e := testEnv()
	e.LDCache = cache
	cands := e.Candidates(Lib{Files: []string{"libcuda.so.1"}})
	if len(cands) != 1 || cands[0].Source != "ld.so.cache" || !cands[0].Exists {
		t.Errorf("Candidates through the cache = %+v", cands)
	}
}

// TestReadLDCacheOfThisMachine reads the real cache where there is one:
// every glibc system lists libc.so.6 in it.
func TestReadLDCacheOfThisMachine(t *testing.T) {
	data, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil || string(data[:min(len(data), len(ldCacheMagic))]) != ldCacheMagic {
		t.Skip("no new-format /etc/ld.so.cache here")
	}
	for _, e := range ReadLDCache(data, runtime.GOARCH) {
		if e.Name == "libc.so.6" {
			if _, err := os.Stat(e.Path); err != nil {
				t.Errorf("libc.so.6 listed at %s: %v", e.Path, err)
			}
			return
		}
	}
	t.Error("libc.so.6 not in /etc/ld.so.cache")
}
