// attn.cu: the pieces of materialised attention around cuBLASLt's
// batched GEMMs: head split and merge, GQA's key/value repeat, and the
// causal softmax with its backward.
//
//   qkv (B,T,(NH+2·NKV)·HD) --qkv_split--> q (B,NH,T,HD), k, v (B,NKV,T,HD)
//   k, v --repeat_kv--> (B,NH,T,HD)            (NKV < NH only)
//   pre = q·kᵀ (GEMM, batch B·NH)  --softmax_causal_fwd(scale)--> att
//   y = att·v (GEMM) (B,NH,T,HD) --permute_0213--> (B,T,NH,HD)
// Backward runs the mirror images: permute_0213 back, the GEMMs,
// softmax_causal_bwd, repeat_kv_bwd (sums the repeats), qkv_merge.

// permute_0213: out[a][c][b][d] = inp[a][b][c][d] for inp (A,Bd,Cd,Dd).
template <typename D>
__device__ void permute_0213(typename D::T* out, const typename D::T* inp, int A, int Bd, int Cd, int Dd) {
    long long n = (long long)A * Bd * Cd * Dd;
    GRID_LOOP(i, n) { // i indexes out (A, Cd, Bd, Dd)
        int d = (int)(i % Dd);
        long long r = i / Dd;
        int b = (int)(r % Bd);
        r /= Bd;
        int c = (int)(r % Cd);
        long long a = r / Cd;
        out[i] = inp[((a * Bd + b) * Cd + c) * Dd + d];
    }
}
extern "C" __global__ void permute_0213_f32(float* out, const float* inp, int A, int Bd, int Cd, int Dd) { permute_0213<F32>(out, inp, A, Bd, Cd, Dd); }
extern "C" __global__ void permute_0213_bf16(unsigned short* out, const unsigned short* inp, int A, int Bd, int Cd, int Dd) { permute_0213<BF16>(out, inp, A, Bd, Cd, Dd); }
extern "C" __global__ void permute_0213_f16(unsigned short* out, const unsigned short* inp, int A, int Bd, int Cd, int Dd) { permute_0213<F16>(out, inp, A, Bd, Cd, Dd); }

// qkv_split: qkv row (b,t) holds NH query heads, then NKV key heads, then
// NKV value heads, each HD wide.
template <typename D>
__device__ void qkv_split(typename D::T* q, typename D::T* k, typename D::T* v, const typename D::T* qkv, int B, int T,
                          int NH, int NKV, int HD) {
    int W = (NH + 2 * NKV) * HD;
    long long n = (long long)B * T * W;
    GRID_LOOP(i, n) { // i indexes qkv
        int col = (int)(i % W);
        long long bt = i / W;
        int t = (int)(bt % T);
        long long b = bt / T;
        int head = col / HD, d = col % HD;
        if (head < NH) q[((b * NH + head) * T + t) * HD + d] = qkv[i];
        else if (head < NH + NKV) k[((b * NKV + head - NH) * T + t) * HD + d] = qkv[i];
        else v[((b * NKV + head - NH - NKV) * T + t) * HD + d] = qkv[i];
    }
}
extern "C" __global__ void qkv_split_f32(float* q, float* k, float* v, const float* qkv, int B, int T, int NH, int NKV, int HD) { qkv_split<F32>(q, k, v, qkv, B, T, NH, NKV, HD); }
extern "C" __global__ void qkv_split_bf16(unsigned short* q, unsigned short* k, unsigned short* v, const unsigned short* qkv, int B, int T, int NH, int NKV, int HD) { qkv_split<BF16>(q, k, v, qkv, B, T, NH, NKV, HD); }
extern "C" __global__ void qkv_split_f16(unsigned short* q, unsigned short* k, unsigned short* v, const unsigned short* qkv, int B, int T, int NH, int NKV, int HD) { qkv_split<F16>(q, k, v, qkv, B, T, NH, NKV, HD); }

