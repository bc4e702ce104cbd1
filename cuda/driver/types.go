package driver

import (
	"fmt"
	"structs"
)

// Handles of the driver API. They are opaque to Go: a Stream is the
// CUstream pointer the driver returned, kept as an integer so the garbage
// collector never looks at it.
type (
	Device    int32   // CUdevice: an ordinal-like handle from cuDeviceGet
	Context   uintptr // CUcontext
	Stream    uintptr // CUstream; 0 is the legacy default stream, never used here
	Event     uintptr // CUevent
	Module    uintptr // CUmodule
	Function  uintptr // CUfunction
	MemPool   uintptr // CUmemoryPool
	DevicePtr uintptr // CUdeviceptr: a device (unified) virtual address
	LtHandle  uintptr // cublasLtHandle_t
	LtDesc    uintptr // cublasLtMatmulDesc_t
	LtLayout  uintptr // cublasLtMatrixLayout_t
	LtPref    uintptr // cublasLtMatmulPreference_t
)

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// Threads is X·Y·Z.
func (d Dim3) Threads() int { return int(d.X) * int(d.Y) * int(d.Z) }

func (d Dim3) String() string { return fmt.Sprintf("(%d,%d,%d)", d.X, d.Y, d.Z) }

// DeviceAttr is a CUdevice_attribute.
type DeviceAttr int32

const (
	AttrMaxThreadsPerBlock        DeviceAttr = 1
	AttrMaxSharedMemoryPerBlock   DeviceAttr = 8
	AttrWarpSize                  DeviceAttr = 10
	AttrClockRate                 DeviceAttr = 13 // kHz
	AttrMultiprocessorCount       DeviceAttr = 16
	AttrPCIBusID                  DeviceAttr = 33
	AttrUnifiedAddressing         DeviceAttr = 41
	AttrComputeCapabilityMajor    DeviceAttr = 75
	AttrComputeCapabilityMinor    DeviceAttr = 76
	AttrMaxSharedMemoryPerBlockOp DeviceAttr = 97 // opt-in maximum
	AttrMemoryPoolsSupported      DeviceAttr = 115
)

// PoolAttr is a CUmemPool_attribute; every one used here is a uint64
// (cuuint64_t) or an int (then passed as the low 32 bits).
type PoolAttr int32

const (
	PoolReuseFollowEventDependencies PoolAttr = 1 // int
	PoolReuseAllowOpportunistic      PoolAttr = 2 // int
	PoolReuseAllowInternalDeps       PoolAttr = 3 // int
	PoolReleaseThreshold             PoolAttr = 4 // cuuint64_t: bytes kept cached across synchronisations
	PoolReservedMemCurrent           PoolAttr = 5 // cuuint64_t: bytes the pool holds from the device
	PoolReservedMemHigh              PoolAttr = 6
	PoolUsedMemCurrent               PoolAttr = 7 // cuuint64_t: bytes handed out and not freed
	PoolUsedMemHigh                  PoolAttr = 8
)

// Flags of cuStreamCreate, cuEventCreate and cuMemHostAlloc.
const (
	StreamNonBlocking   uint32 = 0x1 // CU_STREAM_NON_BLOCKING: no implicit sync with the legacy stream
	EventDisableTiming  uint32 = 0x2 // CU_EVENT_DISABLE_TIMING: the cheap kind, for ordering only
	HostAllocPortable   uint32 = 0x1 // CU_MEMHOSTALLOC_PORTABLE: pinned for every context
	HostAllocDeviceMap  uint32 = 0x2 // CU_MEMHOSTALLOC_DEVICEMAP
	HostAllocWriteComb  uint32 = 0x4 // CU_MEMHOSTALLOC_WRITECOMBINED
	getProcLegacyStream uint64 = 0x1 // CU_GET_PROC_ADDRESS_LEGACY_STREAM
)

// DataType is a cudaDataType_t.
type DataType int32

const (
	R32F  DataType = 0  // CUDA_R_32F
	R16F  DataType = 2  // CUDA_R_16F
	R16BF DataType = 14 // CUDA_R_16BF
)

func (t DataType) String() string {
	switch t {
	case R32F:
		return "CUDA_R_32F"
	case R16F:
		return "CUDA_R_16F"
	case R16BF:
		return "CUDA_R_16BF"
	}
	return fmt.Sprintf("cudaDataType(%d)", int32(t))
}

// Size is the width of one element in bytes.
func (t DataType) Size() int {
	if t == R32F {
		return 4
	}
	return 2
}

// ComputeType is a cublasComputeType_t.
type ComputeType int32

const (
	// Compute32F accumulates in float32 with float32 multiplies: the
	// only compute type used here, so fp32 GEMMs never use TF32.
	Compute32F ComputeType = 68
	// Compute32FFastTF32 rounds fp32 inputs to TF32 (10-bit mantissa)
	// for tensor cores. Named so tests can say it is never chosen.
	Compute32FFastTF32 ComputeType = 77
)

// cublasLt attribute enums (cublasLt.h).
type (
	LtDescAttr   int32 // cublasLtMatmulDescAttributes_t
	LtLayoutAttr int32 // cublasLtMatrixLayoutAttribute_t
	LtPrefAttr   int32 // cublasLtMatmulPreferenceAttributes_t
)

const (
	LtDescTransA LtDescAttr = 3 // int32 cublasOperation_t
	LtDescTransB LtDescAttr = 4 // int32 cublasOperation_t

	LtLayoutBatchCount    LtLayoutAttr = 5 // int32
	LtLayoutStridedOffset LtLayoutAttr = 6 // int64, elements between batch members

	LtPrefMaxWorkspaceBytes LtPrefAttr = 1 // uint64
	// The alignment the chosen algorithm may assume of each matrix's
	// address (uint32 bytes); without them the heuristic assumes 256.
	LtPrefMinAlignmentA LtPrefAttr = 5
	LtPrefMinAlignmentB LtPrefAttr = 6
	LtPrefMinAlignmentC LtPrefAttr = 7
	LtPrefMinAlignmentD LtPrefAttr = 8
)

// Op is a cublasOperation_t.
const (
	OpN int32 = 0
	OpT int32 = 1
)

// LtAlgo is cublasLtMatmulAlgo_t, 64 opaque bytes.
type LtAlgo struct {
	_    structs.HostLayout
	Data [8]uint64
}

// LtHeuristic is cublasLtMatmulHeuristicResult_t (96 bytes).
type LtHeuristic struct {
	_             structs.HostLayout
	Algo          LtAlgo
	WorkspaceSize uint64
	State         int32 // cublasStatus_t: only a 0 entry is usable
	WavesCount    float32
	Reserved      [4]int32
}
