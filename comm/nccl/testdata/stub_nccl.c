// A stub libnccl for the ABI tests (abi_test.go), built with the machine's
// C compiler: every function has nccl.h's prototype, records its name and
// its arguments as the callee sees them, fills its out-parameters with
// known values and returns the code stub_fail set for it (0 otherwise).
#include <stdint.h>
#include <string.h>
#include <limits.h>

typedef int ncclResult_t;
typedef void* ncclComm_t;
typedef void* cudaStream_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef int ncclScalarResidence_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct {
	size_t size; unsigned int magic; unsigned int version;
	int blocking; int cgaClusterSize; int minCTAs; int maxCTAs;
	const char* netName; int splitShare;
} ncclConfig_t;

#ifndef STUB_VERSION
#define STUB_VERSION 22703
#endif

static char last_name[64];
static unsigned long long last_args[8];
static unsigned char last_id[128];
static ncclConfig_t last_config;
static unsigned char last_scalar[8];
static char fail_name[64];
static int fail_code;

static int ret(const char* n) {
	strncpy(last_name, n, sizeof last_name - 1);
	return strcmp(n, fail_name) == 0 ? fail_code : 0;
}
#define ARGS(...) do { unsigned long long a[] = {__VA_ARGS__}; memset(last_args, 0, sizeof last_args); memcpy(last_args, a, sizeof a); } while (0)

int stub_last(char* name, unsigned long long* args, unsigned char* id, ncclConfig_t* cfg, unsigned char* scalar) {
	strcpy(name, last_name);
	memcpy(args, last_args, sizeof last_args);
	memcpy(id, last_id, sizeof last_id);
	*cfg = last_config;
	memcpy(scalar, last_scalar, sizeof last_scalar);
	return 0;
}
void stub_fail(const char* name, int code) { strncpy(fail_name, name, sizeof fail_name - 1); fail_code = code; }
void stub_reset(void) { last_name[0] = 0; fail_name[0] = 0; fail_code = 0; memset(last_id, 0, 128); memset(&last_config, 0, sizeof last_config); }

ncclResult_t ncclGetVersion(int* version) { *version = STUB_VERSION; return 0; }
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
	for (int i = 0; i < 128; i++) id->internal[i] = (char)(i * 3 + 1);
	return ret("ncclGetUniqueId");
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
	ARGS((uintptr_t)comm, (unsigned long long)nranks, (unsigned long long)rank, (uintptr_t)config);
	memcpy(last_id, commId.internal, 128);
	last_config = *config;
	*comm = (ncclComm_t)0x1234;
	return ret("ncclCommInitRankConfig");
}
#ifndef NO_SCALABLE
ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config) {
	ARGS((uintptr_t)comm, (unsigned long long)nranks, (unsigned long long)myrank, (unsigned long long)nId, (uintptr_t)commIds, (uintptr_t)config);
	memcpy(last_id, commIds->internal, 128);
	last_config = *config;
	*comm = (ncclComm_t)0x1235;
	return ret("ncclCommInitRankScalable");
}
#endif
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
	ARGS((uintptr_t)comm, (unsigned long long)(long long)color, (unsigned long long)(long long)key, (uintptr_t)newcomm, (uintptr_t)config);
	last_config = *config;
	*newcomm = color < 0 ? 0 : (ncclComm_t)0x5678;
	return ret("ncclCommSplit");
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) { ARGS((uintptr_t)comm); return ret("ncclCommDestroy"); }
ncclResult_t ncclCommAbort(ncclComm_t comm) { ARGS((uintptr_t)comm); return ret("ncclCommAbort"); }
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* e) { ARGS((uintptr_t)comm); *e = 7; return ret("ncclCommGetAsyncError"); }
ncclResult_t ncclAllReduce(const void* s, void* r, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm, cudaStream_t st) {
	ARGS((uintptr_t)s, (uintptr_t)r, count, (unsigned long long)dt, (unsigned long long)op, (uintptr_t)comm, (uintptr_t)st);
	return ret("ncclAllReduce");
}
ncclResult_t ncclReduceScatter(const void* s, void* r, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm, cudaStream_t st) {
	ARGS((uintptr_t)s, (uintptr_t)r, count, (unsigned long long)dt, (unsigned long long)op, (uintptr_t)comm, (uintptr_t)st);
	return ret("ncclReduceScatter");
}
ncclResult_t ncclAllGather(const void* s, void* r, size_t count, ncclDataType_t dt, ncclComm_t comm, cudaStream_t st) {
	ARGS((uintptr_t)s, (uintptr_t)r, count, (unsigned long long)dt, (uintptr_t)comm, (uintptr_t)st);
	return ret("ncclAllGather");
}
ncclResult_t ncclBroadcast(const void* s, void* r, size_t count, ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t st) {
	ARGS((uintptr_t)s, (uintptr_t)r, count, (unsigned long long)dt, (unsigned long long)root, (uintptr_t)comm, (uintptr_t)st);
	return ret("ncclBroadcast");
}
ncclResult_t ncclGroupStart(void) { ARGS(0); return ret("ncclGroupStart"); }
ncclResult_t ncclGroupEnd(void) { ARGS(0); return ret("ncclGroupEnd"); }
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t dt, ncclScalarResidence_t res, ncclComm_t comm) {
	ARGS((uintptr_t)op, (uintptr_t)scalar, (unsigned long long)dt, (unsigned long long)res, (uintptr_t)comm);
	memset(last_scalar, 0, sizeof last_scalar);
	memcpy(last_scalar, scalar, dt == 7 ? 4 : 2);
	*op = 5;
	return ret("ncclRedOpCreatePreMulSum");
}
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) { ARGS((unsigned long long)op, (uintptr_t)comm); return ret("ncclRedOpDestroy"); }
const char* ncclGetErrorString(ncclResult_t r) { return r == 4 ? "invalid argument (stub)" : "stub error"; }
const char* ncclGetLastError(ncclComm_t comm) { return comm ? "stub last error" : ""; }
