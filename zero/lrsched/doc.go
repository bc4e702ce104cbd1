// Package lrsched reproduces DeepSpeed's learning-rate schedulers
// (deepspeed/runtime/lr_schedules.py, v0.19.5 by default, v0.14.5 on
// request): LRRangeTest, OneCycle, WarmupLR, WarmupDecayLR and
// WarmupCosineLR, with every parameter, default, validation error and
// warning.
//
// # When the lr changes
//
// A scheduler writes into the optimizer's param group. Its state is
// last_batch_iteration (it), −1 after construction. DeepSpeed's engine never
// steps it at initialisation and calls step() after every applied
// optimizer step (not after a step skipped for an fp16 overflow), so
// optimizer step k (1-based) runs with
//
//	k = 1: the lr left by the constructor
//	k > 1: get_lr() at it = k − 2
//
// The constructor sets the lr for LRRangeTest (min lr) and OneCycle
// (cycle_min_lr, plus betas (cycle_min_mom, 0.99) with cycle_momentum). In
// v0.19.5 the warm-up schedulers do too (#6597): WarmupLR and WarmupDecayLR
// write warmup_min_lr, WarmupCosineLR writes 0. In v0.14.5 they left the
// optimizer's own lr for step 1 — the reference harness's sequence
// 1e-3, 1e-4, 4e-4, 7e-4, 1e-3, 8.714e-4, ... for WarmupDecayLR(total 10,
// min 1e-4, max 1e-3, warm-up 3, linear) and optimizer lr 1e-3.
//
// # Formulas (it = last_batch_iteration ≥ 0)
//
// Warm-up, with W = max(2, warmup_num_steps):
//
//	γ(it) = ln(it+1)/ln W  (log, the default)  or  it/W  (linear),  it < W
//
// WarmupLR:      lr = min + (max − min)·γ, γ = 1 once it ≥ W; max defaults
// to the optimizer's lr (0.001 in v0.14.5).
// WarmupDecayLR: as WarmupLR, then γ = max(0, (T − it)/max(1, T − W)).
// WarmupCosineLR (ratios of the optimizer's lr at construction, lr0):
//
//	it < W:  lr = lr0·(r_min + γ·(1 − r_min))
//	else:    p = min(1, (it − W + 1)/max(1, T − W))
//	         lr = lr0·max(0, c_min + (1 − c_min)·(1 + cos πp)/2)
//
// (v0.14.5 did not clamp p nor guard T = W.)
//
// OneCycle, with sizes s1, s2 (s2 defaults to s1), S = s1 + s2, b = it+1:
//
//	x = b/S − ⌊b/S⌋;  f = x/(s1/S) if x ≤ s1/S else (x − 1)/(s1/S − 1)
//	it < S:  lr = lr_min + (lr_max − lr_min)·f,  β1 = m_max − (m_max − m_min)·f
//	it ≥ S:  lr = lr_min/(1 + decay_lr_rate·(it − S + 1)/decay_step_size)
//	         β1 = m_max·(1 + decay_mom_rate·(it − S + 1)/decay_step_size)
//
// (no decay when decay_step_size or the rate is 0). With a stair count n>0
// (v0.19.5 only), f = ⌊c·n/s1⌋/n on the way up and ⌊(S − c)·n/s2⌋/n on the
// way down, c = b mod S. β2 is always set to 0.99.
//
// LRRangeTest: lr = min_lr·(1 + step_rate·(it+1)/step_size), the quotient
// floored when staircase.
//
// HF's Trainer, when the ds_config has no scheduler block (KindHFLinear,
// not a DeepSpeed schedule): transformers' get_linear_schedule_with_warmup,
// a LambdaLR whose constructor already writes lr·λ(0), and optimizer step
// k runs with lr·λ(k−1):
//
//	λ(s) = s/max(1, W)  (s < W),  else  max(0, (T − s)/max(1, T − W))
//
// # State
//
// The checkpointed state dict is {"last_batch_iteration": it} for every
// DeepSpeed scheduler; loading it does not touch the lr, which comes back
// with the optimizer's param group (LoadStateDict sets LR to get_lr() at
// it, the same value). The Trainer's schedule checkpoints as torch's
// LambdaLR.state_dict() (last_epoch = it + 1).
package lrsched
