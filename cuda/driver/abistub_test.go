package driver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The ABI tests build stub shared libraries from Symbols[*].Proto with the
// machine's C compiler. Each stub function records its name and every
// argument as the callee sees it (its declared C type widened to 64 bits),
// writes a marker into each out… parameter, and returns 0, so a test can
// check that a Go wrapper put each argument in the right place with the
// right width and reads each result from the right place.

// stubMark is the value written to out-parameter i: stubMark+i. It is
// above the runtime's minimum legal pointer, so a marker returned in an
// unsafe.Pointer is harmless.
const stubMark = 0x51000000

// cTypes classifies the typedef names the prototypes use.
var cTypes = map[string]string{
	"int": "int", "unsigned int": "int", "unsigned char": "int", "size_t": "int", "uint64_t": "int",
	"int64_t": "int", "cuuint64_t": "int", "CUdevice": "int", "CUresult": "int", "CUdeviceptr": "int",
	"CUdevice_attribute": "int", "CUmemPool_attribute": "int", "CUdriverProcAddressQueryResult": "int",
	"nvrtcResult": "int", "cublasStatus_t": "int", "cublasComputeType_t": "int", "cudaDataType_t": "int",
	"cudaDataType": "int", "cublasLtMatmulDescAttributes_t": "int", "cublasLtMatrixLayoutAttribute_t": "int",
	"cublasLtMatmulPreferenceAttributes_t": "int",
	"CUcontext":                            "ptr", "CUstream": "ptr", "CUevent": "ptr", "CUmodule": "ptr", "CUfunction": "ptr",
	"CUmemoryPool": "ptr", "nvrtcProgram": "ptr", "cublasLtHandle_t": "ptr", "cublasLtMatmulDesc_t": "ptr",
	"cublasLtMatrixLayout_t": "ptr", "cublasLtMatmulPreference_t": "ptr", "cudaStream_t": "ptr", "void*": "ptr",
}

const stubPrelude = `
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <dlfcn.h>
typedef int CUresult; typedef int CUdevice; typedef unsigned long long CUdeviceptr; typedef unsigned long long cuuint64_t;
typedef void* CUcontext; typedef void* CUstream; typedef void* CUevent; typedef void* CUmodule; typedef void* CUfunction;
typedef void* CUmemoryPool; typedef int CUdevice_attribute; typedef int CUmemPool_attribute; typedef int CUdriverProcAddressQueryResult;
typedef int nvrtcResult; typedef void* nvrtcProgram;
typedef int cublasStatus_t; typedef void* cublasLtHandle_t; typedef void* cublasLtMatmulDesc_t; typedef void* cublasLtMatrixLayout_t;
typedef void* cublasLtMatmulPreference_t; typedef int cublasComputeType_t; typedef int cudaDataType_t; typedef int cudaDataType;
typedef void* cudaStream_t; typedef int cublasLtMatmulDescAttributes_t; typedef int cublasLtMatrixLayoutAttribute_t;
typedef int cublasLtMatmulPreferenceAttributes_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct { cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount; int reserved[4]; } cublasLtMatmulHeuristicResult_t;
_Static_assert(sizeof(cublasLtMatmulHeuristicResult_t) == 96, "heuristic result size");

static char last_name[64];
static unsigned long long last_args[32];
static int last_nargs;
static unsigned char snap[4096];
static int snap_len;
static char fail_name[64];
static int fail_code;

static void rec(const char* n, int k, const unsigned long long* a) {
	strncpy(last_name, n, sizeof last_name - 1);
	memcpy(last_args, a, k * sizeof a[0]);
	last_nargs = k;
}
static void snap_bytes(const void* p, size_t n) {
	if (n > sizeof snap) n = sizeof snap;
	memcpy(snap, p, n);
	snap_len = (int)n;
}
static int ret_for(const char* n) { return strcmp(n, fail_name) == 0 ? fail_code : 0; }

int stub_last(char* name, unsigned long long* args) {
	strcpy(name, last_name);
	memcpy(args, last_args, sizeof last_args);
	return last_nargs;
}
int stub_snap(unsigned char* out) { memcpy(out, snap, snap_len); return snap_len; }
void stub_fail(const char* name, int code) { strncpy(fail_name, name, sizeof fail_name - 1); fail_code = code; }
void stub_reset(void) { last_name[0] = 0; last_nargs = 0; snap_len = 0; fail_name[0] = 0; fail_code = 0; }
`

