package kernels

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
)

// Memory resolves device addresses for the reference kernels.
type Memory interface {
	// Bytes returns the n bytes at addr, or an error when they are not all
	// inside one live allocation (on a GPU: an illegal address).
	Bytes(addr uint64, n int) ([]byte, error)
}

// Launch is one kernel launch as the driver sees it.
type Launch struct {
	Grid, Block driver.Dim3
	// Args holds each parameter's bytes (Type.Size of them) as a
	// little-endian integer: a pointer's address, an int's 32 bits, a
	// float's bit pattern.
	Args []uint64
}

// ErrFault is wrapped by the error of a reference kernel that touched
// memory outside an allocation: the fake driver reports it as
// CUDA_ERROR_ILLEGAL_ADDRESS, a sticky error, as a GPU would.
var ErrFault = errors.New("kernel accessed memory outside any allocation")

// ErrBadLaunch is wrapped by the error of a launch the kernel's contract
// does not allow (a block that is not a power of two, too many threads):
// CUDA_ERROR_INVALID_VALUE.
var ErrBadLaunch = errors.New("launch configuration the kernel does not support")

type refFunc func(c *call)

// call is one launch of a reference kernel.
type call struct {
	spec        *Spec
	grid, block driver.Dim3
	args        []uint64
	mem         Memory
}

type refPanic struct{ err error }

func (c *call) fail(base error, format string, a ...any) {
	panic(refPanic{fmt.Errorf("%s: %w: %s", c.spec.Name, base, fmt.Sprintf(format, a...))})
}

// Run executes kernel name's Go reference on mem, with the launch's
// arguments and shape. It is what the fake driver runs for a launch, and
// the oracle the GPU tests compare the CUDA kernels with.
func (t *Table) Run(name string, l Launch, mem Memory) (err error) {
	s := t.byName[name]
	if s == nil {
		return fmt.Errorf("kernels: no kernel %q", name)
	}
	mk := refFamilies[s.Family]
	if mk == nil {
		return fmt.Errorf("kernels: %s has no Go reference", name)
	}
	ref := mk(s.DType)
	if len(l.Args) != len(s.Params) {
		return fmt.Errorf("%s: %w: %d arguments for %d parameters", name, ErrBadLaunch, len(l.Args), len(s.Params))
	}
	if l.Block.Threads() <= 0 || l.Block.Threads() > 1024 || l.Grid.Threads() <= 0 {
		return fmt.Errorf("%s: %w: grid %v block %v", name, ErrBadLaunch, l.Grid, l.Block)
	}
	c := &call{spec: s, grid: l.Grid, block: l.Block, args: l.Args, mem: mem}
	defer func() {
		if r := recover(); r != nil {
			p, ok := r.(refPanic)
			if !ok {
				panic(r)
			}
			err = p.err
		}
	}()
	ref(c)
	return nil
}

// Scalar arguments.
func (c *call) i32(i int) int       { return int(int32(uint32(c.args[i]))) }
func (c *call) i64(i int) int       { return int(int64(c.args[i])) }
func (c *call) f32(i int) float32   { return math.Float32frombits(uint32(c.args[i])) }
func (c *call) null(i int) bool     { return c.args[i] == 0 }
func (c *call) threads() int        { return int(c.block.X) }
func (c *call) gridThreads() int    { return int(c.grid.X) * int(c.block.X) }
func (c *call) ptrArg(i int) uint64 { return c.args[i] }

// bytes resolves n elements of size bytes at parameter i's pointer.
func (c *call) bytes(i, n, size int) unsafe.Pointer {
	if n < 0 {
		c.fail(ErrBadLaunch, "%s: negative extent %d", c.spec.Params[i].Name, n)
	}
	if n == 0 {
		return nil
	}
	b, err := c.mem.Bytes(c.args[i], n*size)
	if err != nil {
		c.fail(ErrFault, "%s (%#x, %d bytes): %v", c.spec.Params[i].Name, c.args[i], n*size, err)
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}

// vecAt resolves an address read from device memory (reduce_n's srcs).
func (c *call) vecAt(addr uint64, dt device.DType, n int, what string) vec {
	v := vec{dt: dt}
	if n == 0 {
		return v
	}
	b, err := c.mem.Bytes(addr, n*dt.Size())
	if err != nil {
		c.fail(ErrFault, "%s (%#x, %d bytes): %v", what, addr, n*dt.Size(), err)
	}
	if dt == device.F32 {
		v.f = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n)
	} else {
		v.h = unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), n)
	}
	return v
}

func (c *call) f32s(i, n int) []float32 {
	if c.null(i) {
		return nil
	}
	return unsafe.Slice((*float32)(c.bytes(i, n, 4)), n)
}

func (c *call) f64s(i, n int) []float64 {
	if c.null(i) {
		return nil
	}
	return unsafe.Slice((*float64)(c.bytes(i, n, 8)), n)
}

func (c *call) i32s(i, n int) []int32 {
	if c.null(i) {
		return nil
	}
	return unsafe.Slice((*int32)(c.bytes(i, n, 4)), n)
}

func (c *call) u32s(i, n int) []uint32 {
	if c.null(i) {
		return nil
	}
	return unsafe.Slice((*uint32)(c.bytes(i, n, 4)), n)
}

func (c *call) u64s(i, n int) []uint64 {
	if c.null(i) {
		return nil
	}
	return unsafe.Slice((*uint64)(c.bytes(i, n, 8)), n)
}

// vec is a device array of a storage type, read widened to float32.
type vec struct {
	dt device.DType
	f  []float32
	h  []uint16
}

// vec resolves parameter i as n elements of dt (a null pointer gives an
// empty vec: check c.null first where the kernel allows null).
func (c *call) vec(i int, dt device.DType, n int) vec {
	v := vec{dt: dt}
	if c.null(i) {
		return v
	}
	if dt == device.F32 {
		v.f = unsafe.Slice((*float32)(c.bytes(i, n, 4)), n)
	} else {
		v.h = unsafe.Slice((*uint16)(c.bytes(i, n, 2)), n)
	}
	return v
}

func (v vec) ld(i int) float32 {
	switch v.dt {
	case device.BF16:
		return half.F32FromBF16(v.h[i])
	case device.F16:
		return half.F32FromF16(v.h[i])
	}
	return v.f[i]
}

func (v vec) st(i int, x float32) {
	switch v.dt {
	case device.BF16:
		v.h[i] = half.BF16FromF32(x)
	case device.F16:
		v.h[i] = half.F16FromF32(x)
	default:
		v.f[i] = x
	}
}

// copyElem copies element j of src to element i of v, bit for bit.
func (v vec) copyElem(i int, src vec, j int) {
	if v.dt == device.F32 {
		v.f[i] = src.f[j]
	} else {
		v.h[i] = src.h[j]
	}
}

// rnd is a store and a load: the value a 16-bit tensor would hold.
func rnd(dt device.DType, x float32) float32 {
	switch dt {
	case device.BF16:
		return half.NearestBF16(x)
	case device.F16:
		return half.NearestF16(x)
	}
	return x
}

// gridLoop calls f for every i in [0, n), as GRID_LOOP visits them; the
// order is irrelevant for the kernels that use it (each i is independent).
func gridLoop(n int, f func(i int)) {
	for i := range n {
		f(i)
	}
}
