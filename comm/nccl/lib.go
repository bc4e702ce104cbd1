package nccl

import (
	"errors"
	"fmt"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/device"
)

// Lib is the part of NCCL the backend uses, with Go types: the purego
// binding (Load) and the fake of package fakenccl implement it, and the
// backend is written against it alone.
//
// Every call except the error strings returns an *Error for a result
// other than ncclSuccess — including ncclInProgress, which a non-blocking
// communicator returns from calls that continue in the background (see
// Pending). Calls that take a stream queue work on it and return before it
// runs. NCCL keeps the group state (GroupStart … GroupEnd) per OS thread,
// and the communicator calls use the CUDA context current on the thread:
// the backend makes every call inside Device.Run.
type Lib interface {
	// Version is ncclGetVersion's code: 22703 for 2.27.3.
	Version() int
	GetUniqueID() (UniqueID, error)
	// CommInitRank creates rank's handle on the communicator of nranks
	// named by id (ncclCommInitRankConfig). With a non-blocking cfg it
	// returns the handle at once, with an *Error of code InProgress until
	// CommGetAsyncError says the communicator is ready.
	CommInitRank(nranks int, id UniqueID, rank int, cfg Config) (RawComm, error)
	// CommSplit is ncclCommSplit: a collective over c; ranks passing
	// NoColor get a zero RawComm.
	CommSplit(c RawComm, color, key int, cfg Config) (RawComm, error)
	CommDestroy(c RawComm) error
	// CommAbort stops c's work in flight and frees it; c is invalid after.
	CommAbort(c RawComm) error
	// CommGetAsyncError is c's state: Success, InProgress (a non-blocking
	// call still running) or the error that broke it.
	CommGetAsyncError(c RawComm) (Result, error)

	AllReduce(send, recv driver.DevicePtr, count uint64, dt DataType, op RedOp, c RawComm, s driver.Stream) error
	// ReduceScatter: count is the elements of recv; send has nranks·count.
	ReduceScatter(send, recv driver.DevicePtr, count uint64, dt DataType, op RedOp, c RawComm, s driver.Stream) error
	// AllGather: count is the elements of send; recv has nranks·count.
	AllGather(send, recv driver.DevicePtr, count uint64, dt DataType, c RawComm, s driver.Stream) error
	Broadcast(send, recv driver.DevicePtr, count uint64, dt DataType, root int, c RawComm, s driver.Stream) error
	GroupStart() error
	GroupEnd() error

	// RedOpCreatePreMulSum makes the reduction sum(scalar·x) for c, with
	// scalar the little-endian bytes of one value of dt (2 bytes for fp16
	// and bf16, 4 for fp32), read before the call returns
	// (ncclScalarHostImmediate).
	RedOpCreatePreMulSum(scalar []byte, dt DataType, c RawComm) (RedOp, error)
	RedOpDestroy(op RedOp, c RawComm) error

	// ErrorString is ncclGetErrorString; LastError is ncclGetLastError,
	// the library's message about the last failure (on c, or any).
	ErrorString(r Result) string
	LastError(c RawComm) string
}

// MinVersion is the oldest NCCL the binding accepts: 2.18, the first with
// ncclCommSplit (and with non-blocking communicators, ncclConfig_t's
// blocking field, since 2.14).
const MinVersion = 21800

// RawComm is an ncclComm_t, opaque to Go.
type RawComm uintptr

// UniqueID is an ncclUniqueId: 128 bytes that name one communicator,
// made by one rank (GetUniqueID) and handed to the others (package
// rendezvous).
type UniqueID [128]byte

// NoColor passed to CommSplit is NCCL_SPLIT_NOCOLOR.
const NoColor = -1

// Config is the part of ncclConfig_t the backend sets.
type Config struct {
	// Blocking false makes the communicator non-blocking: calls return
	// InProgress instead of waiting, and CommAbort can stop a collective
	// that never completes — which the backend's timeouts need.
	Blocking bool
}

// Result is an ncclResult_t.
type Result int32

const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
	Timeout            Result = 8
)

var resultNames = [...]string{"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
	"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress", "ncclTimeout"}

func (r Result) String() string {
	if r < 0 || int(r) >= len(resultNames) {
		return fmt.Sprintf("ncclResult(%d)", int32(r))
	}
	return resultNames[r]
}

// DataType is an ncclDataType_t.
type DataType int32

const (
	Float16  DataType = 6
	Float32  DataType = 7
	BFloat16 DataType = 9
)

// DataTypeOf is the NCCL type of a dszero dtype.
func DataTypeOf(dt device.DType) DataType {
	switch dt {
	case device.F32:
		return Float32
	case device.F16:
		return Float16
	case device.BF16:
		return BFloat16
	}
	panic(fmt.Sprintf("nccl: no NCCL type for %v", dt))
}

// Size is the bytes of one element (of the three types used here).
func (t DataType) Size() int {
	if t == Float32 {
		return 4
	}
	return 2
}

func (t DataType) String() string {
	switch t {
	case Float16:
		return "ncclFloat16"
	case Float32:
		return "ncclFloat32"
	case BFloat16:
		return "ncclBfloat16"
	}
	return fmt.Sprintf("ncclDataType(%d)", int32(t))
}

// RedOp is an ncclRedOp_t: a built-in one, or one made by
// RedOpCreatePreMulSum (ncclNumOps and up).
type RedOp int32

const (
	Sum RedOp = 0
	Avg RedOp = 4
)

// Error is a failed NCCL call.
type Error struct {
	Func string // "ncclAllReduce"
	Code Result
	Msg  string // ncclGetErrorString
	Last string // ncclGetLastError, "" when it said nothing more
}

func (e *Error) Error() string {
	s := fmt.Sprintf("nccl: %s: %v (%s)", e.Func, e.Code, e.Msg)
	if e.Last != "" {
		s += ": " + e.Last
	}
	return s
}

// Pending reports whether err is a non-blocking call still in progress
// (ncclInProgress), not a failure.
func Pending(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == InProgress
}
