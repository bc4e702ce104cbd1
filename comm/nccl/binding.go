package nccl

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"structs"
	"sync"
	"unsafe"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/ebitengine/purego"
)

// binding is Lib over a loaded libnccl: every wrapper converts its
// arguments to machine words and calls purego.SyscallN, which passes them
// in the System V (or AAPCS64) integer registers and then the stack. No
// function bound takes a float by value (the PreMulSum scalar goes by
// pointer), which is the case SyscallN handles; the one struct by value,
// ncclCommInitRankConfig's 128-byte id, is laid out by hand
// (initRankConfig) or avoided (ncclCommInitRankScalable).
type binding struct {
	fns     [numSyms]uintptr
	version int
	// scalable: initialise with ncclCommInitRankScalable (the id by
	// pointer) rather than ncclCommInitRankConfig.
	scalable bool

	mu sync.Mutex
	// keep holds the id and config memory of each communicator until it is
	// destroyed: a non-blocking initialisation may read them after the
	// call returns.
	keep map[RawComm]any
}

var _ Lib = (*binding)(nil)

// call invokes s with exactly symbols[s].Args words (a mismatch is a bug
// in a wrapper and panics) and returns the C result.
//
// uintptrescapes keeps every pointer converted to uintptr in a call's
// arguments alive and unmoved until call returns.
//
//go:uintptrescapes
func (b *binding) call(s sym, args ...uintptr) uintptr {
	if want := symbols[s].Args; len(args) != want {
		panic(fmt.Sprintf("nccl: %s called with %d words, its prototype has %d", symbols[s].Name, len(args), want))
	}
	fn := b.fns[s]
	if fn == 0 {
		panic(fmt.Sprintf("nccl: %s was not resolved", symbols[s].Name))
	}
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// check turns a result into nil or an *Error, with NCCL's description
// and its last error message about c.
func (b *binding) check(s sym, r uintptr, c RawComm) error {
	code := Result(int32(r))
	if code == Success {
		return nil
	}
	e := &Error{Func: symbols[s].Name, Code: code, Msg: b.ErrorString(code)}
	if code != InProgress {
		e.Last = b.LastError(c)
	}
	return e
}

func (b *binding) Version() int { return b.version }

func (b *binding) GetUniqueID() (UniqueID, error) {
	var id UniqueID
	return id, b.check(ncclGetUniqueId, b.call(ncclGetUniqueId, uintptr(unsafe.Pointer(&id))), 0)
}

// configC is ncclConfig_t as NCCL 2.18 lays it out (ncclConfig_v21700
// with splitShare). NCCL reads a config by its size and version fields,
// so later releases take this one and default the fields it lacks.
type configC struct {
	_              structs.HostLayout
	size           uint64 // size_t
	magic          uint32
	version        uint32
	blocking       int32
	cgaClusterSize int32
	minCTAs        int32
	maxCTAs        int32
	netName        uintptr // const char*
	splitShare     int32
	_              int32
}

const (
	configMagic    = 0xcafebeef // NCCL_API_MAGIC
	configVersion  = 21800      // NCCL_VERSION(2, 18, 0)
	configUndefInt = -1 << 31   // NCCL_CONFIG_UNDEF_INT (INT_MIN)
)

func newConfig(cfg Config) *configC {
	c := &configC{size: uint64(unsafe.Sizeof(configC{})), magic: configMagic, version: configVersion,
		blocking: 0, cgaClusterSize: configUndefInt, minCTAs: configUndefInt, maxCTAs: configUndefInt, splitShare: configUndefInt}
	if cfg.Blocking {
		c.blocking = 1
	}
	return c
}

// initState is what a communicator's initialisation must keep alive.
type initState struct {
	id  *UniqueID
	cfg *configC
}

func (b *binding) CommInitRank(nranks int, id UniqueID, rank int, cfg Config) (RawComm, error) {
	st := initState{id: new(UniqueID), cfg: newConfig(cfg)}
	*st.id = id
	var c RawComm
	var r uintptr
	s := ncclCommInitRankConfig
	if b.scalable {
		s = ncclCommInitRankScalable
		r = b.call(s, uintptr(unsafe.Pointer(&c)), uintptr(nranks), uintptr(rank), 1,
			uintptr(unsafe.Pointer(st.id)), uintptr(unsafe.Pointer(st.cfg)))
	} else {
		r = b.initRankConfig(&c, nranks, st.id, rank, st.cfg)
	}
	if c != 0 {
		b.hold(c, st)
	}
	return c, b.check(s, r, c)
}

// initRankConfig calls ncclCommInitRankConfig(comm, nranks, commId, rank,
// config), commId a 128-byte struct by value:
//
//   - System V amd64: a struct over 16 bytes is of class MEMORY and is
//     copied into the argument area on the stack, while the integer
//     parameters after it still take the next registers. So comm, nranks,
//     rank, config go in rdi, rsi, rdx, rcx; r8 and r9 stay unused
//     (two zero words); the id's 16 words are the first stack words.
//   - AAPCS64 (arm64): a composite over 16 bytes is copied by the caller
//     and passed as a pointer to the copy, in the next register: comm,
//     nranks, &id, rank, config in x0–x4.
//
// Elsewhere Load requires ncclCommInitRankScalable.
//
//go:uintptrescapes
func (b *binding) initRankConfig(c *RawComm, nranks int, id *UniqueID, rank int, cfg *configC) uintptr {
	switch runtime.GOARCH {
	case "amd64":
		args := make([]uintptr, 0, 22)
		args = append(args, uintptr(unsafe.Pointer(c)), uintptr(nranks), uintptr(rank), uintptr(unsafe.Pointer(cfg)), 0, 0)
		for i := 0; i < len(id); i += 8 {
			args = append(args, uintptr(binary.LittleEndian.Uint64(id[i:])))
		}
		r, _, _ := purego.SyscallN(b.fns[ncclCommInitRankConfig], args...)
		return r
	case "arm64":
		cp := new(UniqueID)
		*cp = *id
		r, _, _ := purego.SyscallN(b.fns[ncclCommInitRankConfig], uintptr(unsafe.Pointer(c)), uintptr(nranks),
			uintptr(unsafe.Pointer(cp)), uintptr(rank), uintptr(unsafe.Pointer(cfg)))
		runtime.KeepAlive(cp)
		return r
	}
	panic("nccl: ncclCommInitRankConfig has no calling convention for " + runtime.GOARCH)
}

func (b *binding) hold(c RawComm, st initState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.keep == nil {
		b.keep = map[RawComm]any{}
	}
	b.keep[c] = st
}

func (b *binding) release(c RawComm) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.keep, c)
}

