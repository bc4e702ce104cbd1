package cuda

import (
	"errors"
	"fmt"

	"github.com/dszero/dszero/cuda/driver"
)

// Error, NoCUDAError and ErrNoCUDA are the driver package's: a failed
// library call, a library that could not be loaded (listing every path
// tried), and what the latter wraps.
type (
	Error       = driver.Error
	NoCUDAError = driver.NoCUDAError
)

var ErrNoCUDA = driver.ErrNoCUDA

// ErrClosed is returned by a Device used after Close.
var ErrClosed = errors.New("cuda: device closed")

// OOMError is a device allocation that did not fit. It wraps the driver's
// CUDA_ERROR_OUT_OF_MEMORY and says what the pool held at the time; the
// engine maps it to *mem.OOMError.
type OOMError struct {
	Ordinal   int
	Requested int64
	Used      uint64 // bytes allocated from the pool and not freed
	Reserved  uint64 // bytes the pool holds from the device
	Free      uint64 // bytes the device had free outside the pool
	Total     uint64
	Err       error
}

func (e *OOMError) Error() string {
	return fmt.Sprintf("cuda device %d: out of memory allocating %d bytes (pool: %d used, %d reserved; device: %d free of %d): %v",
		e.Ordinal, e.Requested, e.Used, e.Reserved, e.Free, e.Total, e.Err)
}

func (e *OOMError) Unwrap() error { return e.Err }

// DeviceFailedError is returned by every call on a device after a sticky
// error (a faulting kernel: an illegal address, a device-side assert): the
// CUDA context is unusable for the rest of the process.
type DeviceFailedError struct {
	Ordinal int
	Cause   error // the first sticky error
}

func (e *DeviceFailedError) Error() string {
	return fmt.Sprintf("cuda device %d failed and cannot be used again in this process: %v", e.Ordinal, e.Cause)
}

func (e *DeviceFailedError) Unwrap() error { return e.Cause }
