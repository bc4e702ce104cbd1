package conformance

import (
	"fmt"
	"math"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
)

// Noise-driven parameters. Some elements have a true gradient of zero:
// the key bias of attention, since softmax ignores a constant added to
// every score of a query. What a run computes for them is rounding noise,
// and Adam, which divides by the gradient's own running RMS, moves them
// by about the learning rate each step in a direction that noise picks.
// Two correct implementations that sum in different orders then end with
// different values there — DeepSpeed's own stages differ from plain
// PyTorch by 2–3e-5 on them while every other weight agrees to 2e-7 — so
// holding them to the weights' tolerance fails correct runs, and leaving
// them out would hide a real mismatch.
//
// The runner finds them from the case's own data: the gradient of the
// first global batch at the initial weights, computed in float32, summed
// over the batch's micro-batches; an element is noise-driven when its
// gradient is not zero but below noiseRatio of the RMS gradient of the
// whole model. On the shipped GPT the key biases' rounding noise is at
// most 3e-9 of it and the smallest real gradient 8e-7; an exactly zero
// gradient (a dead ReLU's) is no noise: Adam leaves such an element
// where weight decay puts it, the same in every run. Their final weights are reported apart (Report.Noise),
// held to a band of their own: the weights' tolerance plus twice the
// smaller of the two runs' largest moves of them from their initial
// values — two runs that each move each element at most that far, in
// either direction, differ by at most twice as much; the smaller move, so
// that neither run's error widens its own band (a reference or a dszero
// that moves them too far fails). The other weights keep the tolerance,
// and a wrong learning rate fails there and in the per-step series.

// noiseRatio is the gradient, relative to the model's RMS gradient, below
// which an element counts as noise-driven.
const noiseRatio = 1e-7

// NoiseReport is the noise-driven elements' comparison.
type NoiseReport struct {
	// Tensors names each tensor with noise-driven elements and how many.
	Tensors map[string]int `json:"tensors"`
	// Weights compares their final values; Tol is the band above.
	Weights Metric `json:"weights"`
}

// firstGrads is the gradient of the first global batch at the initial
// weights, summed over its micro-batches (float32, Backward(1) each).
func (a *arch) firstGrads(init []float32, B, gas, world int) ([]float32, error) {
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		return nil, err
	}
	m, err := a.builder().Build(model.BuildOptions{Gemm: gemm, Acct: mem.NewAccountant(0), Hooks: noHooks{}, Workers: 1})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	params := append([]float32(nil), init...)
	grads := make([]float32, len(init))
	if err := m.Bind(params, grads); err != nil {
		return nil, err
	}
	batches := caseBatches{a: a, gas: gas, world: world}
	var b model.Batch
	for micro := range gas {
		for r := range world {
			b.B = B
			if err := batches.Batch(0, micro, r, &b); err != nil {
				return nil, err
			}
			if _, err := m.Forward(b); err != nil {
				return nil, fmt.Errorf("the noise check's forward: %w", err)
			}
			if err := m.Backward(1); err != nil {
				return nil, fmt.Errorf("the noise check's backward: %w", err)
			}
		}
	}
	return grads, nil
}

// noiseDriven returns the mask of the elements whose gradient on the first
// global batch at the initial weights (firstGrads) is noise (nil when
// there are none).
func noiseDriven(grads []float32) []bool {
	var ss float64
	for _, g := range grads {
		ss += float64(g) * float64(g)
	}
	rms := math.Sqrt(ss / float64(len(grads)))
	if rms == 0 {
		return nil
	}
	var mask []bool
	for i, g := range grads {
		if g != 0 && math.Abs(float64(g)) < noiseRatio*rms {
			if mask == nil {
				mask = make([]bool, len(grads))
			}
			mask[i] = true
		}
	}
	return mask
}

type noHooks struct{}

func (noHooks) BeforeForward(int) error  { return nil }
func (noHooks) AfterForward(int) error   { return nil }
func (noHooks) BeforeBackward(int) error { return nil }
func (noHooks) AfterBackward(int) error  { return nil }

// splitWeights compares the final weights: the noise-driven elements
// (mask) in a NoiseReport with its band, the Adam-eps-driven ones (eps,
// epsdriven.go) in another with epsBand, the others against tol as
// weightMetric does. Nil masks leave the elements with the others.
func splitWeights(got, want, init []float32, mask, eps []bool, epsBand float64, l *model.Layout, tol Tolerances) (Metric, *NoiseReport, *NoiseReport) {
	if mask == nil && eps == nil {
		return weightMetric(got, want, tol), nil, nil
	}
	var g, w []float32
	var nr, er *NoiseReport
	var movedRef, movedOurs float64
	for _, sp := range l.Specs {
		for i := sp.Offset; i < sp.Offset+sp.Numel; i++ {
			switch {
			case mask != nil && mask[i]:
				if nr == nil {
					nr = &NoiseReport{Tensors: map[string]int{}}
				}
				nr.Tensors[sp.Name]++
				movedRef = math.Max(movedRef, math.Abs(float64(want[i])-float64(init[i])))
				movedOurs = math.Max(movedOurs, math.Abs(float64(got[i])-float64(init[i])))
				nr.Weights.add(float64(got[i]), float64(want[i]))
			case eps != nil && eps[i]:
				if er == nil {
					er = &NoiseReport{Tensors: map[string]int{}, Weights: Metric{Tol: epsBand}}
				}
				er.Tensors[sp.Name]++
				er.Weights.add(float64(got[i]), float64(want[i]))
			default:
				g, w = append(g, got[i]), append(w, want[i])
			}
		}
	}
	if nr != nil {
		nr.Weights.Tol = 2*math.Min(movedRef, movedOurs) + tol.WeightsAbs
	}
	return weightMetric(g, w, tol), nr, er
}
