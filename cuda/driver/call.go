package driver

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// binding holds the resolved C function pointers, indexed by sym.
type binding struct {
	fns [numSyms]uintptr
}

// call invokes symbol s with args, which must be exactly Symbols[s].Args
// values (a mismatch is a bug in a wrapper and panics). Every argument is
// passed in an integer register or stack slot: the functions bound here
// take no float or struct arguments by value (alpha and beta go by
// pointer), which is the case purego.SyscallN handles correctly.
//
// uintptrescapes keeps every pointer converted to uintptr in a call to
// call alive and on the heap until call returns, so wrappers may write
// call(s, uintptr(unsafe.Pointer(&out))) directly.
//
//go:uintptrescapes
func (b *binding) call(s sym, args ...uintptr) uintptr {
	if want := Symbols[s].Args; len(args) != want {
		panic(fmt.Sprintf("driver: %s called with %d arguments, its prototype has %d", Symbols[s].Name, len(args), want))
	}
	fn := b.fns[s]
	if fn == 0 {
		panic(fmt.Sprintf("driver: %s was not resolved", Symbols[s].Name))
	}
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// funcName is the name errors report: the base name for driver symbols.
func funcName(s sym) string {
	if q := Symbols[s].Query; q != "" {
		return q
	}
	return Symbols[s].Name
}

// goString copies the NUL-terminated C string at p.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// retString reads a const char* returned in a register.
func retString(r uintptr) string {
	return goString(*(**byte)(unsafe.Pointer(&r)))
}

// cString returns s as a NUL-terminated byte slice (Go memory: pass
// &b[0] only within the call expression, or pin it).
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}
