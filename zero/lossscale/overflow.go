package lossscale

import (
	"math"

	"github.com/dszero/dszero/zero/optim"
)

// HasInfOrNaN reports whether any element is ±Inf or NaN — the ZeRO
// stages' _has_inf_or_nan (isnan | isinf, then max). Ranks OR the result
// (all_reduce MAX) before deciding to skip a step.
func HasInfOrNaN(x []float32) bool {
	for _, v := range x {
		// An exponent of all ones is Inf or NaN.
		if math.Float32bits(v)&0x7f800000 == 0x7f800000 {
			return true
		}
	}
	return false
}

// SumHasInfOrNaN is DynamicLossScaler._has_inf_or_nan (loss_scaler.py):
// float(x.float().sum()) is ±Inf or NaN. Unlike HasInfOrNaN it also fires
// when finite gradients sum past the float32 range.
func SumHasInfOrNaN(x []float32) bool {
	s := float64(optim.SumF32(x))
	return math.IsInf(s, 0) || s != s
}

// UnscaleFactor is the multiplier that removes a loss scale:
// grad.mul_(1. / scale), the Python double rounded to float32.
func UnscaleFactor(scale float64) float32 { return float32(1 / scale) }

// Unscale multiplies x by UnscaleFactor(scale) in place.
func Unscale(x []float32, scale float64) {
	f := UnscaleFactor(scale)
	for i := range x {
		x[i] *= f
	}
}
