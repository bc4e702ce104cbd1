// elementwise.cu: fills, casts, scaling, sums of buffers, the overflow
// flag and the global sums behind gradient norms. Every kernel here is a
// grid-stride loop, so its result does not depend on the launch shape,
// except reduce_sum's, whose fold order is the shape's (see block_sum).

// fill: dst[i] = v, rounded to the storage type.
template <typename D>
__device__ void fill(typename D::T* dst, long long n, float v) {
    typename D::T x = D::st(v);
    GRID_LOOP(i, n) dst[i] = x;
}
extern "C" __global__ void fill_f32(float* dst, long long n, float v) { fill<F32>(dst, n, v); }
extern "C" __global__ void fill_bf16(unsigned short* dst, long long n, float v) { fill<BF16>(dst, n, v); }
extern "C" __global__ void fill_f16(unsigned short* dst, long long n, float v) { fill<F16>(dst, n, v); }

// cast: between float32 and a 16-bit type, round to nearest even down,
// exact up.
template <typename S, typename D>
__device__ void cast(typename D::T* dst, const typename S::T* src, long long n) {
    GRID_LOOP(i, n) dst[i] = D::st(S::ld(src[i]));
}
extern "C" __global__ void cast_f32_bf16(unsigned short* dst, const float* src, long long n) { cast<F32, BF16>(dst, src, n); }
extern "C" __global__ void cast_f32_f16(unsigned short* dst, const float* src, long long n) { cast<F32, F16>(dst, src, n); }
extern "C" __global__ void cast_bf16_f32(float* dst, const unsigned short* src, long long n) { cast<BF16, F32>(dst, src, n); }
extern "C" __global__ void cast_f16_f32(float* dst, const unsigned short* src, long long n) { cast<F16, F32>(dst, src, n); }

// scale: x[i] *= s (loss scaling, unscaling, the clip coefficient).
template <typename D>
__device__ void scale(typename D::T* x, long long n, float s) {
    GRID_LOOP(i, n) x[i] = D::st(D::ld(x[i]) * s);
}
extern "C" __global__ void scale_f32(float* x, long long n, float s) { scale<F32>(x, n, s); }
extern "C" __global__ void scale_bf16(unsigned short* x, long long n, float s) { scale<BF16>(x, n, s); }
extern "C" __global__ void scale_f16(unsigned short* x, long long n, float s) { scale<F16>(x, n, s); }

// scale_dev: x[i] *= *s, with s computed on the device (no host round trip
// between the norm and the clipping).
template <typename D>
__device__ void scale_dev(typename D::T* x, long long n, const float* s) {
    float k = *s;
    GRID_LOOP(i, n) x[i] = D::st(D::ld(x[i]) * k);
}
extern "C" __global__ void scale_dev_f32(float* x, long long n, const float* s) { scale_dev<F32>(x, n, s); }
extern "C" __global__ void scale_dev_bf16(unsigned short* x, long long n, const float* s) { scale_dev<BF16>(x, n, s); }
extern "C" __global__ void scale_dev_f16(unsigned short* x, long long n, const float* s) { scale_dev<F16>(x, n, s); }

// div: x[i] /= d, one IEEE division (tensor.div_: DeepSpeed's
// gradient_predivide_factor and comm's PreAvg), not a multiply by 1/d.
template <typename D>
__device__ void div_(typename D::T* x, long long n, float d) {
    GRID_LOOP(i, n) x[i] = D::st(D::ld(x[i]) / d);
}
extern "C" __global__ void div_f32(float* x, long long n, float d) { div_<F32>(x, n, d); }
extern "C" __global__ void div_bf16(unsigned short* x, long long n, float d) { div_<BF16>(x, n, d); }
extern "C" __global__ void div_f16(unsigned short* x, long long n, float d) { div_<F16>(x, n, d); }

// add: out[i] = a[i] + b[i] (the residual stream); out may be a or b.
template <typename D>
__device__ void add(typename D::T* out, const typename D::T* a, const typename D::T* b, long long n) {
    GRID_LOOP(i, n) out[i] = D::st(D::ld(a[i]) + D::ld(b[i]));
}
extern "C" __global__ void add_f32(float* out, const float* a, const float* b, long long n) { add<F32>(out, a, b, n); }
extern "C" __global__ void add_bf16(unsigned short* out, const unsigned short* a, const unsigned short* b, long long n) { add<BF16>(out, a, b, n); }
extern "C" __global__ void add_f16(unsigned short* out, const unsigned short* a, const unsigned short* b, long long n) { add<F16>(out, a, b, n); }

// accumulate: dst[i] += src[i], in dst's type (gradient accumulation;
// the _f32 forms add a 16-bit gradient into fp32 accumulators).
template <typename S, typename D>
__device__ void accumulate(typename D::T* dst, const typename S::T* src, long long n) {
    GRID_LOOP(i, n) dst[i] = D::st(D::ld(dst[i]) + S::ld(src[i]));
}
extern "C" __global__ void accumulate_f32(float* dst, const float* src, long long n) { accumulate<F32, F32>(dst, src, n); }
extern "C" __global__ void accumulate_bf16(unsigned short* dst, const unsigned short* src, long long n) { accumulate<BF16, BF16>(dst, src, n); }
extern "C" __global__ void accumulate_f16(unsigned short* dst, const unsigned short* src, long long n) { accumulate<F16, F16>(dst, src, n); }
extern "C" __global__ void accumulate_bf16_f32(float* dst, const unsigned short* src, long long n) { accumulate<BF16, F32>(dst, src, n); }
extern "C" __global__ void accumulate_f16_f32(float* dst, const unsigned short* src, long long n) { accumulate<F16, F32>(dst, src, n); }

