package driver

// ABIVersion is the CUDA version whose headers the wrappers follow. Every
// driver entry point is resolved with cuGetProcAddress(name, &fn,
// ABIVersion, ...), which returns the variant those headers mean by the
// plain name (cuMemAlloc means cuMemAlloc_v2, and so on), so the binding
// never calls a legacy 32-bit entry by mistake. Drivers older than it are
// refused.
const ABIVersion = 12000

// Symbol is one C function the binding calls.
type Symbol struct {
	Lib string // LibCUDA, LibNVRTC or LibCublasLt
	// Name is the exported ELF symbol: the versioned name (cuMemGetInfo_v2)
	// for the driver, what dlsym would be asked for.
	Name string
	// Query is the base name handed to cuGetProcAddress; "" for symbols
	// found with dlsym (the two the loader needs before it, and every
	// NVRTC and cuBLASLt symbol).
	Query string
	// Proto is the C prototype, as in the library's header with the
	// typedef names it uses. Parameters the function writes are named out…
	// (the ABI tests generate stubs that fill them).
	Proto string
	// Args is the number of parameters; purego passes at most 32.
	Args int
	// MinVersion is the oldest driver (cuDriverGetVersion) that has the
	// function, for LibCUDA; 0 otherwise.
	MinVersion int
}

// sym indexes Symbols.
type sym int

const (
	cuGetProcAddress sym = iota
	cuDriverGetVersion
	cuGetErrorName
	cuGetErrorString
	cuInit
	cuDeviceGetCount
	cuDeviceGet
	cuDeviceGetName
	cuDeviceGetAttribute
	cuDeviceTotalMem
	cuDevicePrimaryCtxRetain
	cuDevicePrimaryCtxRelease
	cuCtxSetCurrent
	cuCtxSynchronize
	cuMemGetInfo
	cuDeviceGetDefaultMemPool
	cuMemPoolSetAttribute
	cuMemPoolGetAttribute
	cuMemPoolTrimTo
	cuMemAllocFromPoolAsync
	cuMemFreeAsync
	cuMemcpyHtoDAsync
	cuMemcpyDtoHAsync
	cuMemcpyDtoDAsync
	cuMemsetD8Async
	cuMemsetD32Async
	cuMemHostAlloc
	cuMemFreeHost
	cuStreamCreate
	cuStreamDestroy
	cuStreamSynchronize
	cuStreamQuery
	cuStreamWaitEvent
	cuEventCreate
	cuEventDestroy
	cuEventRecord
	cuEventSynchronize
	cuEventQuery
	cuModuleLoadData
	cuModuleUnload
	cuModuleGetFunction
	cuLaunchKernel

	nvrtcGetErrorString
	nvrtcVersion
	nvrtcGetNumSupportedArchs
	nvrtcGetSupportedArchs
	nvrtcCreateProgram
	nvrtcDestroyProgram
	nvrtcCompileProgram
	nvrtcGetProgramLogSize
	nvrtcGetProgramLog
	nvrtcGetCUBINSize
	nvrtcGetCUBIN

	cublasLtGetVersion
	cublasLtGetStatusName
	cublasLtGetStatusString
	cublasLtCreate
	cublasLtDestroy
	cublasLtMatmulDescCreate
	cublasLtMatmulDescDestroy
	cublasLtMatmulDescSetAttribute
	cublasLtMatrixLayoutCreate
	cublasLtMatrixLayoutDestroy
	cublasLtMatrixLayoutSetAttribute
	cublasLtMatmulPreferenceCreate
	cublasLtMatmulPreferenceDestroy
	cublasLtMatmulPreferenceSetAttribute
	cublasLtMatmulAlgoGetHeuristic
	cublasLtMatmul

	numSyms
)

