package driver

import (
	"fmt"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/dszero/dszero/cuda/internal/libpath"
	"github.com/ebitengine/purego"
)

// Libs are the three loaded CUDA libraries.
type Libs struct {
	Driver Driver
	NVRTC  NVRTC
	BlasLt BlasLt

	DriverPath    string // the libcuda that loaded
	NVRTCPath     string
	BuiltinsPath  string // libnvrtc-builtins preloaded beside NVRTC, "" if none was found
	BlasLtPath    string
	DriverVersion int    // cuDriverGetVersion: 12080 is CUDA 12.8
	NVRTCVersion  [2]int // major, minor
	BlasLtVersion int    // cublasLtGetVersion: 120804 is 12.8.4
}

// Versions says which libraries loaded, for logs and reports.
func (l *Libs) Versions() string {
	return fmt.Sprintf("driver CUDA %d.%d (%s); NVRTC %d.%d (%s); cuBLASLt %d.%d.%d (%s)",
		l.DriverVersion/1000, l.DriverVersion%1000/10, l.DriverPath,
		l.NVRTCVersion[0], l.NVRTCVersion[1], l.NVRTCPath,
		l.BlasLtVersion/10000, l.BlasLtVersion/100%100, l.BlasLtVersion%100, l.BlasLtPath)
}

// libSet is what the loader looks for; tests swap the sonames so the
// machine's own libraries stay out of the way.
type libSet struct{ cuda, nvrtc, blasLt libpath.Lib }

// The libraries searched for, and where pip wheels put them.
var (
	defaultLibs = libSet{libCUDA, libNVRTC, libBlasLt}
	libCUDA     = libpath.Lib{Files: []string{"libcuda.so.1", "libcuda.so"}, Sonames: []string{"libcuda.so.1"}}
	// CUDA 13 wheels hold everything in nvidia/cu13/lib; CUDA 12 wheels
	// have one folder per library.
	libNVRTC = libpath.Lib{Files: []string{"libnvrtc.so.*", "libnvrtc.so"},
		Wheels: []string{"cu13/lib", "cuda_nvrtc/lib"}, Sonames: []string{"libnvrtc.so.13", "libnvrtc.so.12"}}
	libBlasLt = libpath.Lib{Files: []string{"libcublasLt.so.*", "libcublasLt.so"},
		Wheels: []string{"cu13/lib", "cublas/lib"}, Sonames: []string{"libcublasLt.so.13", "libcublasLt.so.12"}}
)

// Fixes printed under a NoCUDAError.
const (
	hintDriver = "Install the NVIDIA driver (CUDA 12.0 or newer), or pass --cuda-lib-dir with the folder holding libcuda.so.1; " +
		"in a container, start it with the NVIDIA container toolkit (docker run --gpus all)."
	hintNVRTC = "Install NVRTC: pip install nvidia-cuda-nvrtc-cu12 (or nvidia-cuda-nvrtc for CUDA 13), or the CUDA toolkit; " +
		"or pass --cuda-lib-dir with the folder holding libnvrtc.so. Its major version must not be newer than the driver's."
	hintBlasLt = "Install cuBLAS: pip install nvidia-cublas-cu12 (or nvidia-cublas for CUDA 13), or the CUDA toolkit; " +
		"or pass --cuda-lib-dir with the folder holding libcublasLt.so. Its major version must not be newer than the driver's."
)

// Load finds and opens libcuda, NVRTC and cuBLASLt, searching libDirs
// (--cuda-lib-dir) first and then the places package libpath lists. A
// library that cannot be found or is unusable (too old, newer than the
// driver, missing a symbol) gives a *NoCUDAError naming every path tried;
// it wraps ErrNoCUDA. Load does not call cuInit and works without a GPU
// when the libraries are installed.
func Load(libDirs ...string) (*Libs, error) {
	return load(libpath.FromOS(libDirs...), defaultLibs)
}

func load(env libpath.Env, set libSet) (*Libs, error) {
	l := &Libs{}
	b := &binding{}
	var err error
	if l.DriverPath, l.DriverVersion, err = openDriver(env, set.cuda, b); err != nil {
		return nil, err
	}
	env.DriverDir = filepath.Dir(l.DriverPath)
	if !strings.Contains(l.DriverPath, "/") {
		env.DriverDir = ""
	}
	driverMajor := l.DriverVersion / 1000
	if l.NVRTCPath, l.BuiltinsPath, l.NVRTCVersion, err = openNVRTC(env, set.nvrtc, b, driverMajor); err != nil {
		return nil, err
	}
	if l.BlasLtPath, l.BlasLtVersion, err = openBlasLt(env, set.blasLt, b, driverMajor); err != nil {
		return nil, err
	}
	l.Driver, l.NVRTC, l.BlasLt = &cuDriver{b}, &nvrtcLib{b}, &blasLt{b}
	return l, nil
}

// LoadDriver opens libcuda alone (for reports that only need the driver).
func LoadDriver(libDirs ...string) (Driver, string, error) {
	b := &binding{}
	path, _, err := openDriver(libpath.FromOS(libDirs...), libCUDA, b)
	if err != nil {
		return nil, "", err
	}
	return &cuDriver{b}, path, nil
}

// tryEach dlopens the candidates of lib in order until accept takes one.
// accept resolves symbols and checks versions; it returns "" to take the
// handle, or what is wrong with it (the handle is then closed).
func tryEach(env libpath.Env, lib libpath.Lib, name, file, hint string, accept func(h uintptr, path string) string) (string, error) {
	var tried []Attempt
	for _, c := range env.Candidates(lib) {
		if !c.Exists && strings.Contains(c.Path, "/") {
			tried = append(tried, Attempt{Path: c.Path, Source: c.Source, Err: "not found"})
			continue
		}
		h, err := purego.Dlopen(c.Path, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			tried = append(tried, Attempt{Path: c.Path, Source: c.Source, Err: err.Error()})
			continue
		}
		if why := accept(h, c.Path); why != "" {
			purego.Dlclose(h)
			tried = append(tried, Attempt{Path: c.Path, Source: c.Source, Err: why})
			continue
		}
		return c.Path, nil
	}
	return "", &NoCUDAError{Lib: name, File: file, Tried: tried, Hint: hint}
}

