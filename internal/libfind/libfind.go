package libfind

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
)

// Where a library was found.
const (
	ViaLDLibraryPath = "LD_LIBRARY_PATH"
	ViaLoaderCache   = "ldconfig cache"
	ViaSystem        = "system library directory"
	ViaCUDAToolkit   = "CUDA toolkit"
	ViaPipWheel      = "pip nvidia wheel"
)

// Finder searches for libraries. The zero value searches this machine
// with an empty environment; use New for this process's.
type Finder struct {
	// Root is prefixed to every absolute path searched, "" for the real
	// file system (a test's fake tree otherwise).
	Root string
	// Env holds the variables searched: LD_LIBRARY_PATH, CUDA_HOME,
	// CUDA_PATH, VIRTUAL_ENV, CONDA_PREFIX, HOME.
	Env map[string]string
	// Arch is the Debian multiarch triplet of the system library
	// directories (x86_64-linux-gnu); "" means this machine's.
	Arch string
}

// New is a Finder of this machine and this process's environment.
func New() Finder {
	env := map[string]string{}
	for _, k := range []string{"LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "HOME"} {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	return Finder{Env: env}
}

// Found is one library file.
type Found struct {
	Path    string // where it was found, as searched (often a soname symlink)
	Real    string // the file the symlinks lead to
	Version string // from Real's name: what follows ".so."; "" if nothing does
	Via     string // which search found it (the Via constants)
}

// Find returns the library files named name or, with a trailing "*",
// starting with it ("libnvrtc.so*" finds libnvrtc.so.12 and
// libnvrtc.so.11.2), in search order: LD_LIBRARY_PATH, the loader cache,
// the system directories, CUDA toolkits, pip wheels. A file reached twice
// (a soname and its real file, or the same directory by two searches) is
// listed once, where it was first found.
func (f Finder) Find(name string) []Found {
	var out []Found
	seen := map[string]bool{}
	add := func(path, via string) {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return
		}
		st, err := os.Stat(real)
		if err != nil || !st.Mode().IsRegular() || seen[real] {
			return
		}
		seen[real] = true
		out = append(out, Found{Path: path, Real: real, Version: versionOf(filepath.Base(real)), Via: via})
	}
	for _, d := range f.dirs() {
		if d.via == ViaLoaderCache {
			for _, e := range f.cacheEntries() {
				if match(name, e.Name) {
					add(f.path(e.Path), ViaLoaderCache)
				}
			}
			continue
		}
		entries, err := os.ReadDir(d.path)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if match(name, e.Name()) {
				add(filepath.Join(d.path, e.Name()), d.via)
			}
		}
	}
	return out
}

func match(pattern, name string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, p)
	}
	return name == pattern
}

// versionOf is what follows ".so." in a library's file name or, for a
// name ending in .so, the dotted version before it
// (libopenblasp-r0.3.21.so: 0.3.21).
func versionOf(base string) string {
	if _, v, ok := strings.Cut(base, ".so."); ok {
		return v
	}
	stem, ok := strings.CutSuffix(base, ".so")
	if !ok {
		return ""
	}
	return trailingVersion.FindString(stem)
}

// trailingVersion is a dotted version at the end of a name.
var trailingVersion = regexp.MustCompile(`[0-9]+(\.[0-9]+)+$`)

type dir struct{ path, via string }

// dirs lists the searched directories in order; the loader cache is a
// marker entry where it is read.
func (f Finder) dirs() []dir {
	var ds []dir
	for _, p := range filepath.SplitList(f.Env["LD_LIBRARY_PATH"]) {
		if p != "" {
			ds = append(ds, dir{f.path(p), ViaLDLibraryPath})
		}
	}
	ds = append(ds, dir{via: ViaLoaderCache})
	arch := f.Arch
	if arch == "" {
		arch = multiarch()
	}
	for _, p := range []string{"/usr/lib/" + arch, "/lib/" + arch, "/usr/lib64", "/lib64", "/usr/lib", "/usr/local/lib"} {
		ds = append(ds, dir{f.path(p), ViaSystem})
	}
	var cuda []string
	for _, k := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if v := f.Env[k]; v != "" {
			cuda = append(cuda, v)
		}
	}
	cuda = append(cuda, f.glob("/usr/local/cuda*")...)
	for _, c := range cuda {
		for _, sub := range []string{"lib64", "lib", "targets/" + strings.TrimSuffix(arch, "-gnu") + "/lib"} {
			ds = append(ds, dir{f.path(filepath.Join(c, sub)), ViaCUDAToolkit})
		}
	}
	var sites []string
	for _, prefix := range []string{f.Env["VIRTUAL_ENV"], f.Env["CONDA_PREFIX"], f.Env["HOME"] + "/.local", "/usr/local", "/usr", "/opt/conda"} {
		if prefix == "" || prefix == "/.local" {
			continue
		}
		sites = append(sites, f.glob(filepath.Join(prefix, "lib/python3*/site-packages"))...)
		sites = append(sites, f.glob(filepath.Join(prefix, "lib/python3*/dist-packages"))...)
	}
	sites = append(sites, "/usr/lib/python3/dist-packages")
	for _, s := range sites {
		for _, lib := range f.glob(filepath.Join(s, "nvidia/*/lib")) {
			ds = append(ds, dir{f.path(lib), ViaPipWheel})
		}
	}
	return ds
}

// path is an absolute path under Root.
func (f Finder) path(p string) string {
	if f.Root == "" {
		return p
	}
	return filepath.Join(f.Root, p)
}

// glob matches an absolute pattern under Root and returns the matches as
// absolute paths without Root, sorted.
func (f Finder) glob(pattern string) []string {
	ms, _ := filepath.Glob(f.path(pattern))
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		if f.Root != "" {
			rel, err := filepath.Rel(f.Root, m)
			if err != nil {
				continue
			}
			m = "/" + rel
		}
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// multiarch is Debian's triplet for this machine's system libraries.
func multiarch() string {
	switch runtime.GOARCH {
	case "arm64":
		return "aarch64-linux-gnu"
	case "ppc64le":
		return "powerpc64le-linux-gnu"
	case "s390x":
		return "s390x-linux-gnu"
	case "riscv64":
		return "riscv64-linux-gnu"
	}
	return "x86_64-linux-gnu"
}
