package fakecu

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/cuda/kernels"
)

// imageMagic starts every fake CUBIN: the fake NVRTC writes
//
//	DSZERO-FAKE-CUBIN 1
//	sm_90
//	<sha256 of the source>
//	<one kernel name per line>
//
// and the fake driver loads only that (a real CUBIN is rejected, as a
// real driver rejects garbage).
const imageMagic = "DSZERO-FAKE-CUBIN 1\n"

// NVRTC is a driver.NVRTC that "compiles" by listing the extern "C"
// kernels of the source for the requested architecture.
type NVRTC struct {
	Major, Minor int
	Archs        []int

	mu       sync.Mutex
	compiles int
}

var _ driver.NVRTC = (*NVRTC)(nil)

// NewNVRTC returns a fake NVRTC 12.8 for sm_75 … sm_120.
func NewNVRTC() *NVRTC {
	return &NVRTC{Major: 12, Minor: 8, Archs: []int{75, 80, 86, 87, 89, 90, 100, 120}}
}

func (n *NVRTC) Version() (int, int, error) { return n.Major, n.Minor, nil }

func (n *NVRTC) SupportedArchs() ([]int, error) { return append([]int(nil), n.Archs...), nil }

// Compiles reports how many compilations ran (the disk cache avoids them).
func (n *NVRTC) Compiles() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.compiles
}

func nvrtcError(fn string, code driver.Result, name string) *driver.Error {
	return &driver.Error{Lib: driver.LibNVRTC, Func: fn, Code: code, Name: name, Msg: name}
}

// Compile needs a real architecture (--gpu-architecture=sm_XY), and fails
// with a compiler-style log on a source containing "#error".
func (n *NVRTC) Compile(src, name string, opts []string) ([]byte, string, error) {
	n.mu.Lock()
	n.compiles++
	n.mu.Unlock()
	arch := 0
	for _, o := range opts {
		for _, p := range []string{"--gpu-architecture=sm_", "-arch=sm_"} {
			if v, ok := strings.CutPrefix(o, p); ok {
				fmt.Sscan(v, &arch)
			}
		}
	}
	known := false
	for _, a := range n.Archs {
		known = known || a == arch
	}
	if !known {
		return nil, fmt.Sprintf("nvrtc: error: invalid value for --gpu-architecture (-arch): %v", opts),
			nvrtcError("nvrtcCompileProgram", 5, "NVRTC_ERROR_INVALID_OPTION")
	}
	if i := strings.Index(src, "#error"); i >= 0 {
		line := strings.Count(src[:i], "\n") + 1
		return nil, fmt.Sprintf("%s(%d): error: #error directive", name, line),
			nvrtcError("nvrtcCompileProgram", 6, "NVRTC_ERROR_COMPILATION")
	}
	sum := sha256.Sum256([]byte(src))
	var b strings.Builder
	fmt.Fprintf(&b, "%ssm_%d\n%s\n", imageMagic, arch, hex.EncodeToString(sum[:]))
	for _, k := range kernels.Parse(src) {
		b.WriteString(k.Name + "\n")
	}
	return []byte(b.String()), "", nil
}

type module struct {
	dev   int
	names map[string]bool
}

type funcEntry struct {
	mod  driver.Module
	name string
}

func (d *Driver) ModuleLoadData(image []byte) (driver.Module, error) {
	const fn = "cuModuleLoadData"
	d.mu.Lock()
	defer d.mu.Unlock()
	dev, err := d.enter(fn, true)
	if err != nil {
		return 0, err
	}
	rest, ok := strings.CutPrefix(string(image), imageMagic)
	if !ok {
		return 0, errorOf(fn, driver.ErrInvalidImage)
	}
	lines := strings.Split(strings.TrimSuffix(rest, "\n"), "\n")
	if len(lines) < 2 {
		return 0, errorOf(fn, driver.ErrInvalidImage)
	}
	if want := fmt.Sprintf("sm_%d%d", d.opt.Major, d.opt.Minor); lines[0] != want {
		return 0, errorOf(fn, driver.ErrNoBinaryForGPU)
	}
	m := &module{dev: dev, names: map[string]bool{}}
	for _, name := range lines[2:] {
		m.names[name] = true
	}
	h := driver.Module(d.handle())
	d.modules[h] = m
	return h, nil
}

func (d *Driver) ModuleUnload(h driver.Module) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter("cuModuleUnload", true); err != nil {
		return err
	}
	if d.modules[h] == nil {
		return errorOf("cuModuleUnload", driver.ErrInvalidHandle)
	}
	delete(d.modules, h)
	for f, e := range d.funcs {
		if e.mod == h {
			delete(d.funcs, f)
		}
	}
	return nil
}

func (d *Driver) ModuleGetFunction(h driver.Module, name string) (driver.Function, error) {
	const fn = "cuModuleGetFunction"
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter(fn, true); err != nil {
		return 0, err
	}
	m := d.modules[h]
	if m == nil {
		return 0, errorOf(fn, driver.ErrInvalidHandle)
	}
	if !m.names[name] {
		return 0, errorOf(fn, driver.ErrNotFound)
	}
	f := driver.Function(d.handle())
	d.funcs[f] = funcEntry{mod: h, name: name}
	return f, nil
}

// LaunchKernel copies the parameter values at once (the caller may reuse
// them, as with CUDA) and queues the kernel's Go reference on the stream.
func (d *Driver) LaunchKernel(f driver.Function, grid, block driver.Dim3, sharedMem uint32, h driver.Stream, params []unsafe.Pointer) error {
	const fn = "cuLaunchKernel"
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter(fn, true); err != nil {
		return err
	}
	s, err := d.streamOf(fn, h)
	if err != nil {
		return err
	}
	e, ok := d.funcs[f]
	if !ok {
		return errorOf(fn, driver.ErrInvalidHandle)
	}
	spec := d.tab.Lookup(e.name)
	if spec == nil {
		return errorOf(fn, driver.ErrNotFound)
	}
	if block.X == 0 || block.Y == 0 || block.Z == 0 || block.Threads() > 1024 || block.Z > 64 ||
		grid.X == 0 || grid.Y == 0 || grid.Z == 0 || grid.Y > 65535 || grid.Z > 65535 || sharedMem > 48<<10 {
		return errorOf(fn, driver.ErrInvalidValue)
	}
	if len(params) != len(spec.Params) {
		return errorOf(fn, driver.ErrInvalidValue)
	}
	args := make([]uint64, len(params))
	for i, p := range spec.Params {
		if params[i] == nil {
			return errorOf(fn, driver.ErrInvalidValue)
		}
		var b [8]byte
		copy(b[:p.Type.Size()], unsafe.Slice((*byte)(params[i]), p.Type.Size()))
		args[i] = binary.LittleEndian.Uint64(b[:])
	}
	d.launches[e.name]++
	l := kernels.Launch{Grid: grid, Block: block, Args: args}
	s.push(func() *driver.Error {
		err := d.tab.Run(e.name, l, memory{d})
		switch {
		case err == nil:
			return nil
		case errors.Is(err, kernels.ErrFault):
			return fault(fn, err)
		default:
			e := errorOf(fn, driver.ErrLaunchFailed)
			e.Msg += ": " + err.Error()
			return e
		}
	})
	return nil
}
