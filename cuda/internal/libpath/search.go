package libpath

import (
	"cmp"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// Lib describes one library to look for.
type Lib struct {
	// Files are file-name patterns in preference order, e.g.
	// "libnvrtc.so.*", "libnvrtc.so". A pattern with * is expanded in each
	// folder (filepath.Match syntax) and its matches sorted by version,
	// highest first.
	Files []string
	// Wheels are the folders under site-packages/nvidia that a pip wheel
	// puts the library in, e.g. "cu13/lib", "cuda_nvrtc/lib".
	Wheels []string
	// Sonames are handed to the dynamic loader by name, after every
	// folder, e.g. "libcuda.so.1": its own search (ld.so.cache, /lib,
	// /usr/lib) may know a place the folders above missed.
	Sonames []string
}

// Env is everything the search reads from the machine. FromOS fills it
// from the process; tests fill it by hand.
type Env struct {
	LibDirs         []string // --cuda-lib-dir, searched first
	LDLibraryPath   string   // $LD_LIBRARY_PATH
	LDCache         string   // path of ld.so.cache; "" skips the cache
	DriverDir       string   // folder libcuda.so.1 was loaded from, if known
	SystemDirs      []string // fixed folders, e.g. /usr/local/nvidia/lib64
	ToolkitGlobs    []string // e.g. /usr/local/cuda*/lib64
	PythonPrefixes  []string // environment prefixes: lib/python3*/site-packages is searched in each
	SitePackages    []string // site-packages or dist-packages folders searched as given
	Arch            string   // GOARCH, to filter ld.so.cache entries
	Stat            func(string) (os.FileInfo, error)
	Glob            func(string) ([]string, error)
	ReadFile        func(string) ([]byte, error)
	EvalSymlinks    func(string) (string, error)
	LookupPythonsIn string // $PATH: each python3* on it contributes its prefix
}

// FromOS describes this process's machine. libDirs are the --cuda-lib-dir
// folders.
func FromOS(libDirs ...string) Env {
	home, _ := os.UserHomeDir()
	var prefixes []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := os.Getenv(v); p != "" {
			prefixes = append(prefixes, p)
		}
	}
	pyenv := os.Getenv("PYENV_ROOT")
	if pyenv == "" && home != "" {
		pyenv = filepath.Join(home, ".pyenv")
	}
	if pyenv != "" {
		prefixes = append(prefixes, filepath.Join(pyenv, "versions", "*"))
	}
	if home != "" {
		prefixes = append(prefixes, filepath.Join(home, ".local"))
	}
	prefixes = append(prefixes, "/usr/local", "/usr", "/opt/conda")
	return Env{
		LibDirs:         libDirs,
		LDLibraryPath:   os.Getenv("LD_LIBRARY_PATH"),
		LDCache:         "/etc/ld.so.cache",
		SystemDirs:      systemDirs(runtime.GOARCH),
		ToolkitGlobs:    []string{"/usr/local/cuda/lib64", "/usr/local/cuda-*/lib64", "/usr/local/cuda-*/targets/*/lib"},
		PythonPrefixes:  prefixes,
		SitePackages:    []string{"/usr/lib/python3/dist-packages"},
		Arch:            runtime.GOARCH,
		Stat:            os.Stat,
		Glob:            filepath.Glob,
		ReadFile:        os.ReadFile,
		EvalSymlinks:    filepath.EvalSymlinks,
		LookupPythonsIn: os.Getenv("PATH"),
	}
}

// Candidate is one file the search proposes, existing or not.
type Candidate struct {
	Path   string // absolute file path, or a bare soname for the loader's own search
	Source string // where the search got it: "--cuda-lib-dir", "LD_LIBRARY_PATH", ...
	Exists bool   // the file was found (always false for a bare soname)
}

// Candidates returns, in search order, every file that may be lib: for
// each folder, the files its patterns match, or the first pattern's
// literal name (Exists false) when nothing matches, so the caller can say
// it looked there. A file reached twice (the same folder through two
// sources, or two names of one file) is listed once, at its first place.
// The last candidates are lib.Sonames as bare names, for the dynamic
// loader's own search.
func (e Env) Candidates(lib Lib) []Candidate {
	var out []Candidate
	seenDir := map[string]bool{}
	seenFile := map[string]bool{}
	addDir := func(dir, source string) {
		if dir == "" {
			return
		}
		dir = filepath.Clean(dir)
		if seenDir[dir] {
			return
		}
		seenDir[dir] = true
		found := false
		for _, pat := range lib.Files {
			for _, p := range e.match(dir, pat) {
				key := p
				if real, err := e.evalSymlinks(p); err == nil {
					key = real
				}
				if seenFile[key] {
					found = true
					continue
				}
				seenFile[key] = true
				found = true
				out = append(out, Candidate{Path: p, Source: source, Exists: true})
			}
		}
		if !found && len(lib.Files) > 0 {
			out = append(out, Candidate{Path: filepath.Join(dir, lib.Files[0]), Source: source})
		}
	}
	for _, d := range e.LibDirs {
		addDir(d, "--cuda-lib-dir")
	}
	for _, d := range filepath.SplitList(e.LDLibraryPath) {
		addDir(d, "LD_LIBRARY_PATH")
	}
	if e.LDCache != "" && e.ReadFile != nil {
		if data, err := e.ReadFile(e.LDCache); err == nil {
			for _, ent := range ReadLDCache(data, e.Arch) {
				for _, pat := range lib.Files {
					if ok, _ := filepath.Match(pat, ent.Name); ok {
						addDir(filepath.Dir(ent.Path), "ld.so.cache")
						break
					}
				}
			}
		}
	}
	addDir(e.DriverDir, "driver folder")
	for _, d := range e.SystemDirs {
		addDir(d, "system folder")
	}
	for _, d := range e.toolkitDirs() {
		addDir(d, "CUDA toolkit")
	}
	for _, sp := range e.sitePackages() {
		for _, w := range lib.Wheels {
			addDir(filepath.Join(sp, "nvidia", w), "Python wheel in "+sp)
		}
	}
	for _, name := range lib.Sonames {
		out = append(out, Candidate{Path: name, Source: "dynamic loader search"})
	}
	return out
}