func (b *binding) CommSplit(c RawComm, color, key int, cfg Config) (RawComm, error) {
	st := initState{cfg: newConfig(cfg)}
	var nc RawComm
	r := b.call(ncclCommSplit, uintptr(c), uintptr(color), uintptr(key), uintptr(unsafe.Pointer(&nc)), uintptr(unsafe.Pointer(st.cfg)))
	if nc != 0 {
		b.hold(nc, st)
	}
	return nc, b.check(ncclCommSplit, r, c)
}

func (b *binding) CommDestroy(c RawComm) error {
	err := b.check(ncclCommDestroy, b.call(ncclCommDestroy, uintptr(c)), 0)
	b.release(c)
	return err
}

func (b *binding) CommAbort(c RawComm) error {
	err := b.check(ncclCommAbort, b.call(ncclCommAbort, uintptr(c)), 0)
	b.release(c)
	return err
}

func (b *binding) CommGetAsyncError(c RawComm) (Result, error) {
	var r int32
	err := b.check(ncclCommGetAsyncError, b.call(ncclCommGetAsyncError, uintptr(c), uintptr(unsafe.Pointer(&r))), c)
	return Result(r), err
}

func (b *binding) AllReduce(send, recv driver.DevicePtr, count uint64, dt DataType, op RedOp, c RawComm, s driver.Stream) error {
	r := b.call(ncclAllReduce, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(op), uintptr(c), uintptr(s))
	return b.check(ncclAllReduce, r, c)
}

func (b *binding) ReduceScatter(send, recv driver.DevicePtr, count uint64, dt DataType, op RedOp, c RawComm, s driver.Stream) error {
	r := b.call(ncclReduceScatter, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(op), uintptr(c), uintptr(s))
	return b.check(ncclReduceScatter, r, c)
}

func (b *binding) AllGather(send, recv driver.DevicePtr, count uint64, dt DataType, c RawComm, s driver.Stream) error {
	r := b.call(ncclAllGather, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(c), uintptr(s))
	return b.check(ncclAllGather, r, c)
}

func (b *binding) Broadcast(send, recv driver.DevicePtr, count uint64, dt DataType, root int, c RawComm, s driver.Stream) error {
	r := b.call(ncclBroadcast, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(root), uintptr(c), uintptr(s))
	return b.check(ncclBroadcast, r, c)
}

func (b *binding) GroupStart() error { return b.check(ncclGroupStart, b.call(ncclGroupStart), 0) }
func (b *binding) GroupEnd() error   { return b.check(ncclGroupEnd, b.call(ncclGroupEnd), 0) }

// scalarHostImmediate is ncclScalarHostImmediate: the scalar is read
// before ncclRedOpCreatePreMulSum returns.
const scalarHostImmediate = 1

func (b *binding) RedOpCreatePreMulSum(scalar []byte, dt DataType, c RawComm) (RedOp, error) {
	if len(scalar) != dt.Size() {
		panic(fmt.Sprintf("nccl: a %v scalar of %d bytes", dt, len(scalar)))
	}
	var op int32
	var v [8]byte // aligned for any of the types
	copy(v[:], scalar)
	r := b.call(ncclRedOpCreatePreMulSum, uintptr(unsafe.Pointer(&op)), uintptr(unsafe.Pointer(&v[0])), uintptr(dt), scalarHostImmediate, uintptr(c))
	return RedOp(op), b.check(ncclRedOpCreatePreMulSum, r, c)
}

func (b *binding) RedOpDestroy(op RedOp, c RawComm) error {
	return b.check(ncclRedOpDestroy, b.call(ncclRedOpDestroy, uintptr(op), uintptr(c)), c)
}

func (b *binding) ErrorString(r Result) string {
	return cString(b.call(ncclGetErrorString, uintptr(r)))
}

func (b *binding) LastError(c RawComm) string {
	return cString(b.call(ncclGetLastError, uintptr(c)))
}

// cString copies the NUL-terminated C string whose address a call
// returned (outside the Go heap: reinterpreted, not converted, so that
// checkptr does not mistake it for pointer arithmetic).
func cString(r uintptr) string {
	if r == 0 {
		return ""
	}
	p := *(**byte)(unsafe.Pointer(&r))
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}
