package nccl

// symbol is one C function of libnccl the binding calls.
type symbol struct {
	Name string
	// Proto is the prototype as in nccl.h (the typedef names it uses).
	Proto string
	// Args is the number of machine words the call passes: the
	// parameters, except for ncclCommInitRankConfig on amd64 (see
	// initRankConfig).
	Args int
	// Optional symbols may be missing; the binding then does without.
	Optional bool
}

// sym indexes symbols.
type sym int

const (
	ncclGetVersion sym = iota
	ncclGetUniqueId
	ncclCommInitRankConfig
	ncclCommInitRankScalable
	ncclCommSplit
	ncclCommDestroy
	ncclCommAbort
	ncclCommGetAsyncError
	ncclAllReduce
	ncclReduceScatter
	ncclAllGather
	ncclBroadcast
	ncclGroupStart
	ncclGroupEnd
	ncclRedOpCreatePreMulSum
	ncclRedOpDestroy
	ncclGetErrorString
	ncclGetLastError
	numSyms
)

// symbols is the binding's table, from nccl.h (NCCL 2.18 to 2.30).
var symbols = [numSyms]symbol{
	ncclGetVersion:  {Name: "ncclGetVersion", Proto: "ncclResult_t ncclGetVersion(int* version)", Args: 1},
	ncclGetUniqueId: {Name: "ncclGetUniqueId", Proto: "ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId)", Args: 1},
	// The 128-byte id goes by value: see initRankConfig for the words.
	ncclCommInitRankConfig: {Name: "ncclCommInitRankConfig",
		Proto: "ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config)", Args: 5},
	// NCCL ≥ 2.23: the same with the id by pointer (nId = 1).
	ncclCommInitRankScalable: {Name: "ncclCommInitRankScalable",
		Proto: "ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config)", Args: 6, Optional: true},
	ncclCommSplit: {Name: "ncclCommSplit",
		Proto: "ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config)", Args: 5},
	ncclCommDestroy:       {Name: "ncclCommDestroy", Proto: "ncclResult_t ncclCommDestroy(ncclComm_t comm)", Args: 1},
	ncclCommAbort:         {Name: "ncclCommAbort", Proto: "ncclResult_t ncclCommAbort(ncclComm_t comm)", Args: 1},
	ncclCommGetAsyncError: {Name: "ncclCommGetAsyncError", Proto: "ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError)", Args: 2},
	ncclAllReduce: {Name: "ncclAllReduce",
		Proto: "ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)", Args: 7},
	ncclReduceScatter: {Name: "ncclReduceScatter",
		Proto: "ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)", Args: 7},
	ncclAllGather: {Name: "ncclAllGather",
		Proto: "ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)", Args: 6},
	ncclBroadcast: {Name: "ncclBroadcast",
		Proto: "ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)", Args: 7},
	ncclGroupStart: {Name: "ncclGroupStart", Proto: "ncclResult_t ncclGroupStart()", Args: 0},
	ncclGroupEnd:   {Name: "ncclGroupEnd", Proto: "ncclResult_t ncclGroupEnd()", Args: 0},
	ncclRedOpCreatePreMulSum: {Name: "ncclRedOpCreatePreMulSum",
		Proto: "ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm)", Args: 5},
	ncclRedOpDestroy:   {Name: "ncclRedOpDestroy", Proto: "ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)", Args: 2},
	ncclGetErrorString: {Name: "ncclGetErrorString", Proto: "const char* ncclGetErrorString(ncclResult_t result)", Args: 1},
	ncclGetLastError:   {Name: "ncclGetLastError", Proto: "const char* ncclGetLastError(ncclComm_t comm)", Args: 1},
}
