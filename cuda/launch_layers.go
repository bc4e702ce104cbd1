package cuda

import (
	"fmt"

	"github.com/dszero/dszero/device"
)

// LayerNormFwd normalises N rows of C: out = (x - mean)·rstd·w + b (b may
// be null), keeping mean and rstd (N float32 each, may be null) for
// backward.
func (k *Kernels) LayerNormFwd(q *Issuer, s *Stream, dt device.DType, out, mean, rstd, inp, w, b Mem, N, C int, eps float32) error {
	need("LayerNormFwd out", out, int64(N*C), dt)
	need("LayerNormFwd inp", inp, int64(N*C), dt)
	need("LayerNormFwd w", w, int64(C), dt)
	if N == 0 {
		return nil
	}
	g, bl := rowShape(N, C)
	return q.Launch(s, k.tab.Name("layernorm_fwd", dt), g, bl, P(out), P(mean), P(rstd), P(inp), P(w), P(b), I32(N), I32(C), F32(eps))
}

// LayerNormBwd writes dinp and the weight and bias gradients dw, db (C
// each; db may be null), added to them with accumulate or written.
func (k *Kernels) LayerNormBwd(q *Issuer, s *Stream, dt device.DType, dinp, dw, db, dout, inp, w, mean, rstd Mem, N, C int, accumulate bool) error {
	need("LayerNormBwd dinp", dinp, int64(N*C), dt)
	need("LayerNormBwd dout", dout, int64(N*C), dt)
	need("LayerNormBwd dw", dw, int64(C), dt)
	need("LayerNormBwd mean", mean, int64(N), device.F32)
	need("LayerNormBwd rstd", rstd, int64(N), device.F32)
	if N == 0 {
		return nil
	}
	g, b := rowShape(N, C)
	if err := q.Launch(s, k.tab.Name("layernorm_bwd", dt), g, b, P(dinp), P(dout), P(inp), P(w), P(mean), P(rstd), I32(N), I32(C)); err != nil {
		return err
	}
	cg, cb, rpc, nk := k.colShape(N, C)
	partial, err := q.Alloc(int64(nk*2*C*8), s)
	if err != nil {
		return err
	}
	if err := q.Launch(s, k.tab.Name("layernorm_bwd_partial", dt), cg, cb, P(partial), P(dout), P(inp), P(mean), P(rstd), I32(N), I32(C), I32(rpc)); err != nil {
		return err
	}
	if err := k.colsum(q, s, dt, dw, partial, nk, C, 2*C, accumulate); err != nil {
		return err
	}
	if !db.IsNull() {
		if err := k.colsum(q, s, dt, db, partial.Slice(int64(C*8), partial.n-int64(C*8)), nk, C, 2*C, accumulate); err != nil {
			return err
		}
	}
	return q.Free(partial, s)
}

func (k *Kernels) colsum(q *Issuer, s *Stream, dt device.DType, dst, partial Mem, nk, width, stride int, accumulate bool) error {
	need("column sum dst", dst, int64(width), dt)
	g, b := k.elemShape(int64(width))
	return q.Launch(s, k.tab.Name("colsum_finish", dt), g, b, P(dst), P(partial), I32(nk), I32(width), I32(stride), I32(b2i(accumulate)))
}

// BiasGrad writes (or adds) dbias (OC) = Σ over N rows of dout (N, OC).
func (k *Kernels) BiasGrad(q *Issuer, s *Stream, dt device.DType, dbias, dout Mem, N, OC int, accumulate bool) error {
	need("BiasGrad dout", dout, int64(N*OC), dt)
	if N == 0 {
		return nil
	}
	g, b, rpc, nk := k.colShape(N, OC)
	partial, err := q.Alloc(int64(nk*OC*8), s)
	if err != nil {
		return err
	}
	if err := q.Launch(s, k.tab.Name("bias_grad_partial", dt), g, b, P(partial), P(dout), I32(N), I32(OC), I32(rpc)); err != nil {
		return err
	}
	if err := k.colsum(q, s, dt, dbias, partial, nk, OC, OC, accumulate); err != nil {
		return err
	}
	return q.Free(partial, s)
}

