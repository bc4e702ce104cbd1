package libfind

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tree builds files (path → "" for a file, or "->target" for a symlink)
// under a temporary root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, v := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(v, "->"); ok {
			err = os.Symlink(target, full)
		} else {
			err = os.WriteFile(full, []byte(v), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestFind: each search finds its libraries in order, sonames resolve to
// their real files and versions, a file reached twice is listed once, and
// dangling links and directories are not libraries.
func TestFind(t *testing.T) {
	sys := "/usr/lib/x86_64-linux-gnu"
	root := tree(t, map[string]string{
		sys + "/libcuda.so.535.104.05":                                       "",
		sys + "/libcuda.so.1":                                                "->libcuda.so.535.104.05",
		sys + "/libnccl.so.2":                                                "->missing", // dangling
		sys + "/libnvrtc.so.12":                                              "->libnvrtc.so.12.2.140",
		sys + "/libnvrtc.so.12.2.140":                                        "",
		"/opt/nccl/lib/libnccl.so.2.19.3":                                    "",
		"/opt/nccl/lib/libnccl.so.2":                                         "->libnccl.so.2.19.3",
		"/usr/local/cuda-12.2/lib64/libcublasLt.so.12.2.5.6":                 "",
		"/usr/local/cuda-12.2/lib64/libcublasLt.so.12":                       "->libcublasLt.so.12.2.5.6",
		"/usr/local/cuda-11.8/lib64/libcublasLt.so.11":                       "",
		"/usr/local/cuda-11.8/lib64/libnvrtc.so.11.2":                        "",
		"/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2":    "",
		"/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so": "",
		"/lib/x86_64-linux-gnu/libopenblas.so.0":                             "->../../usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so",
		"/usr/lib/x86_64-linux-gnu/libmpi.so.40.30.4":                        "",
		"/usr/lib/x86_64-linux-gnu/libmpi.so.40":                             "->libmpi.so.40.30.4",
		sys + "/libcudart.so.12/keep":                                        "", // a directory named like a library
	})
	// The loader cache knows OpenBLAS and MPI by their sonames.
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/ld.so.cache"), WriteCache([]CacheEntry{
		{Name: "libopenblas.so.0", Path: "/lib/x86_64-linux-gnu/libopenblas.so.0"},
		{Name: "libmpi.so.40", Path: "/usr/lib/x86_64-linux-gnu/libmpi.so.40"},
		{Name: "libgone.so.1", Path: "/usr/lib/libgone.so.1"}, // stale entry
	}), 0o644)
	f := Finder{Root: root, Arch: "x86_64-linux-gnu", Env: map[string]string{"LD_LIBRARY_PATH": "/opt/nccl/lib::/nowhere", "VIRTUAL_ENV": "/venv"}}
	at := func(p string) string { return filepath.Join(root, p) }
	for _, tc := range []struct {
		name string
		want []Found
	}{
		{"libcuda.so.1", []Found{{at(sys + "/libcuda.so.1"), at(sys + "/libcuda.so.535.104.05"), "535.104.05", ViaSystem}}},
		{"libnccl.so.2", []Found{
			{at("/opt/nccl/lib/libnccl.so.2"), at("/opt/nccl/lib/libnccl.so.2.19.3"), "2.19.3", ViaLDLibraryPath},
			{at("/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"), at("/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"), "2", ViaPipWheel},
		}},
		{"libnvrtc.so*", []Found{
			{at(sys + "/libnvrtc.so.12"), at(sys + "/libnvrtc.so.12.2.140"), "12.2.140", ViaSystem},
			{at("/usr/local/cuda-11.8/lib64/libnvrtc.so.11.2"), at("/usr/local/cuda-11.8/lib64/libnvrtc.so.11.2"), "11.2", ViaCUDAToolkit},
		}},
		{"libcublasLt.so*", []Found{
			{at("/usr/local/cuda-11.8/lib64/libcublasLt.so.11"), at("/usr/local/cuda-11.8/lib64/libcublasLt.so.11"), "11", ViaCUDAToolkit},
			{at("/usr/local/cuda-12.2/lib64/libcublasLt.so.12"), at("/usr/local/cuda-12.2/lib64/libcublasLt.so.12.2.5.6"), "12.2.5.6", ViaCUDAToolkit},
		}},
		{"libopenblas.so.0", []Found{{at("/lib/x86_64-linux-gnu/libopenblas.so.0"), at("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so"), "0.3.21", ViaLoaderCache}}},
		{"libmpi.so*", []Found{{at("/usr/lib/x86_64-linux-gnu/libmpi.so.40"), at("/usr/lib/x86_64-linux-gnu/libmpi.so.40.30.4"), "40.30.4", ViaLoaderCache}}},
		{"libcudart.so*", nil},
		{"libgone.so.1", nil},
	} {
		got := f.Find(tc.name)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("Find(%q) (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestParseCache: the cache WriteCache writes reads back; a header
// without the magic, a truncated table and offsets outside the file are
// errors, not panics. The real cache of this machine, if any, parses.
func TestParseCache(t *testing.T) {
	want := []CacheEntry{{"libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"}, {"libm.so.6", "/lib/x86_64-linux-gnu/libm.so.6"}}
	b := WriteCache(want)
	got, err := ParseCache(append([]byte("ld.so-1.7.0\x00\x00\x00\x00\x00\x00\x00"), b...)) // behind an old-format table
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	bad := append([]byte(nil), b...)
	bad[cacheHeaderSize+4] = 0xff // a key offset far outside
	bad[cacheHeaderSize+7] = 0x7f
	for name, in := range map[string][]byte{"no magic": []byte("not a cache"), "truncated": b[:cacheHeaderSize+10], "bad offset": bad, "header only": b[:30]} {
		if _, err := ParseCache(in); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if real, err := os.ReadFile(cachePath); err == nil {
		if es, err := ParseCache(real); err != nil || len(es) == 0 {
			t.Errorf("%s: %d entries, %v", cachePath, len(es), err)
		}
	}
}
