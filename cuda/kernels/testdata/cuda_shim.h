// cuda_shim.h: just enough of CUDA's device environment for
// `g++ -fsyntax-only -include cuda_shim.h` to type-check dszero's kernels
// on a machine without the CUDA toolkit. Nothing here runs.
#pragma once
#include <math.h>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
struct dim3_ { unsigned x, y, z; };
extern dim3_ threadIdx, blockIdx, blockDim, gridDim;
inline void __syncthreads() {}
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned atomicOr(unsigned* p, unsigned v) { unsigned o = *p; *p |= v; return o; }
inline int min(int a, int b) { return a < b ? a : b; }
