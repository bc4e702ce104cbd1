// loss.cu: the fused softmax cross-entropy over the vocabulary, forward
// and backward in one pass over the logits.
//
// Row r of logits (N, Vp; only the first V columns are real, the rest is
// padding) with target t:
//   m = block_max(x_j), S = block_sum(e^(x_j - m)) (float), l = log S
//   losses[r] = -((x_t - m) - l)                  (package model/gpt's order)
//   dlogits_j = e^((x_j - m) - l)·dloss, then dlogits_t -= dloss; 0 for j ≥ V
// A row whose target is ignore_index has loss 0 and zero gradients (torch's
// ignore_index=-100); a target outside [0, V) otherwise gives a NaN loss.
// dlogits may be logits (in place) or null (forward only). One block per
// row.
template <typename D>
__device__ void xent_fwd_bwd(typename D::T* dlogits, float* losses, const typename D::T* logits, const int* targets,
                             int N, int V, int Vp, float dloss, int ignore_index) {
    __shared__ float s[MAX_BLOCK];
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        const typename D::T* x = logits + (long long)row * Vp;
        int t = targets[row];
        if (t == ignore_index) {
            if (threadIdx.x == 0) losses[row] = 0.0f;
            if (dlogits) {
                typename D::T* d = dlogits + (long long)row * Vp;
                for (int j = threadIdx.x; j < Vp; j += blockDim.x) d[j] = D::st(0.0f);
            }
            continue;
        }
        float m = -INF_F;
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float v = D::ld(x[j]);
            m = v > m ? v : m;
        }
        m = block_max(m, s);
        float acc = 0.0f;
        for (int j = threadIdx.x; j < V; j += blockDim.x) acc = acc + expf(D::ld(x[j]) - m);
        bool valid = t >= 0 && t < V;
        float xt = valid ? D::ld(x[t]) : 0.0f; // read before block_sum's barrier: in place, x[t] is overwritten below
        float lg = logf(block_sum(acc, s));
        if (threadIdx.x == 0) losses[row] = valid ? -((xt - m) - lg) : __int_as_float(0x7fc00000);
        if (dlogits) {
            typename D::T* d = dlogits + (long long)row * Vp;
            for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
                float g = 0.0f;
                if (j < V) {
                    g = expf((D::ld(x[j]) - m) - lg) * dloss;
                    if (j == t) g = g - dloss;
                }
                d[j] = D::st(g);
            }
        }
    }
}
extern "C" __global__ void xent_fwd_bwd_f32(float* dlogits, float* losses, const float* logits, const int* targets, int N, int V, int Vp, float dloss, int ignore_index) { xent_fwd_bwd<F32>(dlogits, losses, logits, targets, N, V, Vp, dloss, ignore_index); }
extern "C" __global__ void xent_fwd_bwd_bf16(unsigned short* dlogits, float* losses, const unsigned short* logits, const int* targets, int N, int V, int Vp, float dloss, int ignore_index) { xent_fwd_bwd<BF16>(dlogits, losses, logits, targets, N, V, Vp, dloss, ignore_index); }
extern "C" __global__ void xent_fwd_bwd_f16(unsigned short* dlogits, float* losses, const unsigned short* logits, const int* targets, int N, int V, int Vp, float dloss, int ignore_index) { xent_fwd_bwd<F16>(dlogits, losses, logits, targets, N, V, Vp, dloss, ignore_index); }
