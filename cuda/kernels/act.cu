// act.cu: activations and rotary embeddings, elementwise (grid-stride).
// GELU and SiLU use CUDA's tanhf and expf, as PyTorch's CUDA kernels do;
// everything else is exact float32 arithmetic in the order written.

#define GELU_BETA 0.7978845608028654f // sqrt(2/pi)
#define GELU_KAPPA 0.044715f

// gelu_fwd: out = 0.5·x·(1 + tanh(β·(x + κ·x³))), the tanh approximation
// (GPT-2's gelu_new, torch's approximate="tanh").
template <typename D>
__device__ void gelu_fwd(typename D::T* out, const typename D::T* inp, long long n) {
    GRID_LOOP(i, n) {
        float x = D::ld(inp[i]);
        float cube = x * x * x;
        float t = tanhf(GELU_BETA * (x + GELU_KAPPA * cube));
        out[i] = D::st(0.5f * x * (1.0f + t));
    }
}
extern "C" __global__ void gelu_fwd_f32(float* out, const float* inp, long long n) { gelu_fwd<F32>(out, inp, n); }
extern "C" __global__ void gelu_fwd_bf16(unsigned short* out, const unsigned short* inp, long long n) { gelu_fwd<BF16>(out, inp, n); }
extern "C" __global__ void gelu_fwd_f16(unsigned short* out, const unsigned short* inp, long long n) { gelu_fwd<F16>(out, inp, n); }

// gelu_bwd: dinp = dout·(0.5·(1+t) + 0.5·x·(1-t²)·β·(1 + 3κx²)); dinp may
// be dout.
template <typename D>
__device__ void gelu_bwd(typename D::T* dinp, const typename D::T* inp, const typename D::T* dout, long long n) {
    GRID_LOOP(i, n) {
        float x = D::ld(inp[i]);
        float cube = x * x * x;
        float t = tanhf(GELU_BETA * (x + GELU_KAPPA * cube));
        float left = 0.5f * (1.0f + t);
        float right = 0.5f * x * (1.0f - t * t) * GELU_BETA * (1.0f + 3.0f * GELU_KAPPA * x * x);
        dinp[i] = D::st(D::ld(dout[i]) * (left + right));
    }
}
extern "C" __global__ void gelu_bwd_f32(float* dinp, const float* inp, const float* dout, long long n) { gelu_bwd<F32>(dinp, inp, dout, n); }
extern "C" __global__ void gelu_bwd_bf16(unsigned short* dinp, const unsigned short* inp, const unsigned short* dout, long long n) { gelu_bwd<BF16>(dinp, inp, dout, n); }
extern "C" __global__ void gelu_bwd_f16(unsigned short* dinp, const unsigned short* inp, const unsigned short* dout, long long n) { gelu_bwd<F16>(dinp, inp, dout, n); }

// swiglu_fwd: out = silu(gate)·up, silu(g) = g/(1 + e^-g) rounded to the
// storage type first (Llama's act_fn(gate_proj(x)) is a tensor of its own).
template <typename D>
__device__ void swiglu_fwd(typename D::T* out, const typename D::T* gate, const typename D::T* up, long long n) {
    GRID_LOOP(i, n) {
        float g = D::ld(gate[i]);
        float s = D::rnd(g / (1.0f + expf(-g)));
        out[i] = D::st(s * D::ld(up[i]));
    }
}
extern "C" __global__ void swiglu_fwd_f32(float* out, const float* gate, const float* up, long long n) { swiglu_fwd<F32>(out, gate, up, n); }
extern "C" __global__ void swiglu_fwd_bf16(unsigned short* out, const unsigned short* gate, const unsigned short* up, long long n) { swiglu_fwd<BF16>(out, gate, up, n); }
extern "C" __global__ void swiglu_fwd_f16(unsigned short* out, const unsigned short* gate, const unsigned short* up, long long n) { swiglu_fwd<F16>(out, gate, up, n); }