// RMSNormFwd: out = rnd(x·r)·w with r = 1/sqrt(mean(x²) + eps), kept in
// rrms (N float32, may be null).
func (k *Kernels) RMSNormFwd(q *Issuer, s *Stream, dt device.DType, out, rrms, inp, w Mem, N, C int, eps float32) error {
	need("RMSNormFwd out", out, int64(N*C), dt)
	need("RMSNormFwd inp", inp, int64(N*C), dt)
	need("RMSNormFwd w", w, int64(C), dt)
	if N == 0 {
		return nil
	}
	g, b := rowShape(N, C)
	return q.Launch(s, k.tab.Name("rmsnorm_fwd", dt), g, b, P(out), P(rrms), P(inp), P(w), I32(N), I32(C), F32(eps))
}

// RMSNormBwd writes dinp and writes or adds the weight gradient dw.
func (k *Kernels) RMSNormBwd(q *Issuer, s *Stream, dt device.DType, dinp, dw, dout, inp, w, rrms Mem, N, C int, accumulate bool) error {
	need("RMSNormBwd dinp", dinp, int64(N*C), dt)
	need("RMSNormBwd dout", dout, int64(N*C), dt)
	need("RMSNormBwd rrms", rrms, int64(N), device.F32)
	if N == 0 {
		return nil
	}
	g, b := rowShape(N, C)
	if err := q.Launch(s, k.tab.Name("rmsnorm_bwd", dt), g, b, P(dinp), P(dout), P(inp), P(w), P(rrms), I32(N), I32(C)); err != nil {
		return err
	}
	cg, cb, rpc, nk := k.colShape(N, C)
	partial, err := q.Alloc(int64(nk*C*8), s)
	if err != nil {
		return err
	}
	if err := q.Launch(s, k.tab.Name("rmsnorm_bwd_partial", dt), cg, cb, P(partial), P(dout), P(inp), P(rrms), I32(N), I32(C), I32(rpc)); err != nil {
		return err
	}
	if err := k.colsum(q, s, dt, dw, partial, nk, C, C, accumulate); err != nil {
		return err
	}
	return q.Free(partial, s)
}

// GeluFwd: out = gelu_tanh(inp) over n elements.
func (k *Kernels) GeluFwd(q *Issuer, s *Stream, dt device.DType, out, inp Mem, n int64) error {
	return k.unary(q, s, "gelu_fwd", dt, n, P(out), P(inp))
}

// GeluBwd: dinp = dout·gelu'(inp) (dinp may be dout).
func (k *Kernels) GeluBwd(q *Issuer, s *Stream, dt device.DType, dinp, inp, dout Mem, n int64) error {
	return k.unary(q, s, "gelu_bwd", dt, n, P(dinp), P(inp), P(dout))
}

// SwiGLUFwd: out = silu(gate)·up.
func (k *Kernels) SwiGLUFwd(q *Issuer, s *Stream, dt device.DType, out, gate, up Mem, n int64) error {
	return k.unary(q, s, "swiglu_fwd", dt, n, P(out), P(gate), P(up))
}

// SwiGLUBwd writes dgate and dup (which may be gate and up).
func (k *Kernels) SwiGLUBwd(q *Issuer, s *Stream, dt device.DType, dgate, dup, gate, up, dout Mem, n int64) error {
	return k.unary(q, s, "swiglu_bwd", dt, n, P(dgate), P(dup), P(gate), P(up), P(dout))
}

// unary launches an elementwise kernel whose Mem arguments all hold n
// elements, followed by n.
func (k *Kernels) unary(q *Issuer, s *Stream, family string, dt device.DType, n int64, ms ...Arg) error {
	if n == 0 {
		return nil
	}
	g, b := k.elemShape(n)
	return q.Launch(s, k.tab.Name(family, dt), g, b, append(ms, I64(n))...)
}

// RoPE rotates inp (BT rows × H heads × Dh) by the angles of tables cosT,
// sinT (T × Dh/2 float32) at position row mod T; inverse rotates back
// (backward). Pairs are (j, j+Dh/2), or adjacent with interleaved.
func (k *Kernels) RoPE(q *Issuer, s *Stream, dt device.DType, out, inp, cosT, sinT Mem, BT, T, H, Dh int, interleaved, inverse bool) error {
	need("RoPE out", out, int64(BT*H*Dh), dt)
	need("RoPE cos", cosT, int64(T*Dh/2), device.F32)
	if Dh%2 != 0 {
		panic(fmt.Sprintf("cuda: RoPE head width %d is odd", Dh))
	}
	g, b := k.elemShape(int64(BT * H * Dh / 2))
	return q.Launch(s, k.tab.Name("rope", dt), g, b, P(out), P(inp), P(cosT), P(sinT), I32(BT), I32(T), I32(H), I32(Dh),
		I32(b2i(interleaved)), I32(b2i(inverse)))
}

