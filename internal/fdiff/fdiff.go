// Package fdiff measures how far apart two runs' numbers are: the loss
// series and weight vectors the parity tests compare. It is test support
// that imports nothing of dszero, so any package's tests may use it.
package fdiff

import "math"

// MaxRel is the largest |a−b|/|b| of two loss series.
func MaxRel(a, b []float64) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(a[i]-b[i])/math.Abs(b[i]))
	}
	return m
}

// Weights is the largest |a−b| over all weights, and the relative
// difference of the whole vectors, ‖a−b‖₂/‖b‖₂. (Per element, relative
// differences mean little: Adam moves a weight whose gradient is at the
// rounding noise by up to lr per step whatever the noise, so weights near
// zero differ relatively much whenever the summation order differs.)
func Weights(a, b []float32) (abs, rel float64) {
	var d2, b2 float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		abs = math.Max(abs, math.Abs(d))
		d2 += d * d
		b2 += float64(b[i]) * float64(b[i])
	}
	return abs, math.Sqrt(d2 / b2)
}