// dlsymAll resolves every symbol of lib in the table with dlsym.
func dlsymAll(h uintptr, b *binding, lib string) string {
	for i := range numSyms {
		s := &Symbols[i]
		if s.Lib != lib || (lib == LibCUDA && s.Query != "") {
			continue
		}
		p, err := purego.Dlsym(h, s.Name)
		if err != nil || p == 0 {
			return fmt.Sprintf("does not export %s", s.Name)
		}
		b.fns[i] = p
	}
	return ""
}

func openDriver(env libpath.Env, lib libpath.Lib, b *binding) (string, int, error) {
	var version int
	path, err := tryEach(env, lib, LibCUDA, "libcuda.so.1", hintDriver, func(h uintptr, _ string) string {
		if why := dlsymAll(h, b, LibCUDA); why != "" {
			return why + ": not a CUDA 12+ driver"
		}
		var v int32
		if r := Result(int32(b.call(cuDriverGetVersion, uintptr(unsafe.Pointer(&v))))); r != Success {
			return fmt.Sprintf("cuDriverGetVersion failed with CUresult %d", r)
		}
		if v < ABIVersion {
			return fmt.Sprintf("driver supports CUDA %d.%d; dszero needs CUDA %d.%d or newer (update the NVIDIA driver)",
				v/1000, v%1000/10, ABIVersion/1000, ABIVersion%1000/10)
		}
		for i := range numSyms {
			s := &Symbols[i]
			if s.Lib != LibCUDA || s.Query == "" {
				continue
			}
			if int(v) < s.MinVersion {
				return fmt.Sprintf("%s needs CUDA %d.%d, the driver has %d.%d", s.Query, s.MinVersion/1000, s.MinVersion%1000/10, v/1000, v%1000/10)
			}
			q := cString(s.Query)
			var fn uintptr
			var status int32
			r := Result(int32(b.call(cuGetProcAddress, uintptr(unsafe.Pointer(&q[0])), uintptr(unsafe.Pointer(&fn)),
				uintptr(ABIVersion), uintptr(getProcLegacyStream), uintptr(unsafe.Pointer(&status)))))
			if r != Success || status != 0 || fn == 0 {
				return fmt.Sprintf("cuGetProcAddress(%s, %d) failed (CUresult %d, status %d)", s.Query, ABIVersion, r, status)
			}
			b.fns[i] = fn
		}
		version = int(v)
		return ""
	})
	return path, version, err
}

func openNVRTC(env libpath.Env, lib libpath.Lib, b *binding, driverMajor int) (path, builtins string, version [2]int, err error) {
	path, err = tryEach(env, lib, LibNVRTC, "libnvrtc.so", hintNVRTC, func(h uintptr, p string) string {
		if why := dlsymAll(h, b, LibNVRTC); why != "" {
			return why + " (NVRTC 11.1 or newer is needed)"
		}
		var ma, mi int32
		if r := b.call(nvrtcVersion, uintptr(unsafe.Pointer(&ma)), uintptr(unsafe.Pointer(&mi))); int32(r) != 0 {
			return fmt.Sprintf("nvrtcVersion failed with %d", int32(r))
		}
		if int(ma) > driverMajor {
			return fmt.Sprintf("NVRTC %d.%d is newer than the driver (CUDA %d): its code needs a CUDA %d driver", ma, mi, driverMajor, ma)
		}
		version = [2]int{int(ma), int(mi)}
		builtins = preloadBuiltins(p, int(ma))
		return ""
	})
	return path, builtins, version, err
}

// preloadBuiltins opens libnvrtc-builtins from NVRTC's own folder with
// RTLD_GLOBAL, before the first compilation. NVRTC dlopens it by soname at its first compilation, and
// the CUDA 13 wheels ship NVRTC without an $ORIGIN run path, so that
// dlopen fails ("failed to open libnvrtc-builtins.so.13.0") unless the
// library is already loaded. Loading it by absolute path first makes the
// later soname lookup find it. A missing builtins library is not an
// error here: NVRTC reports it, with its name, at compile time.
func preloadBuiltins(nvrtcPath string, major int) string {
	if !strings.Contains(nvrtcPath, "/") {
		return ""
	}
	dir := filepath.Dir(nvrtcPath)
	ms, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("libnvrtc-builtins.so.%d*", major)))
	if len(ms) == 0 {
		ms, _ = filepath.Glob(filepath.Join(dir, "libnvrtc-builtins.so*"))
	}
	for _, m := range ms {
		if _, err := purego.Dlopen(m, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
			return m
		}
	}
	return ""
}

func openBlasLt(env libpath.Env, lib libpath.Lib, b *binding, driverMajor int) (string, int, error) {
	var version int
	path, err := tryEach(env, lib, LibCublasLt, "libcublasLt.so", hintBlasLt, func(h uintptr, _ string) string {
		if why := dlsymAll(h, b, LibCublasLt); why != "" {
			return why
		}
		v := int(b.call(cublasLtGetVersion))
		if v/10000 > driverMajor {
			return fmt.Sprintf("cuBLASLt %d.%d is newer than the driver (CUDA %d)", v/10000, v/100%100, driverMajor)
		}
		version = v
		return ""
	})
	return path, version, err
}
