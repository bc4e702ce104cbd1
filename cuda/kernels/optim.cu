// optim.cu: fused optimizer steps on an fp32 master partition, writing
// an optional 16-bit copy of the updated parameters (round to nearest
// even, as DeepSpeed's bf16/fp16 copies and package half round). Each
// reproduces package zero/optim's CPU kernel operation for operation, so
// a GPU step gives the CPU step's bits given the same float32 scalars;
// the host computes the scalars (bias corrections, step sizes) exactly as
// zero/optim's prepare functions do.

// store16 writes p to the 16-bit copy: kind 0 none, 1 bf16, 2 fp16.
__device__ __forceinline__ void store16(unsigned short* p16, long long i, int kind, float p) {
    if (kind == 1) p16[i] = f32_to_bf16(p);
    else if (kind == 2) p16[i] = f32_to_f16(p);
}

// adam_f32 modes (zero/optim's adamKernel):
//   0 torch Adam:  m = fma(g, 1-b1, m*b1); v = fma((1-b2)*g, g, v*b2)
//                  p = p + (ss*m) / (sqrt(v)/bc2 + eps)
//   1 torch Adam with L2 decay: g = fma(p, wd, g) first
//   2 torch AdamW: as 0, with p*decay (decay = 1-lr*wd) for p
//   3 DeepSpeed Adam: m = fma(g, 1-b1, m*b1); v = fma(g*g, 1-b2, v*b2)
//                  p = fma(m / fma(sqrt(v), bc2, eps), ss, p)
//   4 DeepSpeed, L2 decay: g = fma(p, wd, g) first
//   5 DeepSpeed, decoupled (adam_w_mode): p = fma(p, decay, p) first,
//                  decay = -lr*wd
// For torch bc2 is sqrt(1-b2^t) (divided by), for DeepSpeed 1/sqrt(1-b2^t)
// (multiplied by); ss is -lr/(1-b1^t) in both.
extern "C" __global__ void adam_f32(float* p, const float* g, float* m, float* v, unsigned short* p16, long long n,
                                    int mode, int p16kind, float b1, float omb1, float b2, float omb2, float bc2,
                                    float eps, float ss, float decay, float wd) {
    GRID_LOOP(i, n) {
        float gi = g[i], pi = p[i], mi, vi;
        if (mode <= 2) {
            if (mode == 1) gi = fmaf(pi, wd, gi);
            if (mode == 2) pi = pi * decay;
            mi = fmaf(gi, omb1, m[i] * b1);
            vi = fmaf(omb2 * gi, gi, v[i] * b2);
            float d = sqrtf(vi) / bc2 + eps;
            pi = pi + (ss * mi) / d;
        } else {
            if (mode == 4) gi = fmaf(pi, wd, gi);
            mi = fmaf(gi, omb1, m[i] * b1);
            vi = fmaf(gi * gi, omb2, v[i] * b2);
            float u = mi / fmaf(sqrtf(vi), bc2, eps);
            if (mode == 5) pi = fmaf(pi, decay, pi);
            pi = fmaf(u, ss, pi);
        }
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
        store16(p16, i, p16kind, pi);
    }
}

// sgd_f32 is torch.optim.SGD (zero/optim's sgdKernel):
//   d = fma(p, wd, g) (use_wd); b = d on the first step, else
//   fma(d, 1-dampening, b*momentum); d = fma(b, momentum, d) (nesterov) or b;
//   p = fma(d, -lr, p). buf may be null when momentum is 0 (use_buf 0).
extern "C" __global__ void sgd_f32(float* p, const float* g, float* buf, unsigned short* p16, long long n, int p16kind,
                                   int use_wd, int use_buf, int nesterov, int first, float wd, float mom, float omd,
                                   float nlr) {
    GRID_LOOP(i, n) {
        float d = g[i];
        if (use_wd) d = fmaf(p[i], wd, d);
        if (use_buf) {
            float b = d;
            if (!first) b = fmaf(d, omd, buf[i] * mom);
            buf[i] = b;
            d = nesterov ? fmaf(b, mom, d) : b;
        }
        float pi = fmaf(d, nlr, p[i]);
        p[i] = pi;
        store16(p16, i, p16kind, pi);
    }
}