// reduce_sum: partial[b] = the sum over block b's elements of x (square
// 0) or x² (square 1), in float64: each thread folds i = g, g+G, g+2G, ...
// (g its global index, G the grid's thread count), then block_sum. The
// float64 accumulation is what DeepSpeed's ZeRO gradient norms use
// (get_grad_norm_direct: .double().norm(2)); sum_f64 finishes the sum.
template <typename D>
__device__ void reduce_sum(double* partial, const typename D::T* x, long long n, int square) {
    __shared__ double s[MAX_BLOCK];
    double acc = 0.0;
    GRID_LOOP(i, n) {
        double v = (double)D::ld(x[i]);
        acc = acc + (square ? v * v : v);
    }
    double r = block_sum(acc, s);
    if (threadIdx.x == 0) partial[blockIdx.x] = r;
}
extern "C" __global__ void reduce_sum_f32(double* partial, const float* x, long long n, int square) { reduce_sum<F32>(partial, x, n, square); }
extern "C" __global__ void reduce_sum_bf16(double* partial, const unsigned short* x, long long n, int square) { reduce_sum<BF16>(partial, x, n, square); }
extern "C" __global__ void reduce_sum_f16(double* partial, const unsigned short* x, long long n, int square) { reduce_sum<F16>(partial, x, n, square); }

// sum_f64: out[0] = the sum of partial[0:n], one block: thread t folds t,
// t+B, ..., then block_sum. Launch with one block.
extern "C" __global__ void sum_f64(double* out, const double* partial, int n) {
    __shared__ double s[MAX_BLOCK];
    double acc = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc = acc + partial[i];
    double r = block_sum(acc, s);
    if (threadIdx.x == 0) out[0] = r;
}

// all_finite: sets *flag to 1 if any element is an Inf or a NaN (the fp16
// loss scaler's overflow check); *flag is left alone otherwise, so clear
// it first. Each thread sets it at most once, and every write stores the
// same value, so the outcome does not depend on the order.
template <typename D>
__device__ void all_finite(unsigned int* flag, const typename D::T* x, long long n) {
    bool bad = false;
    GRID_LOOP(i, n) bad = bad || ((__float_as_uint(D::ld(x[i])) & 0x7F800000u) == 0x7F800000u);
    if (bad) atomicOr(flag, 1u);
}
extern "C" __global__ void all_finite_f32(unsigned int* flag, const float* x, long long n) { all_finite<F32>(flag, x, n); }
extern "C" __global__ void all_finite_bf16(unsigned int* flag, const unsigned short* x, long long n) { all_finite<BF16>(flag, x, n); }
extern "C" __global__ void all_finite_f16(unsigned int* flag, const unsigned short* x, long long n) { all_finite<F16>(flag, x, n); }

// reduce_n: the fixed-order n-way reduction of ranks sharing one GPU,
// package comm's Reduce contract bit for bit. srcs holds nsrc device
// addresses. op 0 Sum, 1 Avg, 2 PreAvg. With x_k = srcs[k][i]:
//   PreAvg: x_k = rnd(x_k / nsrc)
//   s = x_0; s = rnd(s + x_k) for k = 1..nsrc-1, in rank order
//   Avg: s = s / nsrc
//   dst[i] = st(s)
// rnd is a 16-bit rounding (identity for fp32). One source is a bit copy.
// dst may be srcs[0] or any source element for element.
template <typename D>
__device__ void reduce_n(typename D::T* dst, const unsigned long long* srcs, int nsrc, long long n, int op) {
    float div = (float)nsrc;
    GRID_LOOP(i, n) {
        if (nsrc == 1) {
            dst[i] = ((const typename D::T*)srcs[0])[i];
            continue;
        }
        float s = D::ld(((const typename D::T*)srcs[0])[i]);
        if (op == 2) s = D::rnd(s / div);
        for (int k = 1; k < nsrc; k++) {
            float x = D::ld(((const typename D::T*)srcs[k])[i]);
            if (op == 2) x = D::rnd(x / div);
            s = D::rnd(s + x);
        }
        if (op == 1) s = s / div;
        dst[i] = D::st(s);
    }
}
extern "C" __global__ void reduce_n_f32(float* dst, const unsigned long long* srcs, int nsrc, long long n, int op) { reduce_n<F32>(dst, srcs, nsrc, n, op); }
extern "C" __global__ void reduce_n_bf16(unsigned short* dst, const unsigned long long* srcs, int nsrc, long long n, int op) { reduce_n<BF16>(dst, srcs, nsrc, n, op); }
extern "C" __global__ void reduce_n_f16(unsigned short* dst, const unsigned long long* srcs, int nsrc, long long n, int op) { reduce_n<F16>(dst, srcs, nsrc, n, op); }