// genStub returns C definitions of the symbols of lib, except those in
// custom (written by hand in the library's extra source).
func genStub(t *testing.T, lib string, custom map[string]bool) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(stubPrelude)
	for _, s := range Symbols {
		if s.Lib != lib || custom[s.Name] {
			continue
		}
		p := parseProto(t, s.Proto)
		fmt.Fprintf(&b, "%s {\n", s.Proto)
		fmt.Fprintf(&b, "\tunsigned long long a[%d] = {", max(1, len(p.params)))
		strName := ""
		for i, pa := range p.params {
			if i > 0 {
				b.WriteString(", ")
			}
			if strings.Contains(pa.typ, "*") || cTypes[pa.typ] == "ptr" {
				fmt.Fprintf(&b, "(unsigned long long)(uintptr_t)(%s)", pa.name)
			} else if cTypes[pa.typ] == "int" {
				fmt.Fprintf(&b, "(unsigned long long)(%s)", pa.name)
			} else {
				t.Fatalf("%s: unknown C type %q", s.Name, pa.typ)
			}
			if pa.typ == "const char*" && strName == "" {
				strName = pa.name
			}
		}
		fmt.Fprintf(&b, "};\n\trec(%q, %d, a);\n", s.Name, len(p.params))
		if strName != "" {
			fmt.Fprintf(&b, "\tsnap_bytes(%s, strlen(%s) + 1);\n", strName, strName)
		}
		for i, pa := range p.params {
			if pa.name == "buf" && i+1 < len(p.params) && p.params[i+1].name == "sizeInBytes" {
				b.WriteString("\tsnap_bytes(buf, sizeInBytes);\n")
			}
			if !strings.HasPrefix(pa.name, "out") {
				continue
			}
			base := strings.TrimSpace(strings.TrimSuffix(pa.typ, "*"))
			switch cTypes[base] {
			case "int":
				fmt.Fprintf(&b, "\t*%s = (%s)(%d + %d);\n", pa.name, base, stubMark, i)
			case "ptr":
				fmt.Fprintf(&b, "\t*%s = (%s)(uintptr_t)(%d + %d);\n", pa.name, base, stubMark, i)
			default:
				t.Fatalf("%s: no marker for out-parameter %s %s (write the stub by hand)", s.Name, pa.typ, pa.name)
			}
		}
		fmt.Fprintf(&b, "\treturn ret_for(%q);\n}\n", s.Name)
	}
	return b.String()
}

// cudaExtra is the hand-written part of the driver stub.
const cudaExtra = `
#ifndef DRIVER_VERSION
#define DRIVER_VERSION 12080
#endif
static char hidden[64];
void stub_hide(const char* name) { strncpy(hidden, name, sizeof hidden - 1); }
CUresult cuDriverGetVersion(int* outVersion) { *outVersion = DRIVER_VERSION; return 0; }
CUresult cuGetErrorName(CUresult e, const char** outStr) {
	static char buf[64]; snprintf(buf, sizeof buf, "STUB_CUDA_ERROR_%d", e); *outStr = buf; return 0;
}
CUresult cuGetErrorString(CUresult e, const char** outStr) {
	static char buf[64]; snprintf(buf, sizeof buf, "stub description of %d", e); *outStr = buf; return 0;
}
CUresult cuDeviceGetName(char* outName, int len, CUdevice dev) {
	unsigned long long a[3] = {(uintptr_t)outName, (unsigned long long)len, (unsigned long long)dev};
	rec("cuDeviceGetName", 3, a);
	strncpy(outName, "Stub GPU", len);
	return ret_for("cuDeviceGetName");
}
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
	unsigned long long a[3] = {(uintptr_t)pool, (unsigned long long)attr, (uintptr_t)value};
	rec("cuMemPoolSetAttribute", 3, a);
	snap_bytes(value, 8);
	return ret_for("cuMemPoolSetAttribute");
}
static int nparams, param_size[32];
void stub_set_params(int n, const int* sizes) { nparams = n; memcpy(param_size, sizes, n * sizeof(int)); }
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
		unsigned int bz, unsigned int shmem, CUstream stream, void** kernelParams, void** extra) {
	unsigned long long a[11] = {(uintptr_t)f, gx, gy, gz, bx, by, bz, shmem, (uintptr_t)stream, (uintptr_t)kernelParams, (uintptr_t)extra};
	rec("cuLaunchKernel", 11, a);
	unsigned char buf[512]; size_t off = 0;
	for (int i = 0; i < nparams; i++) { memcpy(buf + off, kernelParams[i], param_size[i]); off += param_size[i]; }
	snap_bytes(buf, off);
	return ret_for("cuLaunchKernel");
}
struct entry { const char* name; void* fn; };
static struct entry entries[] = { ENTRIES };
CUresult cuGetProcAddress_v2(const char* symbol, void** outPfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult* outStatus) {
	*outPfn = 0;
	if (cudaVersion != 12000 || flags != 1) { *outStatus = 2; return 1; }
	for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
		if (strcmp(entries[i].name, symbol) == 0 && strcmp(hidden, symbol) != 0) {
			*outPfn = entries[i].fn; *outStatus = 0; return 0;
		}
	}
	*outStatus = 1;
	return 500;
}
`

