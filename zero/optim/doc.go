// Package optim holds the optimizers a ZeRO rank runs on its partition of
// the flat fp32 parameter buffer, and the gradient-norm and clipping
// arithmetic, reproducing PyTorch 1.13 and DeepSpeed to the bit where their
// CPU kernels are known.
//
// # Partitions, segments, state
//
// A parameter group is flattened into one buffer; a ZeRO stage gives each
// rank a contiguous partition of it (stage 0: all of it). One Optimizer
// instance owns one group's state for one partition: n elements of every
// state tensor, allocated through a mem.Accountant as mem.OptimState, so a
// rank holds state for its partition only. A Segment names the piece of
// one parameter inside the partition; only Lamb needs segments, because
// its trust ratio is a per-parameter norm (see Lamb and NormReducer).
//
// State tensors carry torch's state-dict names: exp_avg, exp_avg_sq,
// max_exp_avg_sq (Adam), momentum_buffer (SGD), sum (torch Adagrad),
// exp_avg_sq (DeepSpeed Adagrad); StepCount is "step" (a float32 scalar
// tensor in torch, a Python int in DeepSpeed). ParamGroup returns the
// group's param_groups entry. LR/SetLR are the scheduler's handle, and
// BetaSetter lets OneCycle cycle beta1.
//
// # Update rules (g gradient, p parameter, t step, all float32)
//
// torch.optim.AdamW 1.13 (_single_tensor_adamw, the CPU default path):
//
//	p ← p·(1 − lr·wd)
//	m ← fma(g, 1−β1, m·β1)              exp_avg.mul_(β1).add_(g, alpha=1−β1)
//	v ← fma((1−β2)·g, g, v·β2)          exp_avg_sq.mul_(β2).addcmul_(g, g, value=1−β2)
//	p ← p + (−lr/(1−β1^t))·m / (√v / √(1−β2^t) + eps)
//
// torch.optim.Adam is the same without the first line and with
// g ← fma(p, wd, g) (L2 decay) when wd ≠ 0. The scalars are Python floats
// (float64: β^t by pow, √ by math.sqrt) rounded to float32 where a kernel
// receives them. The fmas are what torch's AVX2 kernels execute: add_ with
// alpha is an explicit vec::fmadd, and GCC contracts addcmul's
// self + value·t1·t2. Golden files from torch 1.13.1 (testdata) pin every
// bit, scalar tails included.
//
// DeepSpeed's Adam (csrc/includes/cpu_adam.h Step_AVX; DeepSpeedCPUAdam,
// and FusedAdam on the CPU accelerator) keeps every scalar in float32 and
// β^t as running float32 products (pow() after a resume):
//
//	g ← fma(p, wd, g)                        (adam_w_mode false, wd > 0)
//	m ← fma(g, 1−β1, m·β1);  v ← fma(g·g, 1−β2, v·β2)
//	u ← m / fma(√v, 1/√(1−β2^t), eps)
//	p ← fma(p, −lr·wd, p)                    (adam_w_mode true, wd > 0)
//	p ← fma(u, −lr/(1−β1^t), p)
//
// torch.optim.SGD: d ← fma(p, wd, g); b ← d at the first step, else
// fma(d, 1−dampening, b·momentum); d ← fma(b, momentum, d) (nesterov) or b;
// p ← fma(d, −lr, p).
//
// torch.optim.Adagrad: d ← fma(p, wd, g); s ← fma(d, d, s);
// p ← p + (−lr/(1+(t−1)·lr_decay))·d / (√s + eps). DeepSpeed's CPU Adagrad
// divides the raw g, not d: p ← fma(g/(√s+eps), −lr, p).
//
// DeepSpeed FusedLamb (fused_lamb_cuda_kernel.cu), per parameter:
//
//	m ← β1·m + (1−β1)·g/scale;  v ← β2·v + (1−β2)·(g/scale)²
//	u ← m/(√v + eps) + wd·p                  (√(v+eps) with eps_inside_sqrt)
//	r ← clamp(‖p‖/‖u‖, min_coeff, max_coeff), 1 if either norm is 0
//	p ← p − lr·√(1−β2^t)/(1−β1^t) · r · u
//
// The CUDA kernel reduces in a float32 tree; here the norms are summed in
// float64 in fixed blocks, so Lamb is formula-exact, not bit-exact.
//
// # Gradient norms and clipping
//
// With gradient_clipping c > 0 (coefficient rounding aside):
//
//	‖g‖ = √(Σ_p ‖g_p‖²),   g ← g · min(1, c/(‖g‖ + 1e-6))
//
// Each reference rounds differently, and clip.go has one function per step:
//
//   - torch.nn.utils.clip_grad_norm_: per-tensor float32 torch.norm
//     (Norm2F32), then the norm of those norms (TorchTotalNorm); coefficient
//     clamp((1/(‖g‖+1e-6))·c, max=1), always multiplied (TorchClipCoef).
//   - DeepSpeed stage 0 fp32 (runtime/utils.py clip_grad_norm_): per-tensor
//     float32 norms, stack().square().sum() (torch's cascade sum, SumF32),
//     √ (DSStage0Norm); each rank all-reduces total/world (DSStage0Share);
//     min(1, c/(‖g‖+1e-6)) multiplied even when 1 (DSStage0Coef).
//   - DeepSpeed ZeRO-1/2 (stage_1_and_2 get_grad_norm_direct): float64 norms
//     of the fragments a rank owns (Norm2F64), squared and summed in float64,
//     cast to float32 (Zero12LocalSumSq), all-reduced, √ with −1 for Inf/NaN
//     (ZeroNorm), the norm over groups (ZeroGlobalNorm); the partition is
//     multiplied by 1/(clamp(((‖g‖/S)+1e-6)/c, min=1)·S) for loss scale S
//     (ZeroUnscaleFactor).
//   - DeepSpeed ZeRO-3 (stage3 get_grad_norm_direct): the same in float64
//     throughout (Zero3LocalSumSq, Zero3Norm, Zero3UnscaleFactor).
//
// torch's float32 norm is 8 fused lanes, a left fold, then the len%8 tail
// (4 rounded squares added, then fmas); its sum is the 4-level cascade of
// SumKernel.cpp. Both are reproduced and golden-tested.
//
// # Compressed communication: the 1-bit optimizers
//
// OneBitAdam, ZeroOneAdam and OneBitLamb are DeepSpeed 0.14.5's
// runtime/fp16/onebit/{adam,zoadam,lamb}.py, step for step (the
// initialization pass of their first step included). They are Exchanging
// optimizers: their step communicates — the momentum (or 0/1 Adam's
// gradients and accumulated updates) through comm's compressed all-reduce,
// each tensor padded to a multiple of world·lcm(world, 8) with its own
// error feedback — and LocalGradients tells ZeRO stage 0 when to skip its
// gradient all-reduce (DeepSpeed's engine.enable_backward_allreduce).
// DeepSpeed's update without bias correction, its float32 tensor
// arithmetic in order and its Python-float scalars are kept; norms are
// summed in float64. conformance/reference/onebit_adam_ref.py runs
// DeepSpeed's own classes for the golden files the zero package's tests
// compare against.
//
// # Vector kernels
//
// On amd64 CPUs with AVX2 and FMA3 (golang.org/x/sys/cpu), the Adam
// kernels without AMSGrad run 8 float32 lanes in assembly
// (adam_avx2_amd64.s). Each instruction is one float32 operation of the
// scalar code, in its order, and the FMA instruction rounds once as fma32
// does, so every element gets the scalar code's bits (a NaN stays a NaN;
// which payload survives where two meet is the compiler's operand order).
// The last (hi−lo)%8 elements of a chunk and AMSGrad run the scalar code,
// which is the whole implementation on other CPUs and under the build tag
// purego. The assembly is called in blocks of 64 Ki elements, so the
// scheduler and the GC can preempt a long step between them.
//
// # Parallelism
//
// The updates are elementwise, so a Pool splits a partition into one
// 16-element-aligned chunk per worker (GOMAXPROCS by default) without
// changing any result, and a step allocates nothing. Reductions run per
// segment in a fixed order, never per worker.
package optim
