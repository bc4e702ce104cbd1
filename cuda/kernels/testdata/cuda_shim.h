// cuda_shim.h: just enough of CUDA's device environment to compile
// dszero's kernels as host C++: `g++ -fsyntax-only -include cuda_shim.h`
// type-checks them, and testdata/host_launch.cpp runs them, one OS thread
// per CUDA thread with a barrier for __syncthreads, to check them against
// the Go reference kernels without a GPU.
#pragma once
#include <math.h>
#include <string.h>
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
struct dim3_ { unsigned x, y, z; };
extern thread_local dim3_ threadIdx, blockIdx;
extern dim3_ blockDim, gridDim;
void __syncthreads();
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline unsigned atomicOr(unsigned* p, unsigned v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
inline int min(int a, int b) { return a < b ? a : b; }