// qkv_merge is qkv_split's inverse (the backward pass: dq, dk, dv → dqkv).
template <typename D>
__device__ void qkv_merge(typename D::T* qkv, const typename D::T* q, const typename D::T* k, const typename D::T* v, int B,
                          int T, int NH, int NKV, int HD) {
    int W = (NH + 2 * NKV) * HD;
    long long n = (long long)B * T * W;
    GRID_LOOP(i, n) {
        int col = (int)(i % W);
        long long bt = i / W;
        int t = (int)(bt % T);
        long long b = bt / T;
        int head = col / HD, d = col % HD;
        if (head < NH) qkv[i] = q[((b * NH + head) * T + t) * HD + d];
        else if (head < NH + NKV) qkv[i] = k[((b * NKV + head - NH) * T + t) * HD + d];
        else qkv[i] = v[((b * NKV + head - NH - NKV) * T + t) * HD + d];
    }
}
extern "C" __global__ void qkv_merge_f32(float* qkv, const float* q, const float* k, const float* v, int B, int T, int NH, int NKV, int HD) { qkv_merge<F32>(qkv, q, k, v, B, T, NH, NKV, HD); }
extern "C" __global__ void qkv_merge_bf16(unsigned short* qkv, const unsigned short* q, const unsigned short* k, const unsigned short* v, int B, int T, int NH, int NKV, int HD) { qkv_merge<BF16>(qkv, q, k, v, B, T, NH, NKV, HD); }
extern "C" __global__ void qkv_merge_f16(unsigned short* qkv, const unsigned short* q, const unsigned short* k, const unsigned short* v, int B, int T, int NH, int NKV, int HD) { qkv_merge<F16>(qkv, q, k, v, B, T, NH, NKV, HD); }

// repeat_kv: out (B, NKV·rep, THD) with out[b][h] = inp[b][h/rep], THD = T·HD.
template <typename D>
__device__ void repeat_kv(typename D::T* out, const typename D::T* inp, int B, int NKV, int rep, int THD) {
    long long n = (long long)B * NKV * rep * THD;
    GRID_LOOP(i, n) {
        int e = (int)(i % THD);
        long long bh = i / THD;
        int h = (int)(bh % (NKV * rep));
        long long b = bh / (NKV * rep);
        out[i] = inp[(b * NKV + h / rep) * THD + e];
    }
}
extern "C" __global__ void repeat_kv_f32(float* out, const float* inp, int B, int NKV, int rep, int THD) { repeat_kv<F32>(out, inp, B, NKV, rep, THD); }
extern "C" __global__ void repeat_kv_bf16(unsigned short* out, const unsigned short* inp, int B, int NKV, int rep, int THD) { repeat_kv<BF16>(out, inp, B, NKV, rep, THD); }
extern "C" __global__ void repeat_kv_f16(unsigned short* out, const unsigned short* inp, int B, int NKV, int rep, int THD) { repeat_kv<F16>(out, inp, B, NKV, rep, THD); }

// repeat_kv_bwd: dinp[b][g] = Σ_r dout[b][g·rep + r], summed in float in
// r order and rounded once.
template <typename D>
__device__ void repeat_kv_bwd(typename D::T* dinp, const typename D::T* dout, int B, int NKV, int rep, int THD) {
    long long n = (long long)B * NKV * THD;
    GRID_LOOP(i, n) {
        int e = (int)(i % THD);
        long long bg = i / THD;
        float s = 0.0f;
        for (int r = 0; r < rep; r++) s = s + D::ld(dout[(bg * rep + r) * THD + e]);
        dinp[i] = D::st(s);
    }
}
extern "C" __global__ void repeat_kv_bwd_f32(float* dinp, const float* dout, int B, int NKV, int rep, int THD) { repeat_kv_bwd<F32>(dinp, dout, B, NKV, rep, THD); }
extern "C" __global__ void repeat_kv_bwd_bf16(unsigned short* dinp, const unsigned short* dout, int B, int NKV, int rep, int THD) { repeat_kv_bwd<BF16>(dinp, dout, B, NKV, rep, THD); }
extern "C" __global__ void repeat_kv_bwd_f16(unsigned short* dinp, const unsigned short* dout, int B, int NKV, int rep, int THD) { repeat_kv_bwd<F16>(dinp, dout, B, NKV, rep, THD); }

