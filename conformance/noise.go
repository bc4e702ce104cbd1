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

// noiseDriven returns the mask of the elements whose gradient on the first
// global batch at the initial weights is noise (nil when there are none).
func (a *arch) noiseDriven(init []float32, B, gas, world int) ([]bool, error) {
	gemm, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		return nil, err
	}
	var mb model.Builder = a.gpt
	if a.name == "mlp" {
		mb = a.mlp
	}
	m, err := mb.Build(model.BuildOptions{Gemm: gemm, Acct: mem.NewAccountant(0), Hooks: noHooks{}, Workers: 1})
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
	var ss float64
	for _, g := range grads {
		ss += float64(g) * float64(g)
	}
	rms := math.Sqrt(ss / float64(len(grads)))
	if rms == 0 {
		return nil, nil
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
	return mask, nil
}

type noHooks struct{}

func (noHooks) BeforeForward(int) error  { return nil }
func (noHooks) AfterForward(int) error   { return nil }
func (noHooks) BeforeBackward(int) error { return nil }
func (noHooks) AfterBackward(int) error  { return nil }

// splitWeights compares the final weights: the noise-driven elements
// (mask) in a NoiseReport with its band, the others against tol as
// weightMetric does. A nil mask compares every element against tol.
func splitWeights(got, want, init []float32, mask []bool, l *model.Layout, tol Tolerances) (Metric, *NoiseReport) {
	if mask == nil {
		return weightMetric(got, want, tol), nil
	}
	var g, w []float32
	nr := &NoiseReport{Tensors: map[string]int{}}
	var movedRef, movedOurs float64
	for _, sp := range l.Specs {
		for i := sp.Offset; i < sp.Offset+sp.Numel; i++ {
			if !mask[i] {
				g, w = append(g, got[i]), append(w, want[i])
				continue
			}
			nr.Tensors[sp.Name]++
			movedRef = math.Max(movedRef, math.Abs(float64(want[i])-float64(init[i])))
			movedOurs = math.Max(movedOurs, math.Abs(float64(got[i])-float64(init[i])))
			nr.Weights.add(float64(got[i]), float64(want[i]))
		}
	}
	nr.Weights.Tol = 2*math.Min(movedRef, movedOurs) + tol.WeightsAbs
	return weightMetric(g, w, tol), nr
}
