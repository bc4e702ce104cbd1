// norm.cu: LayerNorm and RMSNorm, forward and backward, and the
// deterministic column sums behind every weight and bias gradient.
//
// Row kernels run one block per row (rows beyond the grid loop by
// gridDim.x); row moments are folded in float64 with block_sum, as the
// CPU model (package model/gpt) folds them in float64, and the rest is
// float32 in PyTorch's order. Parameter gradients are never accumulated
// with atomics: a *_partial kernel sums a chunk of rows per column in
// float64 into partial[chunk][column], and colsum_finish adds the chunks
// in order, so every run gives the same bits.

// layernorm_fwd: out = (x*rstd - mean*rstd)*w + b over each row of C,
// rstd = 1/sqrt(var + eps) with the biased variance; mean and rstd (N
// floats, may be null) are kept for backward. b may be null.
template <typename D>
__device__ void layernorm_fwd(typename D::T* out, float* mean, float* rstd, const typename D::T* inp,
                              const typename D::T* w, const typename D::T* b, int N, int C, float eps) {
    __shared__ double s[MAX_BLOCK];
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        const typename D::T* x = inp + (long long)row * C;
        double acc = 0.0;
        for (int i = threadIdx.x; i < C; i += blockDim.x) acc = acc + (double)D::ld(x[i]);
        double mu = block_sum(acc, s) / (double)C;
        acc = 0.0;
        for (int i = threadIdx.x; i < C; i += blockDim.x) {
            double d = (double)D::ld(x[i]) - mu;
            acc = acc + d * d;
        }
        double ss = block_sum(acc, s);
        float mu32 = (float)mu, var32 = (float)(ss / (double)C);
        float rs = 1.0f / sqrtf(var32 + eps);
        float shift = -rs * mu32;
        typename D::T* o = out + (long long)row * C;
        for (int i = threadIdx.x; i < C; i += blockDim.x) {
            float y = (D::ld(x[i]) * rs + shift) * D::ld(w[i]);
            if (b) y = y + D::ld(b[i]);
            o[i] = D::st(y);
        }
        if (threadIdx.x == 0) {
            if (mean) mean[row] = mu32;
            if (rstd) rstd[row] = rs;
        }
    }
}
extern "C" __global__ void layernorm_fwd_f32(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, int N, int C, float eps) { layernorm_fwd<F32>(out, mean, rstd, inp, w, b, N, C, eps); }
extern "C" __global__ void layernorm_fwd_bf16(unsigned short* out, float* mean, float* rstd, const unsigned short* inp, const unsigned short* w, const unsigned short* b, int N, int C, float eps) { layernorm_fwd<BF16>(out, mean, rstd, inp, w, b, N, C, eps); }
extern "C" __global__ void layernorm_fwd_f16(unsigned short* out, float* mean, float* rstd, const unsigned short* inp, const unsigned short* w, const unsigned short* b, int N, int C, float eps) { layernorm_fwd<F16>(out, mean, rstd, inp, w, b, N, C, eps); }