// softmax_causal_fwd: row (bh, t) of pre (BH, T, T) → att, over j ≤ t:
// v_j = scale·pre_j, m = block_max(v), S = block_sum(e^(v_j - m)) (float),
// att_j = e^(v_j - m)/S; att_j = 0 for j > t. One block per row; att may
// be pre.
template <typename D>
__device__ void softmax_causal_fwd(typename D::T* att, const typename D::T* pre, int BH, int T, float scale) {
    __shared__ float s[MAX_BLOCK];
    long long rows = (long long)BH * T;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        int t = (int)(row % T);
        const typename D::T* x = pre + row * T;
        typename D::T* y = att + row * T;
        float m = -INF_F;
        for (int j = threadIdx.x; j <= t; j += blockDim.x) {
            float v = scale * D::ld(x[j]);
            m = v > m ? v : m;
        }
        m = block_max(m, s);
        float acc = 0.0f;
        for (int j = threadIdx.x; j <= t; j += blockDim.x) acc = acc + expf(scale * D::ld(x[j]) - m);
        float sum = block_sum(acc, s);
        for (int j = threadIdx.x; j < T; j += blockDim.x) {
            y[j] = D::st(j <= t ? expf(scale * D::ld(x[j]) - m) / sum : 0.0f);
        }
    }
}
extern "C" __global__ void softmax_causal_fwd_f32(float* att, const float* pre, int BH, int T, float scale) { softmax_causal_fwd<F32>(att, pre, BH, T, scale); }
extern "C" __global__ void softmax_causal_fwd_bf16(unsigned short* att, const unsigned short* pre, int BH, int T, float scale) { softmax_causal_fwd<BF16>(att, pre, BH, T, scale); }
extern "C" __global__ void softmax_causal_fwd_f16(unsigned short* att, const unsigned short* pre, int BH, int T, float scale) { softmax_causal_fwd<F16>(att, pre, BH, T, scale); }

// softmax_causal_bwd: dpre_j = scale·(att_j·(datt_j - Σ_k att_k·datt_k))
// for j ≤ t (the sum folded with block_sum in float), 0 beyond. dpre may
// be datt.
template <typename D>
__device__ void softmax_causal_bwd(typename D::T* dpre, const typename D::T* datt, const typename D::T* att, int BH, int T,
                                   float scale) {
    __shared__ float s[MAX_BLOCK];
    long long rows = (long long)BH * T;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        int t = (int)(row % T);
        const typename D::T* a = att + row * T;
        const typename D::T* da = datt + row * T;
        typename D::T* dp = dpre + row * T;
        float acc = 0.0f;
        for (int j = threadIdx.x; j <= t; j += blockDim.x) acc = acc + D::ld(a[j]) * D::ld(da[j]);
        float dot = block_sum(acc, s);
        for (int j = threadIdx.x; j < T; j += blockDim.x) {
            dp[j] = D::st(j <= t ? scale * (D::ld(a[j]) * (D::ld(da[j]) - dot)) : 0.0f);
        }
    }
}
extern "C" __global__ void softmax_causal_bwd_f32(float* dpre, const float* datt, const float* att, int BH, int T, float scale) { softmax_causal_bwd<F32>(dpre, datt, att, BH, T, scale); }
extern "C" __global__ void softmax_causal_bwd_bf16(unsigned short* dpre, const unsigned short* datt, const unsigned short* att, int BH, int T, float scale) { softmax_causal_bwd<BF16>(dpre, datt, att, BH, T, scale); }
extern "C" __global__ void softmax_causal_bwd_f16(unsigned short* dpre, const unsigned short* datt, const unsigned short* att, int BH, int T, float scale) { softmax_causal_bwd<F16>(dpre, datt, att, BH, T, scale); }
