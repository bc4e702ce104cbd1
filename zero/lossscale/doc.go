// Package lossscale reproduces DeepSpeed's fp16 loss scaling
// (deepspeed/runtime/fp16/loss_scaler.py and fused_optimizer.py, v0.19.5;
// v0.14.5's growth rule on request).
//
// With fp16 the loss is multiplied by a scale S before backward so that
// small gradients survive in half precision; before the optimizer step the
// gradients are multiplied by 1/S (UnscaleFactor, folded into the clipping
// factor by the ZeRO stages). If any gradient is Inf or NaN (HasInfOrNaN,
// OR-ed across ranks) the step is skipped — parameters, optimizer state and
// the LR scheduler stay put — and Update(true) lowers S.
//
// # DynamicLossScaler (ZeRO stages 1–3)
//
// Config from the fp16 block: S₀ = 2^initial_scale_power (16), window w =
// loss_scale_window (1000), floor m = min_loss_scale (1), hysteresis h
// (2), consecutive_hysteresis (false); factor 2; raise at the floor (true).
// State: cur_scale S, cur_iter i, last_overflow_iter ℓ (−1), cur_hysteresis
// c (= h). Update(overflow):
//
//	overflow:  if h = 1 or c = 1:  S = m already → error (the run ends)
//	                               else S ← max(S/2, m)
//	           else c ← c − 1
//	           ℓ ← i
//	clean:     consecutive → c ← h
//	           if (i − ℓ − 1) > 0 and (i − ℓ − 1) mod w = 0:    (v0.14.5: (i − ℓ) mod w = 0)
//	               S ← 2S;  c ← h unless consecutive
//	i ← i + 1
//
// So h − 1 overflows are absorbed before the first halving, a halving does
// not refill c, and after an overflow (or the start) S doubles on the
// (w+1)-th consecutive clean step and then every w clean steps (v0.14.5:
// on the w-th).
//
// # FP16_Optimizer (fp16 without ZeRO)
//
// No hysteresis and no error: overflow → S ← max(S/2, m), ℓ ← i; clean →
// the v0.19.5 growth rule above; i ← i + 1.
//
// # Static
//
// fp16.loss_scale > 0 gives a fixed scale; fp32 and bf16 use scale 1.
package lossscale