// layernorm_bwd writes dinp for each row (dw and db come from
// layernorm_bwd_partial):
//   dyw = dy*w;  k1 = (Σdyw·mean - Σdyw·x)·rstd³/C;  k2 = -k1·mean - Σdyw·rstd/C
//   dinp = rstd·dy·w + k1·x + k2
template <typename D>
__device__ void layernorm_bwd(typename D::T* dinp, const typename D::T* dout, const typename D::T* inp,
                              const typename D::T* w, const float* mean, const float* rstd, int N, int C) {
    __shared__ double s[MAX_BLOCK];
    float invC = 1.0f / (float)C;
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        const typename D::T* x = inp + (long long)row * C;
        const typename D::T* dy = dout + (long long)row * C;
        double ds = 0.0, dbs = 0.0;
        for (int i = threadIdx.x; i < C; i += blockDim.x) {
            double dyw = (double)(D::ld(dy[i]) * D::ld(w[i]));
            ds = ds + dyw * (double)D::ld(x[i]);
            dbs = dbs + dyw;
        }
        float sds = (float)block_sum(ds, s);
        float sdb = (float)block_sum(dbs, s);
        float a = rstd[row], mu = mean[row];
        float k1 = (sdb * mu - sds) * a * a * a * invC;
        float k2 = -k1 * mu - sdb * a * invC;
        typename D::T* dx = dinp + (long long)row * C;
        for (int i = threadIdx.x; i < C; i += blockDim.x) {
            dx[i] = D::st(a * D::ld(dy[i]) * D::ld(w[i]) + k1 * D::ld(x[i]) + k2);
        }
    }
}
extern "C" __global__ void layernorm_bwd_f32(float* dinp, const float* dout, const float* inp, const float* w, const float* mean, const float* rstd, int N, int C) { layernorm_bwd<F32>(dinp, dout, inp, w, mean, rstd, N, C); }
extern "C" __global__ void layernorm_bwd_bf16(unsigned short* dinp, const unsigned short* dout, const unsigned short* inp, const unsigned short* w, const float* mean, const float* rstd, int N, int C) { layernorm_bwd<BF16>(dinp, dout, inp, w, mean, rstd, N, C); }
extern "C" __global__ void layernorm_bwd_f16(unsigned short* dinp, const unsigned short* dout, const unsigned short* inp, const unsigned short* w, const float* mean, const float* rstd, int N, int C) { layernorm_bwd<F16>(dinp, dout, inp, w, mean, rstd, N, C); }

// Column-partial kernels: thread (blockIdx.x*blockDim.x + threadIdx.x) is
// column c, blockIdx.y (looping by gridDim.y) is chunk k of rows
// [k*rpc, min(N, (k+1)*rpc)), folded in row order in float64.

// layernorm_bwd_partial: partial[k][c] = Σ dy·(x·rstd - mean·rstd) (dw),
// partial[k][C+c] = Σ dy (db); partial is nchunks × 2C.
template <typename D>
__device__ void layernorm_bwd_partial(double* partial, const typename D::T* dout, const typename D::T* inp,
                                      const float* mean, const float* rstd, int N, int C, int rpc) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int nchunks = (N + rpc - 1) / rpc;
    for (int k = blockIdx.y; k < nchunks; k += gridDim.y) {
        double aw = 0.0, ab = 0.0;
        int end = min(N, (k + 1) * rpc);
        for (int r = k * rpc; r < end; r++) {
            float a = rstd[r], shift = -a * mean[r];
            float dy = D::ld(dout[(long long)r * C + c]);
            aw = aw + (double)(dy * (D::ld(inp[(long long)r * C + c]) * a + shift));
            ab = ab + (double)dy;
        }
        partial[(long long)k * 2 * C + c] = aw;
        partial[(long long)k * 2 * C + C + c] = ab;
    }
}
extern "C" __global__ void layernorm_bwd_partial_f32(double* partial, const float* dout, const float* inp, const float* mean, const float* rstd, int N, int C, int rpc) { layernorm_bwd_partial<F32>(partial, dout, inp, mean, rstd, N, C, rpc); }
extern "C" __global__ void layernorm_bwd_partial_bf16(double* partial, const unsigned short* dout, const unsigned short* inp, const float* mean, const float* rstd, int N, int C, int rpc) { layernorm_bwd_partial<BF16>(partial, dout, inp, mean, rstd, N, C, rpc); }
extern "C" __global__ void layernorm_bwd_partial_f16(double* partial, const unsigned short* dout, const unsigned short* inp, const float* mean, const float* rstd, int N, int C, int rpc) { layernorm_bwd_partial<F16>(partial, dout, inp, mean, rstd, N, C, rpc); }