// nvrtcExtra is the hand-written part of the NVRTC stub. Compilation
// fails, as the real NVRTC does, when the builtins library is not already
// loaded: the real one dlopens it by soname and, from a pip wheel, does
// not find it.
const nvrtcExtra = `
#ifndef NVRTC_MAJOR
#define NVRTC_MAJOR 12
#endif
#ifndef BUILTINS_SONAME
#define BUILTINS_SONAME "libnvrtc-builtins.so.12.4"
#endif
static char log_text[256] = "";
static char cubin[512];
static int fail_compile;
void stub_fail_compile(int on) { fail_compile = on; }
const char* nvrtcGetErrorString(nvrtcResult r) {
	switch (r) { case 6: return "NVRTC_ERROR_COMPILATION"; case 7: return "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE"; }
	return "NVRTC_ERROR_STUB";
}
nvrtcResult nvrtcVersion(int* outMajor, int* outMinor) { *outMajor = NVRTC_MAJOR; *outMinor = 4; return 0; }
nvrtcResult nvrtcGetNumSupportedArchs(int* outNumArchs) { *outNumArchs = 2; return 0; }
nvrtcResult nvrtcGetSupportedArchs(int* outArchs) { outArchs[0] = 80; outArchs[1] = 90; return 0; }
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char* const* options) {
	unsigned long long a[3] = {(uintptr_t)prog, (unsigned long long)numOptions, (uintptr_t)options};
	rec("nvrtcCompileProgram", 3, a);
	if (!dlopen(BUILTINS_SONAME, RTLD_NOW | RTLD_NOLOAD)) {
		snprintf(log_text, sizeof log_text, "failed to open %s", BUILTINS_SONAME);
		return 7;
	}
	if (fail_compile) { strcpy(log_text, "k.cu(1): error: stub failure"); return 6; }
	strcpy(log_text, "stub log");
	strcpy(cubin, "CUBIN:");
	for (int i = 0; i < numOptions; i++) { strcat(cubin, " "); strcat(cubin, options[i]); }
	return 0;
}
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* outSize) { *outSize = strlen(log_text) + 1; return 0; }
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* outLog) { strcpy(outLog, log_text); return 0; }
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* outSize) { *outSize = strlen(cubin); return 0; }
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* outCubin) { memcpy(outCubin, cubin, strlen(cubin)); return 0; }
`

