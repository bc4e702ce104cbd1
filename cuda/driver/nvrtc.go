package driver

import (
	"fmt"
	"runtime"
	"unsafe"
)

// nvrtcLib is NVRTC over libnvrtc.so.
type nvrtcLib struct{ b *binding }

var _ NVRTC = (*nvrtcLib)(nil)

func (n *nvrtcLib) check(s sym, r uintptr) error {
	res := Result(int32(r))
	if res == 0 {
		return nil
	}
	msg := retString(n.b.call(nvrtcGetErrorString, uintptr(res)))
	return &Error{Lib: LibNVRTC, Func: funcName(s), Code: res, Name: msg, Msg: msg}
}

func (n *nvrtcLib) Version() (major, minor int, err error) {
	var ma, mi int32
	err = n.check(nvrtcVersion, n.b.call(nvrtcVersion, uintptr(unsafe.Pointer(&ma)), uintptr(unsafe.Pointer(&mi))))
	return int(ma), int(mi), err
}

func (n *nvrtcLib) SupportedArchs() ([]int, error) {
	var k int32
	if err := n.check(nvrtcGetNumSupportedArchs, n.b.call(nvrtcGetNumSupportedArchs, uintptr(unsafe.Pointer(&k)))); err != nil {
		return nil, err
	}
	if k <= 0 || k > 1024 {
		return nil, fmt.Errorf("nvrtc: nvrtcGetNumSupportedArchs returned %d", k)
	}
	archs := make([]int32, k)
	if err := n.check(nvrtcGetSupportedArchs, n.b.call(nvrtcGetSupportedArchs, uintptr(unsafe.Pointer(&archs[0])))); err != nil {
		return nil, err
	}
	out := make([]int, k)
	for i, a := range archs {
		out[i] = int(a)
	}
	return out, nil
}

// Compile runs create, compile, log, CUBIN and destroy. The source, name
// and option strings are NUL-terminated Go copies; the option pointer
// array holds Go pointers, so it is pinned for the call.
func (n *nvrtcLib) Compile(src, name string, opts []string) ([]byte, string, error) {
	csrc, cname := cString(src), cString(name)
	var prog uintptr
	if err := n.check(nvrtcCreateProgram, n.b.call(nvrtcCreateProgram, uintptr(unsafe.Pointer(&prog)),
		uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0)); err != nil {
		return nil, "", err
	}
	defer n.b.call(nvrtcDestroyProgram, uintptr(unsafe.Pointer(&prog)))

	var pin runtime.Pinner
	defer pin.Unpin()
	copts := make([]*byte, len(opts)+1) // never empty, so &copts[0] is valid
	for i, o := range opts {
		c := cString(o)
		pin.Pin(&c[0])
		copts[i] = &c[0]
	}
	pin.Pin(&copts[0])
	cerr := n.check(nvrtcCompileProgram, n.b.call(nvrtcCompileProgram, prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&copts[0]))))

	var logSize uint64
	log := ""
	if n.check(nvrtcGetProgramLogSize, n.b.call(nvrtcGetProgramLogSize, prog, uintptr(unsafe.Pointer(&logSize)))) == nil && logSize > 1 {
		buf := make([]byte, logSize)
		if n.check(nvrtcGetProgramLog, n.b.call(nvrtcGetProgramLog, prog, uintptr(unsafe.Pointer(&buf[0])))) == nil {
			log = goString(&buf[0])
		}
	}
	if cerr != nil {
		return nil, log, cerr
	}
	var size uint64
	if err := n.check(nvrtcGetCUBINSize, n.b.call(nvrtcGetCUBINSize, prog, uintptr(unsafe.Pointer(&size)))); err != nil {
		return nil, log, err
	}
	if size == 0 {
		return nil, log, fmt.Errorf("nvrtc: %s produced no CUBIN (was -arch a real sm_XY?)", name)
	}
	cubin := make([]byte, size)
	if err := n.check(nvrtcGetCUBIN, n.b.call(nvrtcGetCUBIN, prog, uintptr(unsafe.Pointer(&cubin[0])))); err != nil {
		return nil, log, err
	}
	return cubin, log, nil
}