// bias_grad_partial: partial[k][c] = Σ dout[r][c] over chunk k; partial is
// nchunks × OC.
template <typename D>
__device__ void bias_grad_partial(double* partial, const typename D::T* dout, int N, int OC, int rpc) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= OC) return;
    int nchunks = (N + rpc - 1) / rpc;
    for (int k = blockIdx.y; k < nchunks; k += gridDim.y) {
        double acc = 0.0;
        int end = min(N, (k + 1) * rpc);
        for (int r = k * rpc; r < end; r++) acc = acc + (double)D::ld(dout[(long long)r * OC + c]);
        partial[(long long)k * OC + c] = acc;
    }
}
extern "C" __global__ void bias_grad_partial_f32(double* partial, const float* dout, int N, int OC, int rpc) { bias_grad_partial<F32>(partial, dout, N, OC, rpc); }
extern "C" __global__ void bias_grad_partial_bf16(double* partial, const unsigned short* dout, int N, int OC, int rpc) { bias_grad_partial<BF16>(partial, dout, N, OC, rpc); }
extern "C" __global__ void bias_grad_partial_f16(double* partial, const unsigned short* dout, int N, int OC, int rpc) { bias_grad_partial<F16>(partial, dout, N, OC, rpc); }

// colsum_finish: s = Σ_k partial[k*stride + c] in chunk order (float64),
// then dst[c] = st(s), or with accumulate dst[c] = st(dst[c] + rnd(s)): the
// fresh gradient rounded to dst's type and added, as PyTorch's
// AccumulateGrad adds a new .grad. One thread per column (grid-stride).
template <typename D>
__device__ void colsum_finish(typename D::T* dst, const double* partial, int nchunks, int width, int stride, int accumulate) {
    GRID_LOOP(c, width) {
        double s = 0.0;
        for (int k = 0; k < nchunks; k++) s = s + partial[(long long)k * stride + c];
        float f = (float)s;
        dst[c] = accumulate ? D::st(D::ld(dst[c]) + D::rnd(f)) : D::st(f);
    }
}
extern "C" __global__ void colsum_finish_f32(float* dst, const double* partial, int nchunks, int width, int stride, int accumulate) { colsum_finish<F32>(dst, partial, nchunks, width, stride, accumulate); }
extern "C" __global__ void colsum_finish_bf16(unsigned short* dst, const double* partial, int nchunks, int width, int stride, int accumulate) { colsum_finish<BF16>(dst, partial, nchunks, width, stride, accumulate); }
extern "C" __global__ void colsum_finish_f16(unsigned short* dst, const double* partial, int nchunks, int width, int stride, int accumulate) { colsum_finish<F16>(dst, partial, nchunks, width, stride, accumulate); }

// rmsnorm_fwd: r = 1/sqrt(mean(x²) + eps) (mean in float64), n = x·r,
// rounded to the storage type as Llama's RMSNorm does
// (hidden.to(input_dtype) before the weight), out = n·w; rrms (N, may be
// null) keeps r.
template <typename D>
__device__ void rmsnorm_fwd(typename D::T* out, float* rrms, const typename D::T* inp, const typename D::T* w,
                            int N, int C, float eps) {
    __shared__ double s[MAX_BLOCK];
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        const typename D::T* x = inp + (long long)row * C;
        double acc = 0.0;
        for (int i = threadIdx.x; i < C; i += blockDim.x) {
            double v = (double)D::ld(x[i]);
            acc = acc + v * v;
        }
        float ms = (float)(block_sum(acc, s) / (double)C);
        float r = 1.0f / sqrtf(ms + eps);
        typename D::T* o = out + (long long)row * C;
        for (int i = threadIdx.x; i < C; i += blockDim.x) o[i] = D::st(D::rnd(D::ld(x[i]) * r) * D::ld(w[i]));
        if (threadIdx.x == 0 && rrms) rrms[row] = r;
    }
}
extern "C" __global__ void rmsnorm_fwd_f32(float* out, float* rrms, const float* inp, const float* w, int N, int C, float eps) { rmsnorm_fwd<F32>(out, rrms, inp, w, N, C, eps); }
extern "C" __global__ void rmsnorm_fwd_bf16(unsigned short* out, float* rrms, const unsigned short* inp, const unsigned short* w, int N, int C, float eps) { rmsnorm_fwd<BF16>(out, rrms, inp, w, N, C, eps); }
extern "C" __global__ void rmsnorm_fwd_f16(unsigned short* out, float* rrms, const unsigned short* inp, const unsigned short* w, int N, int C, float eps) { rmsnorm_fwd<F16>(out, rrms, inp, w, N, C, eps); }