// blasLtExtra is the hand-written part of the cuBLASLt stub, plus the raw
// ABI probes (19 and 32 integer arguments, a 128-byte struct by pointer).
const blasLtExtra = `
size_t cublasLtGetVersion(void) { return 120400; }
const char* cublasLtGetStatusName(cublasStatus_t s) { return s == 3 ? "CUBLAS_STATUS_ALLOC_FAILED" : "CUBLAS_STATUS_STUB"; }
const char* cublasLtGetStatusString(cublasStatus_t s) { return "stub status string"; }
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
		cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t pref,
		int requestedAlgoCount, cublasLtMatmulHeuristicResult_t* outResults, int* outCount) {
	unsigned long long a[10] = {(uintptr_t)handle, (uintptr_t)desc, (uintptr_t)Adesc, (uintptr_t)Bdesc, (uintptr_t)Cdesc,
		(uintptr_t)Ddesc, (uintptr_t)pref, (unsigned long long)requestedAlgoCount, (uintptr_t)outResults, (uintptr_t)outCount};
	rec("cublasLtMatmulAlgoGetHeuristic", 10, a);
	int n = requestedAlgoCount < 2 ? requestedAlgoCount : 2;
	for (int k = 0; k < n; k++) {
		for (int i = 0; i < 8; i++) outResults[k].algo.data[i] = 0xA160 + 16 * k + i;
		outResults[k].workspaceSize = 4096 * (k + 1);
		outResults[k].state = 0;
		outResults[k].wavesCount = 1.5f + k;
		for (int i = 0; i < 4; i++) outResults[k].reserved[i] = 0;
	}
	*outCount = n;
	return ret_for("cublasLtMatmulAlgoGetHeuristic");
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
		cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
		cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
		void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
	unsigned long long a[16] = {(uintptr_t)handle, (uintptr_t)desc, (uintptr_t)alpha, (uintptr_t)A, (uintptr_t)Adesc,
		(uintptr_t)B, (uintptr_t)Bdesc, (uintptr_t)beta, (uintptr_t)C, (uintptr_t)Cdesc, (uintptr_t)D, (uintptr_t)Ddesc,
		(uintptr_t)algo, (uintptr_t)workspace, (unsigned long long)workspaceSizeInBytes, (uintptr_t)stream};
	rec("cublasLtMatmul", 16, a);
	unsigned char buf[72];
	memcpy(buf, alpha, 4); memcpy(buf + 4, beta, 4); memcpy(buf + 8, algo, 64);
	snap_bytes(buf, sizeof buf);
	return ret_for("cublasLtMatmul");
}
unsigned long long stub_echo19(unsigned long long a0, unsigned long long a1, unsigned long long a2, unsigned long long a3,
		unsigned long long a4, unsigned long long a5, unsigned long long a6, unsigned long long a7, unsigned long long a8,
		unsigned long long a9, unsigned long long a10, unsigned long long a11, unsigned long long a12, unsigned long long a13,
		unsigned long long a14, unsigned long long a15, unsigned long long a16, unsigned long long a17, int a18) {
	unsigned long long a[19] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, (unsigned long long)a18};
	rec("stub_echo19", 19, a);
	return a0 ^ a18;
}
unsigned long long stub_echo32(unsigned long long a0, unsigned long long a1, unsigned long long a2, unsigned long long a3,
		unsigned long long a4, unsigned long long a5, unsigned long long a6, unsigned long long a7, unsigned long long a8,
		unsigned long long a9, unsigned long long a10, unsigned long long a11, unsigned long long a12, unsigned long long a13,
		unsigned long long a14, unsigned long long a15, unsigned long long a16, unsigned long long a17, unsigned long long a18,
		unsigned long long a19, unsigned long long a20, unsigned long long a21, unsigned long long a22, unsigned long long a23,
		unsigned long long a24, unsigned long long a25, unsigned long long a26, unsigned long long a27, unsigned long long a28,
		unsigned long long a29, unsigned long long a30, unsigned long long a31) {
	unsigned long long a[32] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19,
		a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31};
	rec("stub_echo32", 32, a);
	return a31;
}
typedef struct { unsigned char b[128]; } id128;
int stub_struct128(void** comm, int n, const id128* id, int rank) {
	unsigned long long a[4] = {(uintptr_t)comm, (unsigned long long)n, (uintptr_t)id, (unsigned long long)rank};
	rec("stub_struct128", 4, a);
	snap_bytes(id, sizeof *id);
	*comm = (void*)(uintptr_t)0x51000000;
	return 0;
}
`

// stubOptions describe one build of the three stubs.
type stubOptions struct {
	driverVersion  int    // DRIVER_VERSION, 0 for the default 12080
	nvrtcMajor     int    // NVRTC_MAJOR, 0 for 12
	builtinsSoname string // what the NVRTC stub requires loaded; "" for libnvrtc-builtins.so.12.4
	noBuiltins     bool   // do not build the builtins library
	// tag separates builds that tests put in different states (a hidden
	// symbol): stubs are built once per distinct stubOptions.
	tag string
}

