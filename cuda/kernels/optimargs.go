package kernels

import (
	"math"
	"math/big"

	"github.com/dszero/dszero/zero/optim"
)

// AdamMode is adam_f32's mode parameter.
type AdamMode int32

const (
	AdamTorch            AdamMode = 0 // torch.optim.Adam, weight_decay 0
	AdamTorchL2          AdamMode = 1 // torch.optim.Adam with weight_decay (L2, added to the gradient)
	AdamTorchW           AdamMode = 2 // torch.optim.AdamW (decoupled decay)
	AdamDeepSpeed        AdamMode = 3 // DeepSpeed's Adam kernel, no decay
	AdamDeepSpeedL2      AdamMode = 4 // adam_w_mode false, weight_decay > 0
	AdamDeepSpeedDecoupl AdamMode = 5 // adam_w_mode true, weight_decay > 0
)

// AdamArgs are the float32 scalars of one adam_f32 launch.
type AdamArgs struct {
	Mode               AdamMode
	B1, OmB1, B2, OmB2 float32
	BC2, Eps, SS       float32
	Decay, WeightDecay float32
}

// TorchAdamArgs computes step t's scalars (t ≥ 1) the way torch 1.13 and
// package zero/optim do: in float64 ("Python floats"), β^t correctly
// rounded, converted to float32 where the kernel receives them.
func TorchAdamArgs(c optim.AdamConfig, t int64) AdamArgs {
	b1, b2 := c.Betas[0], c.Betas[1]
	bc1 := 1 - powCR(b1, t)
	bc2 := 1 - powCR(b2, t)
	a := AdamArgs{
		Mode: AdamTorch, WeightDecay: float32(c.WeightDecay),
		B1: float32(b1), OmB1: float32(1 - b1), B2: float32(b2), OmB2: float32(1 - b2),
		BC2: float32(math.Sqrt(bc2)), Eps: float32(c.Eps), SS: float32(-(c.LR / bc1)),
	}
	switch {
	case c.Flavor == optim.TorchAdamW:
		a.Mode = AdamTorchW
		a.Decay = float32(1 - float64(c.LR*c.WeightDecay))
	case c.WeightDecay != 0:
		a.Mode = AdamTorchL2
	}
	return a
}

// DeepSpeedAdamArgs computes the scalars of DeepSpeed's Adam kernel
// (cpu_adam.h), all float32, from β₁ᵗ and β₂ᵗ as the optimizer keeps them
// (running float32 products; package zero/optim's ResumeState carries them).
func DeepSpeedAdamArgs(c optim.AdamConfig, b1t, b2t float32) AdamArgs {
	b1, b2 := float32(c.Betas[0]), float32(c.Betas[1])
	lr, wd := float32(c.LR), float32(c.WeightDecay)
	bc1, bc2 := float32(1), float32(1)
	if c.BiasCorrection {
		bc1 = 1 - b1t
		bc2 = 1 / float32(math.Sqrt(float64(1-b2t)))
	}
	a := AdamArgs{
		Mode: AdamDeepSpeed, WeightDecay: wd,
		B1: b1, OmB1: 1 - b1, B2: b2, OmB2: 1 - b2,
		BC2: bc2, Eps: float32(c.Eps), SS: -1 * lr / bc1, Decay: -1 * lr * wd,
	}
	switch {
	case wd > 0 && c.AdamWMode:
		a.Mode = AdamDeepSpeedDecoupl
	case wd > 0:
		a.Mode = AdamDeepSpeedL2
	}
	return a
}

// powCR is b**n rounded to float64 from a 512-bit product: correctly
// rounded except in astronomically rare cases, as C's pow() (which Python's
// ** calls, within 0.52 ulp) and package zero/optim's double-double power
// are.
func powCR(b float64, n int64) float64 {
	const prec = 512
	r := new(big.Float).SetPrec(prec).SetFloat64(1)
	x := new(big.Float).SetPrec(prec).SetFloat64(b)
	for n > 0 {
		if n&1 == 1 {
			r.Mul(r, x)
		}
		n >>= 1
		if n > 0 {
			x.Mul(x, x)
		}
	}
	f, _ := r.Float64()
	return f
}