// swiglu_bwd: with σ = 1/(1+e^-g): dup = dout·rnd(g·σ),
// dgate = (dout·up)·(σ·(1 + g·(1-σ))). dgate and dup may be gate and up.
template <typename D>
__device__ void swiglu_bwd(typename D::T* dgate, typename D::T* dup, const typename D::T* gate, const typename D::T* up,
                           const typename D::T* dout, long long n) {
    GRID_LOOP(i, n) {
        float g = D::ld(gate[i]), u = D::ld(up[i]), dy = D::ld(dout[i]);
        float sig = 1.0f / (1.0f + expf(-g));
        float s = D::rnd(g * sig);
        dgate[i] = D::st((dy * u) * (sig * (1.0f + g * (1.0f - sig))));
        dup[i] = D::st(dy * s);
    }
}
extern "C" __global__ void swiglu_bwd_f32(float* dgate, float* dup, const float* gate, const float* up, const float* dout, long long n) { swiglu_bwd<F32>(dgate, dup, gate, up, dout, n); }
extern "C" __global__ void swiglu_bwd_bf16(unsigned short* dgate, unsigned short* dup, const unsigned short* gate, const unsigned short* up, const unsigned short* dout, long long n) { swiglu_bwd<BF16>(dgate, dup, gate, up, dout, n); }
extern "C" __global__ void swiglu_bwd_f16(unsigned short* dgate, unsigned short* dup, const unsigned short* gate, const unsigned short* up, const unsigned short* dout, long long n) { swiglu_bwd<F16>(dgate, dup, gate, up, dout, n); }

// rope rotates pairs of each head vector of inp (BT, H, D) by the angle
// of its position t = row mod T: (x1, x2) → (x1·c - x2·s, x2·c + x1·s)
// with c = cos[t][j], s = sin[t][j] from tables (T, D/2) the host computed
// (so no sin/cos here: the result is exact float arithmetic). Pair j is
// (j, j + D/2) (Llama's rotate_half), or (2j, 2j+1) with interleaved.
// inverse negates s: the backward pass, and the undo of a forward. out may
// be inp.
template <typename D>
__device__ void rope(typename D::T* out, const typename D::T* inp, const float* cosT, const float* sinT, int BT, int T,
                     int H, int Dh, int interleaved, int inverse) {
    int hd = Dh / 2;
    long long pairs = (long long)BT * H * hd;
    GRID_LOOP(p, pairs) {
        int j = (int)(p % hd);
        long long head = p / hd; // (row, h)
        int t = (int)((head / H) % T);
        long long base = head * Dh;
        long long i1 = base + (interleaved ? 2 * j : j);
        long long i2 = base + (interleaved ? 2 * j + 1 : j + hd);
        float c = cosT[(long long)t * hd + j], s = sinT[(long long)t * hd + j];
        if (inverse) s = -s;
        float x1 = D::ld(inp[i1]), x2 = D::ld(inp[i2]);
        out[i1] = D::st(x1 * c - x2 * s);
        out[i2] = D::st(x2 * c + x1 * s);
    }
}
extern "C" __global__ void rope_f32(float* out, const float* inp, const float* cosT, const float* sinT, int BT, int T, int H, int Dh, int interleaved, int inverse) { rope<F32>(out, inp, cosT, sinT, BT, T, H, Dh, interleaved, inverse); }
extern "C" __global__ void rope_bf16(unsigned short* out, const unsigned short* inp, const float* cosT, const float* sinT, int BT, int T, int H, int Dh, int interleaved, int inverse) { rope<BF16>(out, inp, cosT, sinT, BT, T, H, Dh, interleaved, inverse); }
extern "C" __global__ void rope_f16(unsigned short* out, const unsigned short* inp, const float* cosT, const float* sinT, int BT, int T, int H, int Dh, int interleaved, int inverse) { rope<F16>(out, inp, cosT, sinT, BT, T, H, Dh, interleaved, inverse); }
