// embed.cu: token and position embeddings. The backward pass is
// deterministic without atomics: the host groups the batch's positions by
// token (TokenBuckets), and one thread per (token, column) sums that
// token's positions in position order.

// embedding_fwd: out[n][c] = wte[tok_n][c] + wpe[n mod T][c] (wpe may be
// null: no position table). A token outside [0, V) gives a zero row and
// sets *bad (may be null) to 1.
template <typename D>
__device__ void embedding_fwd(typename D::T* out, const int* tokens, const typename D::T* wte, const typename D::T* wpe,
                              int N, int T, int C, int V, unsigned int* bad) {
    long long n = (long long)N * C;
    GRID_LOOP(i, n) {
        int c = (int)(i % C);
        int r = (int)(i / C);
        int tok = tokens[r];
        if (tok < 0 || tok >= V) {
            out[i] = D::st(0.0f);
            if (bad && c == 0) atomicOr(bad, 1u);
            continue;
        }
        float v = D::ld(wte[(long long)tok * C + c]);
        if (wpe) v = v + D::ld(wpe[(long long)(r % T) * C + c]);
        out[i] = D::st(v);
    }
}
extern "C" __global__ void embedding_fwd_f32(float* out, const int* tokens, const float* wte, const float* wpe, int N, int T, int C, int V, unsigned int* bad) { embedding_fwd<F32>(out, tokens, wte, wpe, N, T, C, V, bad); }
extern "C" __global__ void embedding_fwd_bf16(unsigned short* out, const int* tokens, const unsigned short* wte, const unsigned short* wpe, int N, int T, int C, int V, unsigned int* bad) { embedding_fwd<BF16>(out, tokens, wte, wpe, N, T, C, V, bad); }
extern "C" __global__ void embedding_fwd_f16(unsigned short* out, const int* tokens, const unsigned short* wte, const unsigned short* wpe, int N, int T, int C, int V, unsigned int* bad) { embedding_fwd<F16>(out, tokens, wte, wpe, N, T, C, V, bad); }

// embedding_bwd_tok: for bucket u (token uniq[u], positions
// order[starts[u]:starts[u+1]] in increasing order) and column c:
//   g = 0; g = rnd(g + dout[p][c]) for each position p
//   dwte[tok][c] = st(dwte[tok][c] + g)
// i.e. the fresh gradient rounded after each add, as a 16-bit index_add,
// then added to the accumulated one. Grid: x over columns, y over buckets.
template <typename D>
__device__ void embedding_bwd_tok(typename D::T* dwte, const typename D::T* dout, const int* order, const int* starts,
                                  const int* uniq, int nuniq, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int u = blockIdx.y; u < nuniq; u += gridDim.y) {
        float g = 0.0f;
        for (int j = starts[u]; j < starts[u + 1]; j++) g = D::rnd(g + D::ld(dout[(long long)order[j] * C + c]));
        long long w = (long long)uniq[u] * C + c;
        dwte[w] = D::st(D::ld(dwte[w]) + g);
    }
}
extern "C" __global__ void embedding_bwd_tok_f32(float* dwte, const float* dout, const int* order, const int* starts, const int* uniq, int nuniq, int C) { embedding_bwd_tok<F32>(dwte, dout, order, starts, uniq, nuniq, C); }
extern "C" __global__ void embedding_bwd_tok_bf16(unsigned short* dwte, const unsigned short* dout, const int* order, const int* starts, const int* uniq, int nuniq, int C) { embedding_bwd_tok<BF16>(dwte, dout, order, starts, uniq, nuniq, C); }
extern "C" __global__ void embedding_bwd_tok_f16(unsigned short* dwte, const unsigned short* dout, const int* order, const int* starts, const int* uniq, int nuniq, int C) { embedding_bwd_tok<F16>(dwte, dout, order, starts, uniq, nuniq, C); }

// embedding_bwd_pos: dwpe[t][c] = st(dwpe[t][c] + rnd(Σ_b dout[b·T+t][c])),
// the batch summed in float in b order and rounded once.
template <typename D>
__device__ void embedding_bwd_pos(typename D::T* dwpe, const typename D::T* dout, int B, int T, int C) {
    long long n = (long long)T * C;
    GRID_LOOP(i, n) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s = s + D::ld(dout[(long long)b * T * C + i]);
        dwpe[i] = D::st(D::ld(dwpe[i]) + D::rnd(s));
    }
}
extern "C" __global__ void embedding_bwd_pos_f32(float* dwpe, const float* dout, int B, int T, int C) { embedding_bwd_pos<F32>(dwpe, dout, B, T, C); }
extern "C" __global__ void embedding_bwd_pos_bf16(unsigned short* dwpe, const unsigned short* dout, int B, int T, int C) { embedding_bwd_pos<BF16>(dwpe, dout, B, T, C); }
extern "C" __global__ void embedding_bwd_pos_f16(unsigned short* dwpe, const unsigned short* dout, int B, int T, int C) { embedding_bwd_pos<F16>(dwpe, dout, B, T, C); }