// Permute0213 writes out[a][c][b][d] = inp[a][b][c][d] for inp (A,B,C,D).
func (k *Kernels) Permute0213(q *Issuer, s *Stream, dt device.DType, out, inp Mem, A, B, C, D int) error {
	n := int64(A * B * C * D)
	need("Permute0213 out", out, n, dt)
	g, b := k.elemShape(n)
	return q.Launch(s, k.tab.Name("permute_0213", dt), g, b, P(out), P(inp), I32(A), I32(B), I32(C), I32(D))
}

// QKVSplit splits qkv (B, T, (NH+2·NKV)·HD) into q (B,NH,T,HD), k and v
// (B,NKV,T,HD).
func (k *Kernels) QKVSplit(q *Issuer, s *Stream, dt device.DType, qo, ko, vo, qkv Mem, B, T, NH, NKV, HD int) error {
	need("QKVSplit qkv", qkv, int64(B*T*(NH+2*NKV)*HD), dt)
	g, b := k.elemShape(int64(B * T * (NH + 2*NKV) * HD))
	return q.Launch(s, k.tab.Name("qkv_split", dt), g, b, P(qo), P(ko), P(vo), P(qkv), I32(B), I32(T), I32(NH), I32(NKV), I32(HD))
}

// QKVMerge is QKVSplit's inverse (gradients dq, dk, dv into dqkv).
func (k *Kernels) QKVMerge(q *Issuer, s *Stream, dt device.DType, qkv, qi, ki, vi Mem, B, T, NH, NKV, HD int) error {
	need("QKVMerge qkv", qkv, int64(B*T*(NH+2*NKV)*HD), dt)
	g, b := k.elemShape(int64(B * T * (NH + 2*NKV) * HD))
	return q.Launch(s, k.tab.Name("qkv_merge", dt), g, b, P(qkv), P(qi), P(ki), P(vi), I32(B), I32(T), I32(NH), I32(NKV), I32(HD))
}

// RepeatKV expands (B, NKV, T·HD) to (B, NKV·rep, T·HD) for grouped-query
// attention.
func (k *Kernels) RepeatKV(q *Issuer, s *Stream, dt device.DType, out, inp Mem, B, NKV, rep, THD int) error {
	need("RepeatKV out", out, int64(B*NKV*rep*THD), dt)
	g, b := k.elemShape(int64(B * NKV * rep * THD))
	return q.Launch(s, k.tab.Name("repeat_kv", dt), g, b, P(out), P(inp), I32(B), I32(NKV), I32(rep), I32(THD))
}

// RepeatKVBwd sums the rep copies' gradients back to (B, NKV, T·HD).
func (k *Kernels) RepeatKVBwd(q *Issuer, s *Stream, dt device.DType, dinp, dout Mem, B, NKV, rep, THD int) error {
	need("RepeatKVBwd dinp", dinp, int64(B*NKV*THD), dt)
	g, b := k.elemShape(int64(B * NKV * THD))
	return q.Launch(s, k.tab.Name("repeat_kv_bwd", dt), g, b, P(dinp), P(dout), I32(B), I32(NKV), I32(rep), I32(THD))
}

// SoftmaxCausalFwd turns scores pre (BH, T, T) into causal attention
// weights att (may be pre), with the scores scaled by scale.
func (k *Kernels) SoftmaxCausalFwd(q *Issuer, s *Stream, dt device.DType, att, pre Mem, BH, T int, scale float32) error {
	need("SoftmaxCausalFwd att", att, int64(BH*T*T), dt)
	g, b := rowShape(BH*T, T)
	return q.Launch(s, k.tab.Name("softmax_causal_fwd", dt), g, b, P(att), P(pre), I32(BH), I32(T), F32(scale))
}