// Symbols is the binding's symbol table, indexed by sym. Tests check it
// against the wrappers (every symbol called, with Args arguments) and
// against C stubs generated from Proto.
var Symbols = [numSyms]Symbol{
	cuGetProcAddress:          {LibCUDA, "cuGetProcAddress_v2", "", "CUresult cuGetProcAddress_v2(const char* symbol, void** outPfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult* outStatus)", 5, 12000},
	cuDriverGetVersion:        {LibCUDA, "cuDriverGetVersion", "", "CUresult cuDriverGetVersion(int* outVersion)", 1, 2020},
	cuGetErrorName:            {LibCUDA, "cuGetErrorName", "cuGetErrorName", "CUresult cuGetErrorName(CUresult error, const char** outStr)", 2, 6000},
	cuGetErrorString:          {LibCUDA, "cuGetErrorString", "cuGetErrorString", "CUresult cuGetErrorString(CUresult error, const char** outStr)", 2, 6000},
	cuInit:                    {LibCUDA, "cuInit", "cuInit", "CUresult cuInit(unsigned int flags)", 1, 2000},
	cuDeviceGetCount:          {LibCUDA, "cuDeviceGetCount", "cuDeviceGetCount", "CUresult cuDeviceGetCount(int* outCount)", 1, 2000},
	cuDeviceGet:               {LibCUDA, "cuDeviceGet", "cuDeviceGet", "CUresult cuDeviceGet(CUdevice* outDevice, int ordinal)", 2, 2000},
	cuDeviceGetName:           {LibCUDA, "cuDeviceGetName", "cuDeviceGetName", "CUresult cuDeviceGetName(char* outName, int len, CUdevice dev)", 3, 2000},
	cuDeviceGetAttribute:      {LibCUDA, "cuDeviceGetAttribute", "cuDeviceGetAttribute", "CUresult cuDeviceGetAttribute(int* outValue, CUdevice_attribute attrib, CUdevice dev)", 3, 2000},
	cuDeviceTotalMem:          {LibCUDA, "cuDeviceTotalMem_v2", "cuDeviceTotalMem", "CUresult cuDeviceTotalMem_v2(size_t* outBytes, CUdevice dev)", 2, 3020},
	cuDevicePrimaryCtxRetain:  {LibCUDA, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", "CUresult cuDevicePrimaryCtxRetain(CUcontext* outCtx, CUdevice dev)", 2, 7000},
	cuDevicePrimaryCtxRelease: {LibCUDA, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", "CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)", 1, 11000},
	cuCtxSetCurrent:           {LibCUDA, "cuCtxSetCurrent", "cuCtxSetCurrent", "CUresult cuCtxSetCurrent(CUcontext ctx)", 1, 4000},
	cuCtxSynchronize:          {LibCUDA, "cuCtxSynchronize", "cuCtxSynchronize", "CUresult cuCtxSynchronize(void)", 0, 2000},
	cuMemGetInfo:              {LibCUDA, "cuMemGetInfo_v2", "cuMemGetInfo", "CUresult cuMemGetInfo_v2(size_t* outFree, size_t* outTotal)", 2, 3020},
	cuDeviceGetDefaultMemPool: {LibCUDA, "cuDeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool", "CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* outPool, CUdevice dev)", 2, 11020},
	cuMemPoolSetAttribute:     {LibCUDA, "cuMemPoolSetAttribute", "cuMemPoolSetAttribute", "CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value)", 3, 11020},
	cuMemPoolGetAttribute:     {LibCUDA, "cuMemPoolGetAttribute", "cuMemPoolGetAttribute", "CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, cuuint64_t* outValue)", 3, 11020},
	cuMemPoolTrimTo:           {LibCUDA, "cuMemPoolTrimTo", "cuMemPoolTrimTo", "CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)", 2, 11020},
	cuMemAllocFromPoolAsync:   {LibCUDA, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", "CUresult cuMemAllocFromPoolAsync(CUdeviceptr* outPtr, size_t bytesize, CUmemoryPool pool, CUstream stream)", 4, 11020},
	cuMemFreeAsync:            {LibCUDA, "cuMemFreeAsync", "cuMemFreeAsync", "CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)", 2, 11020},
	cuMemcpyHtoDAsync:         {LibCUDA, "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync", "CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream stream)", 4, 3020},
	cuMemcpyDtoHAsync:         {LibCUDA, "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync", "CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream stream)", 4, 3020},
	cuMemcpyDtoDAsync:         {LibCUDA, "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync", "CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream)", 4, 3020},
	cuMemsetD8Async:           {LibCUDA, "cuMemsetD8Async", "cuMemsetD8Async", "CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream)", 4, 3020},
	cuMemsetD32Async:          {LibCUDA, "cuMemsetD32Async", "cuMemsetD32Async", "CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t n, CUstream stream)", 4, 3020},
	cuMemHostAlloc:            {LibCUDA, "cuMemHostAlloc", "cuMemHostAlloc", "CUresult cuMemHostAlloc(void** outPtr, size_t bytesize, unsigned int flags)", 3, 2020},
	cuMemFreeHost:             {LibCUDA, "cuMemFreeHost", "cuMemFreeHost", "CUresult cuMemFreeHost(void* p)", 1, 2000},
	cuStreamCreate:            {LibCUDA, "cuStreamCreate", "cuStreamCreate", "CUresult cuStreamCreate(CUstream* outStream, unsigned int flags)", 2, 2000},
	cuStreamDestroy:           {LibCUDA, "cuStreamDestroy_v2", "cuStreamDestroy", "CUresult cuStreamDestroy_v2(CUstream stream)", 1, 4000},
	cuStreamSynchronize:       {LibCUDA, "cuStreamSynchronize", "cuStreamSynchronize", "CUresult cuStreamSynchronize(CUstream stream)", 1, 2000},
	cuStreamQuery:             {LibCUDA, "cuStreamQuery", "cuStreamQuery", "CUresult cuStreamQuery(CUstream stream)", 1, 2000},
	cuStreamWaitEvent:         {LibCUDA, "cuStreamWaitEvent", "cuStreamWaitEvent", "CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags)", 3, 3020},
	cuEventCreate:             {LibCUDA, "cuEventCreate", "cuEventCreate", "CUresult cuEventCreate(CUevent* outEvent, unsigned int flags)", 2, 2000},
	cuEventDestroy:            {LibCUDA, "cuEventDestroy_v2", "cuEventDestroy", "CUresult cuEventDestroy_v2(CUevent event)", 1, 4000},
	cuEventRecord:             {LibCUDA, "cuEventRecord", "cuEventRecord", "CUresult cuEventRecord(CUevent event, CUstream stream)", 2, 2000},
	cuEventSynchronize:        {LibCUDA, "cuEventSynchronize", "cuEventSynchronize", "CUresult cuEventSynchronize(CUevent event)", 1, 2000},
	cuEventQuery:              {LibCUDA, "cuEventQuery", "cuEventQuery", "CUresult cuEventQuery(CUevent event)", 1, 2000},
	cuModuleLoadData:          {LibCUDA, "cuModuleLoadData", "cuModuleLoadData", "CUresult cuModuleLoadData(CUmodule* outModule, const void* image)", 2, 2000},
	cuModuleUnload:            {LibCUDA, "cuModuleUnload", "cuModuleUnload", "CUresult cuModuleUnload(CUmodule hmod)", 1, 2000},
	cuModuleGetFunction:       {LibCUDA, "cuModuleGetFunction", "cuModuleGetFunction", "CUresult cuModuleGetFunction(CUfunction* outFunc, CUmodule hmod, const char* name)", 3, 2000},
	cuLaunchKernel: {LibCUDA, "cuLaunchKernel", "cuLaunchKernel", "CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, " +
		"unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream stream, void** kernelParams, void** extra)", 11, 4000},

	nvrtcGetErrorString:       {LibNVRTC, "nvrtcGetErrorString", "", "const char* nvrtcGetErrorString(nvrtcResult result)", 1, 0},
	nvrtcVersion:              {LibNVRTC, "nvrtcVersion", "", "nvrtcResult nvrtcVersion(int* outMajor, int* outMinor)", 2, 0},
	nvrtcGetNumSupportedArchs: {LibNVRTC, "nvrtcGetNumSupportedArchs", "", "nvrtcResult nvrtcGetNumSupportedArchs(int* outNumArchs)", 1, 0},
	nvrtcGetSupportedArchs:    {LibNVRTC, "nvrtcGetSupportedArchs", "", "nvrtcResult nvrtcGetSupportedArchs(int* outArchs)", 1, 0},
	nvrtcCreateProgram: {LibNVRTC, "nvrtcCreateProgram", "", "nvrtcResult nvrtcCreateProgram(nvrtcProgram* outProg, const char* src, const char* name, " +
		"int numHeaders, const char* const* headers, const char* const* includeNames)", 6, 0},
	nvrtcDestroyProgram:    {LibNVRTC, "nvrtcDestroyProgram", "", "nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog)", 1, 0},
	nvrtcCompileProgram:    {LibNVRTC, "nvrtcCompileProgram", "", "nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char* const* options)", 3, 0},
	nvrtcGetProgramLogSize: {LibNVRTC, "nvrtcGetProgramLogSize", "", "nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* outSize)", 2, 0},
	nvrtcGetProgramLog:     {LibNVRTC, "nvrtcGetProgramLog", "", "nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* outLog)", 2, 0},
	nvrtcGetCUBINSize:      {LibNVRTC, "nvrtcGetCUBINSize", "", "nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* outSize)", 2, 0},
	nvrtcGetCUBIN:          {LibNVRTC, "nvrtcGetCUBIN", "", "nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* outCubin)", 2, 0},

	cublasLtGetVersion:      {LibCublasLt, "cublasLtGetVersion", "", "size_t cublasLtGetVersion(void)", 0, 0},
	cublasLtGetStatusName:   {LibCublasLt, "cublasLtGetStatusName", "", "const char* cublasLtGetStatusName(cublasStatus_t status)", 1, 0},
	cublasLtGetStatusString: {LibCublasLt, "cublasLtGetStatusString", "", "const char* cublasLtGetStatusString(cublasStatus_t status)", 1, 0},
	cublasLtCreate:          {LibCublasLt, "cublasLtCreate", "", "cublasStatus_t cublasLtCreate(cublasLtHandle_t* outHandle)", 1, 0},
	cublasLtDestroy:         {LibCublasLt, "cublasLtDestroy", "", "cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle)", 1, 0},
	cublasLtMatmulDescCreate: {LibCublasLt, "cublasLtMatmulDescCreate", "",
		"cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* outDesc, cublasComputeType_t computeType, cudaDataType_t scaleType)", 3, 0},
	cublasLtMatmulDescDestroy: {LibCublasLt, "cublasLtMatmulDescDestroy", "", "cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc)", 1, 0},
	cublasLtMatmulDescSetAttribute: {LibCublasLt, "cublasLtMatmulDescSetAttribute", "",
		"cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t sizeInBytes)", 4, 0},
	cublasLtMatrixLayoutCreate: {LibCublasLt, "cublasLtMatrixLayoutCreate", "",
		"cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* outLayout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld)", 5, 0},
	cublasLtMatrixLayoutDestroy: {LibCublasLt, "cublasLtMatrixLayoutDestroy", "", "cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout)", 1, 0},
	cublasLtMatrixLayoutSetAttribute: {LibCublasLt, "cublasLtMatrixLayoutSetAttribute", "",
		"cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, const void* buf, size_t sizeInBytes)", 4, 0},
	cublasLtMatmulPreferenceCreate:  {LibCublasLt, "cublasLtMatmulPreferenceCreate", "", "cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* outPref)", 1, 0},
	cublasLtMatmulPreferenceDestroy: {LibCublasLt, "cublasLtMatmulPreferenceDestroy", "", "cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)", 1, 0},
	cublasLtMatmulPreferenceSetAttribute: {LibCublasLt, "cublasLtMatmulPreferenceSetAttribute", "",
		"cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf, size_t sizeInBytes)", 4, 0},
	cublasLtMatmulAlgoGetHeuristic: {LibCublasLt, "cublasLtMatmulAlgoGetHeuristic", "",
		"cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc, " +
			"cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t pref, " +
			"int requestedAlgoCount, cublasLtMatmulHeuristicResult_t* outResults, int* outCount)", 10, 0},
	cublasLtMatmul: {LibCublasLt, "cublasLtMatmul", "",
		"cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc, " +
			"const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc, " +
			"const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream)", 16, 0},
}
