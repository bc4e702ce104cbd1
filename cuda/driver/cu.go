package driver

import (
	"unsafe"
)

// cuDriver is Driver over libcuda.so.1.
type cuDriver struct{ b *binding }

var _ Driver = (*cuDriver)(nil)

// check turns a CUresult into nil or an *Error named after s.
func (d *cuDriver) check(s sym, r uintptr) error {
	res := Result(int32(r)) // CUresult is a C int: the upper half of the register is undefined
	if res == Success {
		return nil
	}
	e := &Error{Lib: LibCUDA, Func: funcName(s), Code: res}
	var name, msg *byte
	if Result(int32(d.b.call(cuGetErrorName, uintptr(res), uintptr(unsafe.Pointer(&name))))) == Success {
		e.Name = goString(name)
	}
	if Result(int32(d.b.call(cuGetErrorString, uintptr(res), uintptr(unsafe.Pointer(&msg))))) == Success {
		e.Msg = goString(msg)
	}
	if e.Name == "" {
		e.Name, e.Msg = CUResultName(res)
	}
	return e
}

func (d *cuDriver) Init() error { return d.check(cuInit, d.b.call(cuInit, 0)) }

func (d *cuDriver) DriverVersion() (int, error) {
	var v int32
	err := d.check(cuDriverGetVersion, d.b.call(cuDriverGetVersion, uintptr(unsafe.Pointer(&v))))
	return int(v), err
}

func (d *cuDriver) DeviceCount() (int, error) {
	var n int32
	err := d.check(cuDeviceGetCount, d.b.call(cuDeviceGetCount, uintptr(unsafe.Pointer(&n))))
	return int(n), err
}

func (d *cuDriver) DeviceGet(ordinal int) (Device, error) {
	var dev Device
	err := d.check(cuDeviceGet, d.b.call(cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(ordinal)))
	return dev, err
}

func (d *cuDriver) DeviceName(dev Device) (string, error) {
	var buf [256]byte
	err := d.check(cuDeviceGetName, d.b.call(cuDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)-1), uintptr(dev)))
	if err != nil {
		return "", err
	}
	return goString(&buf[0]), nil
}

func (d *cuDriver) DeviceAttribute(a DeviceAttr, dev Device) (int, error) {
	var v int32
	err := d.check(cuDeviceGetAttribute, d.b.call(cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(dev)))
	return int(v), err
}

func (d *cuDriver) DeviceTotalMem(dev Device) (uint64, error) {
	var n uint64
	err := d.check(cuDeviceTotalMem, d.b.call(cuDeviceTotalMem, uintptr(unsafe.Pointer(&n)), uintptr(dev)))
	return n, err
}

func (d *cuDriver) PrimaryCtxRetain(dev Device) (Context, error) {
	var c Context
	err := d.check(cuDevicePrimaryCtxRetain, d.b.call(cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&c)), uintptr(dev)))
	return c, err
}

func (d *cuDriver) PrimaryCtxRelease(dev Device) error {
	return d.check(cuDevicePrimaryCtxRelease, d.b.call(cuDevicePrimaryCtxRelease, uintptr(dev)))
}

func (d *cuDriver) CtxSetCurrent(c Context) error {
	return d.check(cuCtxSetCurrent, d.b.call(cuCtxSetCurrent, uintptr(c)))
}

func (d *cuDriver) CtxSynchronize() error {
	return d.check(cuCtxSynchronize, d.b.call(cuCtxSynchronize))
}

func (d *cuDriver) MemGetInfo() (free, total uint64, err error) {
	err = d.check(cuMemGetInfo, d.b.call(cuMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))))
	return free, total, err
}

func (d *cuDriver) DeviceGetDefaultMemPool(dev Device) (MemPool, error) {
	var p MemPool
	err := d.check(cuDeviceGetDefaultMemPool, d.b.call(cuDeviceGetDefaultMemPool, uintptr(unsafe.Pointer(&p)), uintptr(dev)))
	return p, err
}

// MemPoolSetAttribute passes v as a cuuint64_t; the int attributes read
// its low 32 bits, which on a little-endian machine are at the same
// address.
func (d *cuDriver) MemPoolSetAttribute(p MemPool, a PoolAttr, v uint64) error {
	return d.check(cuMemPoolSetAttribute, d.b.call(cuMemPoolSetAttribute, uintptr(p), uintptr(a), uintptr(unsafe.Pointer(&v))))
}

func (d *cuDriver) MemPoolGetAttribute(p MemPool, a PoolAttr) (uint64, error) {
	var v uint64
	err := d.check(cuMemPoolGetAttribute, d.b.call(cuMemPoolGetAttribute, uintptr(p), uintptr(a), uintptr(unsafe.Pointer(&v))))
	return v, err
}

func (d *cuDriver) MemPoolTrimTo(p MemPool, keep uint64) error {
	return d.check(cuMemPoolTrimTo, d.b.call(cuMemPoolTrimTo, uintptr(p), uintptr(keep)))
}

func (d *cuDriver) MemAllocFromPoolAsync(n uint64, p MemPool, s Stream) (DevicePtr, error) {
	var dp DevicePtr
	err := d.check(cuMemAllocFromPoolAsync, d.b.call(cuMemAllocFromPoolAsync, uintptr(unsafe.Pointer(&dp)), uintptr(n), uintptr(p), uintptr(s)))
	return dp, err
}

