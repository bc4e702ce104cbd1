// prelude.cu: types, conversions and reductions every dszero kernel
// uses. The kernels are one header-free translation unit: no CUDA headers
// (CUDA 13's need CCCL include paths under NVRTC), 16-bit values held as
// their bit patterns in unsigned short. It is compiled with --fmad=false,
// so a*b+c is two roundings unless a kernel writes fmaf: the Go reference
// kernels perform the same float operations in the same order and get the
// same bits (expf, logf, tanhf are CUDA's and differ by an ulp or two).

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define INF_F __int_as_float(0x7f800000)

// f32_to_bf16 rounds to nearest even; every NaN becomes 0x7FC0
// (package half's BF16FromF32).
__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u32 x = __float_as_uint(f);
    u16 r = (u16)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) r = 0x7FC0;
    return r;
}

__device__ __forceinline__ float bf16_to_f32(u16 b) { return __uint_as_float((u32)b << 16); }

// f32_to_f16 rounds to nearest even, overflow to ±Inf, NaN to the quiet
// NaN with the input's sign (package half's F16FromF32, same steps).
__device__ __forceinline__ u16 f32_to_f16(float f) {
    u32 x = __float_as_uint(f);
    u16 sign = (u16)((x >> 16) & 0x8000u);
    u32 a = x & 0x7FFFFFFFu;
    if (a >= 0x47800000u) {             // |f| >= 65536: not finite in fp16
        return sign | (a > 0x7F800000u ? 0x7E00 : 0x7C00);
    }
    if (a >= 0x38800000u) {             // |f| >= 2^-14: a normal fp16 result
        a += 0xFFFu + ((a >> 13) & 1u); // round the fraction to 10 bits, ties to even
        return sign | (u16)((a - 0x38000000u) >> 13);
    }
    // Subnormal: adding 0.5 leaves float32's last fraction bit worth
    // 2^-24, so the float adder rounds |f| to the fp16 subnormal grid.
    float s = __uint_as_float(a) + 0.5f;
    return sign | (u16)(__float_as_uint(s) - 0x3F000000u);
}

__device__ __forceinline__ float f16_to_f32(u16 h) {
    u32 sign = (u32)(h & 0x8000u) << 16;
    u32 e = (h >> 10) & 0x1Fu, frac = h & 0x3FFu;
    if (e == 0x1Fu) return __uint_as_float(sign | 0x7F800000u | (frac ? (0x400000u | (frac << 13)) : 0u));
    if (e == 0u) return __uint_as_float(sign | __float_as_uint((float)frac * 5.9604644775390625e-8f));
    return __uint_as_float(sign | ((e << 23) + 0x38000000u) | (frac << 13));
}

// A storage type: T is what memory holds, ld widens exactly, st rounds to
// nearest even, rnd is st then ld (a 16-bit store emulated in float).
struct F32 {
    typedef float T;
    static __device__ __forceinline__ float ld(float v) { return v; }
    static __device__ __forceinline__ float st(float v) { return v; }
    static __device__ __forceinline__ float rnd(float v) { return v; }
};
struct BF16 {
    typedef u16 T;
    static __device__ __forceinline__ float ld(u16 v) { return bf16_to_f32(v); }
    static __device__ __forceinline__ u16 st(float v) { return f32_to_bf16(v); }
    static __device__ __forceinline__ float rnd(float v) { return bf16_to_f32(f32_to_bf16(v)); }
};
struct F16 {
    typedef u16 T;
    static __device__ __forceinline__ float ld(u16 v) { return f16_to_f32(v); }
    static __device__ __forceinline__ u16 st(float v) { return f32_to_f16(v); }
    static __device__ __forceinline__ float rnd(float v) { return f16_to_f32(f32_to_f16(v)); }
};

// Grid-stride loop over [0, n): element i goes to thread i mod (grid size).
#define GRID_LOOP(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// The block reductions. blockDim.x is a power of two (at most 1024);
// thread t has folded its own elements (t, t+B, t+2B, ...) in order into
// v. The tree adds s[t] + s[t+h] for h = B/2, B/4, ..., 1, and every
// thread gets s[0]. The Go reference kernels (blockSum) fold in exactly
// this order.
template <typename A>
__device__ __forceinline__ A block_sum(A v, A* s) {
    unsigned t = threadIdx.x;
    s[t] = v;
    __syncthreads();
    for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
        if (t < h) s[t] = s[t] + s[t + h];
        __syncthreads();
    }
    A r = s[0];
    __syncthreads();
    return r;
}

// block_max folds with (a > b ? a : b): a NaN never wins a comparison, so
// the result depends only on the order, which is fixed.
__device__ __forceinline__ float block_max(float v, float* s) {
    unsigned t = threadIdx.x;
    s[t] = v;
    __syncthreads();
    for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
        if (t < h) {
            float a = s[t], b = s[t + h];
            s[t] = a > b ? a : b;
        }
        __syncthreads();
    }
    float r = s[0];
    __syncthreads();
    return r;
}

#define MAX_BLOCK 1024
