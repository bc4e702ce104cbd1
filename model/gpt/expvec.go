package gpt

// The fast path's softmax cross-entropy evaluates e^x over every logit
// twice a step (the forward's Σ e^(x−max), the backward's softmax): on
// amd64 with AVX2 and FMA, eight lanes at a time (expvec_amd64.s, Cephes's
// expf: within 2 ulp of e^x, TestExpVec), elsewhere fastExp one by one.
// Two differences from fastExp, harmless where they are used, whose
// arguments are shifted logits ≤ 0: results below 2⁻¹²⁶ (arguments below
// −87.34) are 0 rather than subnormal — an absolute error below 1.2e-38
// in a sum that holds e^0 = 1 — and the forward adds the exps in eight
// float32 lanes, each in order, where fastExp's loop adds them in one
// float64 sum.

// vecExpBlock bounds one assembly call (about 30 µs), which cannot be
// preempted.
const vecExpBlock = 1 << 16