// SoftmaxCausalBwd writes the scores' gradient dpre (may be datt).
func (k *Kernels) SoftmaxCausalBwd(q *Issuer, s *Stream, dt device.DType, dpre, datt, att Mem, BH, T int, scale float32) error {
	need("SoftmaxCausalBwd dpre", dpre, int64(BH*T*T), dt)
	g, b := rowShape(BH*T, T)
	return q.Launch(s, k.tab.Name("softmax_causal_bwd", dt), g, b, P(dpre), P(datt), P(att), I32(BH), I32(T), F32(scale))
}

// CrossEntropy computes per-row losses (N float32) of logits (N rows of
// stride Vp, V real columns) against targets (N int32; ignoreIndex rows
// get loss 0), and unless dlogits is null the gradient for a loss scale of
// dloss per row (1/count for a mean), in place when dlogits is logits.
func (k *Kernels) CrossEntropy(q *Issuer, s *Stream, dt device.DType, dlogits, losses, logits, targets Mem, N, V, Vp int, dloss float32, ignoreIndex int) error {
	need("CrossEntropy logits", logits, int64(N*Vp), dt)
	need("CrossEntropy losses", losses, int64(N), device.F32)
	need("CrossEntropy targets", targets, int64(N), device.F32)
	if V > Vp {
		panic(fmt.Sprintf("cuda: CrossEntropy with V %d > stride %d", V, Vp))
	}
	if N == 0 {
		return nil
	}
	g, b := rowShape(N, V)
	return q.Launch(s, k.tab.Name("xent_fwd_bwd", dt), g, b, P(dlogits), P(losses), P(logits), P(targets), I32(N), I32(V), I32(Vp), F32(dloss), I32(ignoreIndex))
}

// EmbeddingFwd: out[n] = wte[tokens[n]] + wpe[n mod T] (wpe may be null)
// for N tokens of width C; a token outside [0, V) gives a zero row and
// sets the uint32 at bad (may be null) to 1.
func (k *Kernels) EmbeddingFwd(q *Issuer, s *Stream, dt device.DType, out, tokens, wte, wpe, bad Mem, N, T, C, V int) error {
	need("EmbeddingFwd out", out, int64(N*C), dt)
	need("EmbeddingFwd tokens", tokens, int64(N), device.F32)
	need("EmbeddingFwd wte", wte, int64(V*C), dt)
	if N == 0 {
		return nil
	}
	g, b := k.elemShape(int64(N * C))
	return q.Launch(s, k.tab.Name("embedding_fwd", dt), g, b, P(out), P(tokens), P(wte), P(wpe), I32(N), I32(T), I32(C), I32(V), P(bad))
}

// TokenBuckets are a batch's positions grouped by token on the device
// (kernels.TokenBuckets, uploaded): int32 arrays Order (positions),
// Starts (NUniq+1) and Uniq (NUniq tokens).
type TokenBuckets struct {
	Order, Starts, Uniq Mem
	NUniq               int
}

// EmbeddingBwd adds the token embedding gradient into dwte, summing each
// token's positions in position order (deterministic), and, unless dwpe
// is null, the position gradient of B sequences of T into dwpe.
func (k *Kernels) EmbeddingBwd(q *Issuer, s *Stream, dt device.DType, dwte, dwpe, dout Mem, tb TokenBuckets, B, T, C int) error {
	need("EmbeddingBwd dout", dout, int64(B*T*C), dt)
	if tb.NUniq > 0 {
		gx := (C + elemBlock - 1) / elemBlock
		g := Dim3{X: uint32(gx), Y: uint32(min(tb.NUniq, 65535)), Z: 1}
		if err := q.Launch(s, k.tab.Name("embedding_bwd_tok", dt), g, Dim3{X: elemBlock, Y: 1, Z: 1},
			P(dwte), P(dout), P(tb.Order), P(tb.Starts), P(tb.Uniq), I32(tb.NUniq), I32(C)); err != nil {
			return err
		}
	}
	if dwpe.IsNull() {
		return nil
	}
	need("EmbeddingBwd dwpe", dwpe, int64(T*C), dt)
	g, b := k.elemShape(int64(T * C))
	return q.Launch(s, k.tab.Name("embedding_bwd_pos", dt), g, b, P(dwpe), P(dout), I32(B), I32(T), I32(C))
}