// stubDirs caches built stub folders per stubOptions, under stubRoot.
var (
	stubMu   sync.Mutex
	stubDirs = map[stubOptions]string{}
	stubRoot string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if stubRoot != "" {
		os.RemoveAll(stubRoot)
	}
	os.Exit(code)
}

// buildStubs compiles libcuda.so.1, libnvrtc.so.12 (with
// libnvrtc-builtins.so.12.4 beside it) and libcublasLt.so.12 into a
// folder and returns it; the same options give the same folder. It skips
// the test when there is no C compiler.
func buildStubs(t *testing.T, o stubOptions) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc): the ABI stub tests need one")
	}
	stubMu.Lock()
	defer stubMu.Unlock()
	if dir, ok := stubDirs[o]; ok {
		return dir
	}
	if stubRoot == "" {
		if stubRoot, err = os.MkdirTemp("", "dszero-cuda-stubs-"); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(stubRoot, fmt.Sprint(len(stubDirs)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cudaCustom := map[string]bool{"cuGetProcAddress_v2": true, "cuDriverGetVersion": true, "cuGetErrorName": true,
		"cuGetErrorString": true, "cuDeviceGetName": true, "cuMemPoolSetAttribute": true, "cuLaunchKernel": true}
	var entries []string
	for _, s := range Symbols {
		if s.Lib == LibCUDA && s.Query != "" {
			entries = append(entries, fmt.Sprintf("{%q, (void*)%s}", s.Query, s.Name))
		}
	}
	cudaSrc := genStub(t, LibCUDA, cudaCustom) + "#include <stdio.h>\n" +
		strings.Replace(cudaExtra, "ENTRIES", strings.Join(entries, ", "), 1)
	nvrtcCustom := map[string]bool{"nvrtcGetErrorString": true, "nvrtcVersion": true, "nvrtcGetNumSupportedArchs": true,
		"nvrtcGetSupportedArchs": true, "nvrtcCompileProgram": true, "nvrtcGetProgramLogSize": true, "nvrtcGetProgramLog": true,
		"nvrtcGetCUBINSize": true, "nvrtcGetCUBIN": true}
	nvrtcSrc := genStub(t, LibNVRTC, nvrtcCustom) + "#include <stdio.h>\n" + nvrtcExtra
	ltCustom := map[string]bool{"cublasLtGetVersion": true, "cublasLtGetStatusName": true, "cublasLtGetStatusString": true,
		"cublasLtMatmulAlgoGetHeuristic": true, "cublasLtMatmul": true}
	ltSrc := genStub(t, LibCublasLt, ltCustom) + blasLtExtra

	var defs []string
	if o.driverVersion != 0 {
		defs = append(defs, fmt.Sprintf("-DDRIVER_VERSION=%d", o.driverVersion))
	}
	if o.nvrtcMajor != 0 {
		defs = append(defs, fmt.Sprintf("-DNVRTC_MAJOR=%d", o.nvrtcMajor))
	}
	builtins := o.builtinsSoname
	if builtins == "" {
		builtins = "libnvrtc-builtins.so.12.4"
	}
	defs = append(defs, fmt.Sprintf("-DBUILTINS_SONAME=%q", builtins))
	nvrtcName := "libnvrtc.so.12"
	if o.nvrtcMajor != 0 {
		nvrtcName = fmt.Sprintf("libnvrtc.so.%d", o.nvrtcMajor)
	}
	libs := []struct{ file, soname, src string }{
		{"libcuda.so.1", "libcuda.so.1", cudaSrc},
		{nvrtcName, nvrtcName, nvrtcSrc},
		{"libcublasLt.so.12", "libcublasLt.so.12", ltSrc},
	}
	if !o.noBuiltins {
		libs = append(libs, struct{ file, soname, src string }{"libnvrtc-builtins.so.12.4", "libnvrtc-builtins.so.12.4", "int nvrtc_builtins_stub;\n"})
	}
	for _, l := range libs {
		src := filepath.Join(dir, l.file+".c")
		if err := os.WriteFile(src, []byte(l.src), 0o644); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"-shared", "-fPIC", "-O0", "-Wall", "-Werror", "-Wno-unused-function", "-o", filepath.Join(dir, l.file),
			"-Wl,-soname," + l.soname}, defs...)
		args = append(args, src, "-ldl")
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("cc %s: %v\n%s", l.file, err, out)
		}
	}
	stubDirs[o] = dir
	return dir
}