func (d *cuDriver) MemFreeAsync(dp DevicePtr, s Stream) error {
	return d.check(cuMemFreeAsync, d.b.call(cuMemFreeAsync, uintptr(dp), uintptr(s)))
}

func (d *cuDriver) MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n uint64, s Stream) error {
	return d.check(cuMemcpyHtoDAsync, d.b.call(cuMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

func (d *cuDriver) MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, n uint64, s Stream) error {
	return d.check(cuMemcpyDtoHAsync, d.b.call(cuMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

func (d *cuDriver) MemcpyDtoDAsync(dst, src DevicePtr, n uint64, s Stream) error {
	return d.check(cuMemcpyDtoDAsync, d.b.call(cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

func (d *cuDriver) MemsetD8Async(dst DevicePtr, v uint8, n uint64, s Stream) error {
	return d.check(cuMemsetD8Async, d.b.call(cuMemsetD8Async, uintptr(dst), uintptr(v), uintptr(n), uintptr(s)))
}

func (d *cuDriver) MemsetD32Async(dst DevicePtr, v uint32, n uint64, s Stream) error {
	return d.check(cuMemsetD32Async, d.b.call(cuMemsetD32Async, uintptr(dst), uintptr(v), uintptr(n), uintptr(s)))
}

func (d *cuDriver) MemHostAlloc(n uint64, flags uint32) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := d.check(cuMemHostAlloc, d.b.call(cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n), uintptr(flags)))
	return p, err
}

func (d *cuDriver) MemFreeHost(p unsafe.Pointer) error {
	return d.check(cuMemFreeHost, d.b.call(cuMemFreeHost, uintptr(p)))
}

func (d *cuDriver) StreamCreate(flags uint32) (Stream, error) {
	var s Stream
	err := d.check(cuStreamCreate, d.b.call(cuStreamCreate, uintptr(unsafe.Pointer(&s)), uintptr(flags)))
	return s, err
}

func (d *cuDriver) StreamDestroy(s Stream) error {
	return d.check(cuStreamDestroy, d.b.call(cuStreamDestroy, uintptr(s)))
}

func (d *cuDriver) StreamSynchronize(s Stream) error {
	return d.check(cuStreamSynchronize, d.b.call(cuStreamSynchronize, uintptr(s)))
}

// StreamQuery is true when everything on s has completed; CUDA_ERROR_NOT_READY
// is the false answer, not an error.
func (d *cuDriver) StreamQuery(s Stream) (bool, error) {
	r := d.b.call(cuStreamQuery, uintptr(s))
	if Result(int32(r)) == ErrNotReady {
		return false, nil
	}
	return true, d.check(cuStreamQuery, r)
}

func (d *cuDriver) StreamWaitEvent(s Stream, e Event) error {
	return d.check(cuStreamWaitEvent, d.b.call(cuStreamWaitEvent, uintptr(s), uintptr(e), 0))
}

func (d *cuDriver) EventCreate(flags uint32) (Event, error) {
	var e Event
	err := d.check(cuEventCreate, d.b.call(cuEventCreate, uintptr(unsafe.Pointer(&e)), uintptr(flags)))
	return e, err
}

func (d *cuDriver) EventDestroy(e Event) error {
	return d.check(cuEventDestroy, d.b.call(cuEventDestroy, uintptr(e)))
}

func (d *cuDriver) EventRecord(e Event, s Stream) error {
	return d.check(cuEventRecord, d.b.call(cuEventRecord, uintptr(e), uintptr(s)))
}

func (d *cuDriver) EventSynchronize(e Event) error {
	return d.check(cuEventSynchronize, d.b.call(cuEventSynchronize, uintptr(e)))
}

func (d *cuDriver) EventQuery(e Event) (bool, error) {
	r := d.b.call(cuEventQuery, uintptr(e))
	if Result(int32(r)) == ErrNotReady {
		return false, nil
	}
	return true, d.check(cuEventQuery, r)
}

func (d *cuDriver) ModuleLoadData(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, &Error{Lib: LibCUDA, Func: "cuModuleLoadData", Code: ErrInvalidImage, Name: "CUDA_ERROR_INVALID_IMAGE", Msg: "empty image"}
	}
	var m Module
	err := d.check(cuModuleLoadData, d.b.call(cuModuleLoadData, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&image[0]))))
	return m, err
}

func (d *cuDriver) ModuleUnload(m Module) error {
	return d.check(cuModuleUnload, d.b.call(cuModuleUnload, uintptr(m)))
}

func (d *cuDriver) ModuleGetFunction(m Module, name string) (Function, error) {
	var f Function
	cname := cString(name)
	err := d.check(cuModuleGetFunction, d.b.call(cuModuleGetFunction, uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(&cname[0]))))
	return f, err
}

func (d *cuDriver) LaunchKernel(f Function, grid, block Dim3, sharedMem uint32, s Stream, params []unsafe.Pointer) error {
	var pp unsafe.Pointer
	if len(params) > 0 {
		pp = unsafe.Pointer(&params[0])
	}
	return d.check(cuLaunchKernel, d.b.call(cuLaunchKernel, uintptr(f),
		uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
		uintptr(sharedMem), uintptr(s), uintptr(pp), 0))
}
