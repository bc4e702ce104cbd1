package nccl

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/ebitengine/purego"
)

// ErrNoNCCL is what a *NoNCCLError matches: no usable libnccl was found.
var ErrNoNCCL = errors.New("NCCL not available")

// Attempt is one candidate library the loader tried.
type Attempt struct {
	Path   string
	Source string // where the search got it: "LD_LIBRARY_PATH", "Python wheel in …"
	Err    string // why it was not taken
}

// NoNCCLError says that no libnccl could be loaded, listing every path
// tried and why each failed, and how to fix it.
type NoNCCLError struct{ Tried []Attempt }

const hintNCCL = "Install NCCL 2.18 or newer: pip install nvidia-nccl-cu12 (CUDA 12) or nvidia-nccl-cu13, or the libnccl2 package; " +
	"or pass --cuda-lib-dir with the folder holding libnccl.so.2."

func (e *NoNCCLError) Error() string {
	var b strings.Builder
	b.WriteString("nccl: no usable libnccl.so.2")
	for _, a := range e.Tried {
		fmt.Fprintf(&b, "\n  %s (%s): %s", a.Path, a.Source, a.Err)
	}
	b.WriteString("\n" + hintNCCL)
	return b.String()
}

func (e *NoNCCLError) Unwrap() error { return ErrNoNCCL }

// Loaded is a libnccl opened by Load.
type Loaded struct {
	Lib  Lib
	Path string
}

// Load finds and opens libnccl: the libDirs first (--cuda-lib-dir), then
// where the CUDA libraries are searched (LD_LIBRARY_PATH, the loader
// cache, system folders, CUDA toolkits), and the nvidia/nccl/lib folder of
// every Python environment's nvidia-nccl wheel (what torch installs). A
// library older than MinVersion, or missing a symbol, is skipped; with
// none left the error is a *NoNCCLError. Load needs no GPU.
func Load(libDirs ...string) (*Loaded, error) {
	return loadFrom(driver.FindLib([]string{"libnccl.so.2", "libnccl.so"}, []string{"nccl/lib"}, []string{"libnccl.so.2"}, libDirs...))
}

func loadFrom(cands []driver.LibCandidate) (*Loaded, error) {
	var tried []Attempt
	for _, c := range cands {
		if !c.Exists && strings.Contains(c.Path, "/") {
			tried = append(tried, Attempt{Path: c.Path, Source: c.Source, Err: "not found"})
			continue
		}
		h, err := purego.Dlopen(c.Path, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			tried = append(tried, Attempt{Path: c.Path, Source: c.Source, Err: err.Error()})
			continue
		}
		b, why := accept(h)
		if why != "" {
			purego.Dlclose(h)
			tried = append(tried, Attempt{Path: c.Path, Source: c.Source, Err: why})
			continue
		}
		return &Loaded{Lib: b, Path: c.Path}, nil
	}
	return nil, &NoNCCLError{Tried: tried}
}

// accept resolves the symbols of an opened library and checks its
// version; it returns why the library is unusable, or "".
func accept(h uintptr) (*binding, string) {
	b := &binding{}
	for i, s := range symbols {
		p, err := purego.Dlsym(h, s.Name)
		if err != nil || p == 0 {
			if s.Optional {
				continue
			}
			return nil, fmt.Sprintf("does not export %s (NCCL %s or newer is needed)", s.Name, versionText(MinVersion))
		}
		b.fns[i] = p
	}
	var v int32
	if r := Result(int32(b.call(ncclGetVersion, uintptr(unsafe.Pointer(&v))))); r != Success {
		return nil, fmt.Sprintf("ncclGetVersion failed with %v", r)
	}
	if v < MinVersion {
		return nil, fmt.Sprintf("NCCL %s is older than %s, the first with ncclCommSplit", versionText(int(v)), versionText(MinVersion))
	}
	b.version = int(v)
	b.scalable = b.fns[ncclCommInitRankScalable] != 0
	if !b.scalable && runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return nil, fmt.Sprintf("NCCL %s lacks ncclCommInitRankScalable (2.23), and the id-by-value ncclCommInitRankConfig is bound for amd64 and arm64 only", versionText(int(v)))
	}
	return b, ""
}

// versionText is "2.27.3" for the code 22703 (codes before 2.9 are
// X·1000 + Y·100 + Z).
func versionText(code int) string {
	if code < 20900 {
		return fmt.Sprintf("%d.%d.%d", code/1000, code%1000/100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/10000, code%10000/100, code%100)
}