// match returns the files in dir matching pat, highest version first.
func (e Env) match(dir, pat string) []string {
	if !strings.ContainsAny(pat, "*?[") {
		p := filepath.Join(dir, pat)
		if e.Stat != nil {
			if fi, err := e.Stat(p); err == nil && !fi.IsDir() {
				return []string{p}
			}
		}
		return nil
	}
	if e.Glob == nil {
		return nil
	}
	ms, _ := e.Glob(filepath.Join(dir, pat))
	slices.SortStableFunc(ms, func(a, b string) int { return compareVersions(filepath.Base(b), filepath.Base(a)) })
	return ms
}

func (e Env) evalSymlinks(p string) (string, error) {
	if e.EvalSymlinks == nil {
		return p, nil
	}
	return e.EvalSymlinks(p)
}

// toolkitDirs expands ToolkitGlobs, newest CUDA version first.
func (e Env) toolkitDirs() []string {
	var out []string
	for _, g := range e.ToolkitGlobs {
		if !strings.ContainsAny(g, "*?[") || e.Glob == nil {
			out = append(out, g)
			continue
		}
		ms, _ := e.Glob(g)
		slices.SortStableFunc(ms, func(a, b string) int { return compareVersions(b, a) })
		out = append(out, ms...)
	}
	return out
}

// sitePackages lists the site-packages folders of every Python
// environment the Env knows of, in order, without duplicates.
func (e Env) sitePackages() []string {
	prefixes := append([]string(nil), e.PythonPrefixes...)
	// The prefix of python3 at PREFIX/bin/python3 is PREFIX; a shim (pyenv)
	// resolves to itself and contributes a prefix without site-packages.
	for _, d := range filepath.SplitList(e.LookupPythonsIn) {
		if d == "" || e.Glob == nil {
			continue
		}
		exes, _ := e.Glob(filepath.Join(d, "python3*"))
		for _, x := range exes {
			if real, err := e.evalSymlinks(x); err == nil {
				x = real
			}
			prefixes = append(prefixes, filepath.Dir(filepath.Dir(x)))
		}
	}
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		p = filepath.Clean(p)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, pre := range prefixes {
		if e.Glob == nil {
			continue
		}
		for _, kind := range []string{"site-packages", "dist-packages"} {
			ms, _ := e.Glob(filepath.Join(pre, "lib", "python3*", kind))
			slices.SortStableFunc(ms, func(a, b string) int { return compareVersions(b, a) })
			for _, m := range ms {
				add(m)
			}
		}
	}
	for _, sp := range e.SitePackages {
		add(sp)
	}
	return out
}

// compareVersions orders names by their embedded numbers: "cuda-12.10" >
// "cuda-12.9", "libnvrtc.so.13" > "libnvrtc.so.12.4.127" > "libnvrtc.so.12".
func compareVersions(a, b string) int {
	na, nb := numbers(a), numbers(b)
	for i := 0; i < len(na) && i < len(nb); i++ {
		if c := cmp.Compare(na[i], nb[i]); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(len(na), len(nb)); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func numbers(s string) []int {
	var out []int
	for f := range strings.FieldsFuncSeq(s, func(r rune) bool { return r < '0' || r > '9' }) {
		n, err := strconv.Atoi(f)
		if err == nil {
			out = append(out, n)
		}
	}
	return out
}

// systemDirs are the fixed folders drivers are installed in: the NVIDIA
// container toolkit's, the distribution's multiarch folder, lib64 and WSL's.
func systemDirs(arch string) []string {
	multi := map[string]string{"amd64": "/usr/lib/x86_64-linux-gnu", "arm64": "/usr/lib/aarch64-linux-gnu"}[arch]
	dirs := []string{"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib"}
	if multi != "" {
		dirs = append(dirs, multi)
	}
	return append(dirs, "/usr/lib64", "/usr/lib/wsl/lib")
}
