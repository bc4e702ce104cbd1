// Package gpt is a GPT-2 written by hand, forward and backward, in the
// style of llm.c's train_gpt2.c: every layer has a forward and a
// mirror-image backward, and all parameters live in one flat buffer.
//
// # Shapes
//
// B = batch size, T = sequence length (≤ Context), C = model width,
// NH = heads, HS = C/NH, M = MLP width (default 4C), V = vocabulary,
// L = blocks, N = B*T rows. Tensors are row-major float32.
//
// # Architecture
//
//	x      = wte[tokens] + wpe[0..T-1]                              (B, T, C)
//	block: x = x + attn.proj(attention(attn.qkv(ln1(x))))           causal, fused qkv
//	       x = x + mlp.proj(gelu_tanh(mlp.fc(ln2(x))))
//	logits = ln_f(x) · headᵀ                                        (B, T, V)
//	loss   = mean over the N positions of cross_entropy(logits, targets)
//
// LayerNorm uses the biased variance and Eps (1e-5). The head is
// lm_head.weight (no bias) or, when Tied, wte itself.
//
// # Flat buffer, views, units
//
// The parameters are one []float32 in the harness TinyGPT's
// named_parameters order (Config.Layout documents it): wte, wpe, then per
// block ln1, attn.qkv, attn.proj, ln2, mlp.fc, mlp.proj (weights in
// PyTorch Linear layout (out, in)), then ln_f and lm_head. The model only
// holds views into a buffer the caller binds (Model.Bind); gradients go to
// a second buffer of the same layout and ACCUMULATE (+=) across Backward
// calls, so gradient accumulation is just several Forward/Backward pairs.
// At an accumulation boundary the owner of the buffer calls
// Model.OverwriteGrads instead of clearing it: the next Backward then
// writes each gradient straight into the buffer (PyTorch with .grad set
// to None), and the ones after it accumulate again.
// The units are embeddings (0), blocks.l (1+l) and head (L+1); the
// optional UnitHooks are called around each unit in both passes.
//
// # Activations and checkpointing
//
// Activations for a (B, T) are allocated through the mem.Accountant as
// mem.Activations in the device tier when a shape is first seen, reused by
// later steps that fit, and freed by Close. After warm-up a step allocates
// nothing. With Options.Checkpoint only each block's input (B, T, C) is
// kept; backward recomputes the block's forward into a single shared set
// of block activations first. Gradients are bit-identical either way.
// With Options.CPUCheckpoint the saved inputs are accounted in the
// pinned-host tier, as DeepSpeed's cpu_checkpointing moves them to host.
//
// # 16-bit compute emulation
//
// Options.DType (device.BF16 or device.F16) emulates a bf16/fp16
// model on the CPU the way PyTorch computes it: each op reads 16-bit
// values, computes in float32 and rounds its output once. The engine
// keeps the bound parameters rounded. Rounded tensors, forward: the
// embedding sum; each LayerNorm output; each Linear output (bias
// included); the attention scores after the 1/√HS scale, the softmax
// probabilities and att·v; each residual sum; the GELU output; the
// logits. The loss is computed in float32 on the rounded logits.
// Backward: dlogits; every Linear's input gradient and its weight and
// bias gradients; each LayerNorm's input, weight and bias gradients; the
// GELU input gradient; d(att), d(scores) and dq, dk, dv; each residual
// sum of two gradient paths; wte's gradient after each added row, wpe's
// once. Each parameter's gradient of one Backward is rounded before it is
// added to the float32 gradient buffer, like a 16-bit .grad added into
// fp32 accumulators (DeepSpeed's BF16_Optimizer).
//
// With fp16 that is all: the op list of the harness's fp16emu.py (torch
// 1.13 has no fp16 CPU kernels). With bf16 the model reproduces torch
// 1.13.1's CPU bf16 kernels bit for bit (bf16.go, checked against torch
// by TestBF16KernelsMatchTorch and TestBF16GradientsMatchTorch), which
// differ from "float32, round once" in places: LayerNorm's moments,
// rstd and weight/bias gradient sums in bf16; GELU with every operation
// in bf16; the softmax backward's Σ p·g rounded to bf16; every matrix
// product summed in oneDNN's bf16 order (pairs of products, odd element
// first) instead of the Gemmer's; exp and log of the softmax and the
// loss as Sleef computes them. One rounding that lands differently
// grows, through Adam, into weight differences of ~4e-3 after 10 steps,
// the size of bf16 itself; with these kernels DeepSpeed 0.14.5's bf16
// runs are reproduced exactly. The bf16 products are plain Go loops, not
// the Gemmer: slower than BLAS on large models. That is the exact path;
// the fast path (below) computes 16-bit ops as GPU kernels do.
//
// # Precision notes (float32)
//
// Linear layers follow torch's addmm: bias copied into the output, then
// one GEMM with beta = 1; the GEMM order is the Gemmer's. Reductions that
// torch does in float32 (LayerNorm moments, softmax sums, bias and
// LayerNorm parameter gradients, the mean loss) are accumulated in
// float64 here; GELU and exp are evaluated in float64. Results agree with
// PyTorch to about 1e-7 relative, not bit for bit. The attention's
// q·kᵀ, att·v and their backward sum in llm.c's loop order (each sum in
// order of its index, one rounding per product and per sum): a BLAS GEMM
// per head moved the 10-step final weights from 7.6e-6 to 1.3e-5 of
// PyTorch's, past the 1e-5 the parity tests hold. internal/seqgemm
// computes exactly those loops' sums eight elements per instruction. Each
// parameter gradient of a Backward is computed whole into a scratch and
// then added to the gradient buffer, as PyTorch's AccumulateGrad does
// (grad + new); after OverwriteGrads it is computed in place (a weight
// gradient is one GEMM with beta = 0 into the gradient view), which
// gives the same bits except that a -0 is not turned into +0. With tied
// embeddings the head's and the embedding's contributions to wte are
// added one after the other (PyTorch sums them first).
//
// # Sequence parallelism
//
// With Options.SeqParallel (DeepSpeed-Ulysses, ulysses.go) a group of sp
// ranks shares each sequence: a rank holds T/sp consecutive tokens at
// their global positions, all-to-alls exchange tokens for heads around
// the attention (each rank attends with NH/sp heads over all T tokens),
// and the loss is the mean over the whole sequences. The sum of the
// ranks' gradients is the one-rank gradient (TestUlyssesMatchesOneRank).
//
// # Fast path
//
// Options.Fast (dszero train's default, --math fast) trades those orders
// for speed: attention as causal-blocked GEMMs, float32 exp and tanh
// within 1 ulp, the bias added in the GELU and residual passes, and the
// element-wise layers on the pool (fast.go). Losses stay within 1e-5
// relative of the exact path's over ten training steps. With a 16-bit
// DType it is "float32 through the Gemmer, each op's output rounded
// once" (a GPU's 16-bit kernels) instead of torch's CPU bf16 kernels,
// and as fast as fp32 (BenchmarkGPTStep16). Conformance always runs
// exact, and so does sequence parallelism.
package gpt