// rmsnorm_bwd: with dn = dy·w, dinp = r·dn - x·(Σdn·x)·r³/C.
template <typename D>
__device__ void rmsnorm_bwd(typename D::T* dinp, const typename D::T* dout, const typename D::T* inp,
                            const typename D::T* w, const float* rrms, int N, int C) {
    __shared__ double s[MAX_BLOCK];
    float invC = 1.0f / (float)C;
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        const typename D::T* x = inp + (long long)row * C;
        const typename D::T* dy = dout + (long long)row * C;
        double acc = 0.0;
        for (int i = threadIdx.x; i < C; i += blockDim.x) {
            acc = acc + (double)(D::ld(dy[i]) * D::ld(w[i])) * (double)D::ld(x[i]);
        }
        float sd = (float)block_sum(acc, s);
        float r = rrms[row];
        float k = sd * r * r * r * invC;
        typename D::T* dx = dinp + (long long)row * C;
        for (int i = threadIdx.x; i < C; i += blockDim.x) {
            dx[i] = D::st(r * (D::ld(dy[i]) * D::ld(w[i])) - k * D::ld(x[i]));
        }
    }
}
extern "C" __global__ void rmsnorm_bwd_f32(float* dinp, const float* dout, const float* inp, const float* w, const float* rrms, int N, int C) { rmsnorm_bwd<F32>(dinp, dout, inp, w, rrms, N, C); }
extern "C" __global__ void rmsnorm_bwd_bf16(unsigned short* dinp, const unsigned short* dout, const unsigned short* inp, const unsigned short* w, const float* rrms, int N, int C) { rmsnorm_bwd<BF16>(dinp, dout, inp, w, rrms, N, C); }
extern "C" __global__ void rmsnorm_bwd_f16(unsigned short* dinp, const unsigned short* dout, const unsigned short* inp, const unsigned short* w, const float* rrms, int N, int C) { rmsnorm_bwd<F16>(dinp, dout, inp, w, rrms, N, C); }

// rmsnorm_bwd_partial: partial[k][c] = Σ dy·rnd(x·r) over chunk k (dw);
// partial is nchunks × C.
template <typename D>
__device__ void rmsnorm_bwd_partial(double* partial, const typename D::T* dout, const typename D::T* inp,
                                    const float* rrms, int N, int C, int rpc) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int nchunks = (N + rpc - 1) / rpc;
    for (int k = blockIdx.y; k < nchunks; k += gridDim.y) {
        double acc = 0.0;
        int end = min(N, (k + 1) * rpc);
        for (int r = k * rpc; r < end; r++) {
            long long j = (long long)r * C + c;
            acc = acc + (double)(D::ld(dout[j]) * D::rnd(D::ld(inp[j]) * rrms[r]));
        }
        partial[(long long)k * C + c] = acc;
    }
}
extern "C" __global__ void rmsnorm_bwd_partial_f32(double* partial, const float* dout, const float* inp, const float* rrms, int N, int C, int rpc) { rmsnorm_bwd_partial<F32>(partial, dout, inp, rrms, N, C, rpc); }
extern "C" __global__ void rmsnorm_bwd_partial_bf16(double* partial, const unsigned short* dout, const unsigned short* inp, const float* rrms, int N, int C, int rpc) { rmsnorm_bwd_partial<BF16>(partial, dout, inp, rrms, N, C, rpc); }
extern "C" __global__ void rmsnorm_bwd_partial_f16(double* partial, const unsigned short* dout, const unsigned short* inp, const float* rrms, int N, int C, int rpc) { rmsnorm_bwd_partial<F16>(partial, dout, inp, rrms, N, C, rpc); }
