package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/cuda/kernels"
)

// Issuer issues work to a device. It exists only inside Device.Do, on
// the device's worker goroutine; keeping it past the call is a bug.
type Issuer struct {
	d   *Device
	drv driver.Driver

	// arena holds kernel parameter values and the pointer array
	// cuLaunchKernel reads them through. The array holds Go pointers and
	// is handed to C, so the arena is pinned for the device's lifetime;
	// one worker means one arena, reused by every launch without
	// allocating.
	arena *argArena
	pin   runtime.Pinner

	hostCache hostCache
	events    []driver.Event // spare events for FreeHost
	blasSt    *blasState
}

type argArena struct {
	vals [32]uint64
	ptrs [32]unsafe.Pointer
}

func newIssuer(d *Device) *Issuer {
	q := &Issuer{d: d, drv: d.libs.Driver, arena: &argArena{}}
	q.pin.Pin(q.arena)
	for i := range q.arena.ptrs {
		q.arena.ptrs[i] = unsafe.Pointer(&q.arena.vals[i])
	}
	return q
}

func (q *Issuer) release() { q.pin.Unpin() }

// Device is the device q issues to.
func (q *Issuer) Device() *Device { return q.d }

func (q *Issuer) dropEvents() error {
	var errs []error
	for _, e := range q.events {
		errs = append(errs, q.drv.EventDestroy(e))
	}
	q.events = nil
	return errors.Join(errs...)
}

// Arg is one kernel argument: a device pointer (P, Null), an int (I32,
// I64) or a float32 (F32).
type Arg struct {
	kind argKind
	v    uint64
}

type argKind uint8

const (
	argPtr argKind = iota + 1
	argI32
	argI64
	argF32
)

// P passes m's address.
func P(m Mem) Arg { return Arg{argPtr, uint64(m.ptr)} }

// Null passes a null pointer (for the parameters a kernel allows null).
func Null() Arg { return Arg{argPtr, 0} }

// I32 passes an int parameter; v must fit in 32 bits.
func I32(v int) Arg {
	if v < math.MinInt32 || v > math.MaxInt32 {
		panic(fmt.Sprintf("cuda: %d does not fit a 32-bit kernel parameter", v))
	}
	return Arg{argI32, uint64(uint32(int32(v)))}
}

// I64 passes a long long parameter.
func I64(v int64) Arg { return Arg{argI64, uint64(v)} }

// F32 passes a float parameter.
func F32(v float32) Arg { return Arg{argF32, uint64(math.Float32bits(v))} }

func (a Arg) matches(t kernels.Type) bool {
	switch a.kind {
	case argPtr:
		return t.Pointer()
	case argI32:
		return t == kernels.I32
	case argI64:
		return t == kernels.I64
	case argF32:
		return t == kernels.F32
	}
	return false
}

// Dim3 is a grid or block shape.
type Dim3 = driver.Dim3

// Launch runs kernel name on s with the given shape. The arguments must
// match the kernel's parameters in the launcher table, in number and kind
// (a pointer for a pointer, I32 for int, I64 for long long, F32 for
// float); a mismatch is a bug in the caller and panics.
func (q *Issuer) Launch(s *Stream, name string, grid, block Dim3, args ...Arg) error {
	k, err := q.loadKernels()
	if err != nil {
		return err
	}
	spec := k.tab.Lookup(name)
	if spec == nil {
		panic("cuda: no kernel " + name)
	}
	if len(args) != len(spec.Params) {
		panic(fmt.Sprintf("cuda: %s takes %d arguments, launched with %d", spec, len(spec.Params), len(args)))
	}
	for i, a := range args {
		if !a.matches(spec.Params[i].Type) {
			panic(fmt.Sprintf("cuda: %s: argument %d (%s) is not a %s", spec, i, spec.Params[i].Name, spec.Params[i].Type))
		}
		q.arena.vals[i] = a.v
	}
	f, err := k.function(q, name)
	if err != nil {
		return err
	}
	if err := q.drv.LaunchKernel(f, grid, block, 0, s.h, q.arena.ptrs[:len(args)]); err != nil {
		return fmt.Errorf("cuda: launching %s grid %v block %v: %w", name, grid, block, err)
	}
	return nil
}
