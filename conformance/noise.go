package conformance

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
)

// Noise-driven parameters. Some elements' updates are set by rounding,
// not by the math, and two correct implementations that sum in different
// orders end with different values there. Holding them to the weights'
// tolerance fails correct runs, and leaving them out would hide a real
// mismatch. Two kinds:
//
//   - Elements whose true gradient is zero: the key bias of attention,
//     since softmax ignores a constant added to every score of a query.
//     What a run computes for them is rounding noise, and Adam, which
//     divides by the gradient's own running RMS, moves them by about the
//     learning rate each step in a direction that noise picks. DeepSpeed's
//     own stages differ from plain PyTorch by 2–3e-5 on them while every
//     other weight agrees to 2e-7.
//   - Elements whose gradient is real but below Adam's eps, under an Adam
//     optimizer. There Adam's update lr·m̂/(√v̂+eps) is about lr·g/eps,
//     linear in g, so a rounding error δ in the gradient moves the weight
//     by lr·δ·eps/(|g|+eps)² per step — at |g| ≪ eps by lr·δ/eps, an
//     amplification of 1/eps = 1e8. Such small gradients are mostly a
//     cancellation (on the GPT's mlp.fc weights, two ranks' gradients of
//     ±1.2e-4 average to −5.8e-9), so δ, set by the size of what was
//     summed, is a large part of g: dszero's and torch's float32 gradients
//     of one such element differ by 5.8e-10 (10%), each as far from the
//     float64 value as the other, and the weights after 6 steps by 1.8e-5.
//
// The runner finds both from the case's own data, the first global batch
// at the initial weights computed twice in float32 in two summation
// orders: as the run does (micro-batch by micro-batch, in order) and
// sample by sample in reverse order (other GEMM sums, another
// accumulation order). g is the first sum divided by world·GAS (the
// averaged gradient of step 1); the two sums' difference is a sample of
// the rounding noise, δ_T its RMS over each tensor T (one element's
// sample can be zero by chance, the tensor's scale is steadier).
//
// An element is noise-driven when its gradient is not zero but below
// noiseRatio of the RMS gradient of the whole model (on the shipped GPT
// the key biases' rounding noise is at most 3e-9 of it and the smallest
// real gradient 8e-7; an exactly zero gradient, a dead ReLU's, is no
// noise: Adam leaves such an element where weight decay puts it, the same
// in every run), or, under Adam, when the drift that δ_T can cause while
// the gradient keeps its first-step size, Σ_t lr_t·δ_T·eps/(|g|+eps)²
// over the reference's steps, exceeds the weights' tolerance.
//
// Their final weights are reported apart (Report.Noise), each tensor's
// held to a band of its own: the weights' tolerance plus twice the smaller
// of the two runs' largest moves of the tensor's noise-driven elements
// from their initial values — two runs that each move each element at
// most that far, in either direction, differ by at most twice as much;
// the smaller move, so that neither run's error widens its own band (a
// reference or a dszero that moves them too far fails); per tensor, so
// that the key biases' band (1.5e-5) does not take the width of an mlp.fc
// weight's that Adam moves by the learning rate each step (8e-3). The
// other weights keep the tolerance, and a wrong learning rate fails there
// and in the per-step series.

// noiseRatio is the gradient, relative to the model's RMS gradient, below
// which an element counts as noise-driven.
const noiseRatio = 1e-7

// NoiseReport is the noise-driven elements' comparison.
type NoiseReport struct {
	// Tensors compares, for each tensor with noise-driven elements, their
	// final values (N of them); Tol is the tensor's band.
	Tensors map[string]Metric `json:"tensors"`
}

// OK says every tensor's noise-driven elements are within its band.
func (n *NoiseReport) OK() bool {
	for _, m := range n.Tensors {
		if !m.OK() {
			return false
		}
	}
	return true
}

// N is the number of noise-driven elements.
func (n *NoiseReport) N() int {
	k := 0
	for _, m := range n.Tensors {
		k += m.N
	}
	return k
}

// Worst is the tensor whose largest difference is the largest part of its
// band.
func (n *NoiseReport) Worst() (string, Metric) {
	var name string
	var worst Metric
	for _, k := range slices.Sorted(maps.Keys(n.Tensors)) {
		m := n.Tensors[k]
		if name == "" || m.MaxAbs*worst.Tol > worst.MaxAbs*m.Tol {
			name, worst = k, m
		}
	}
	return name, worst
}

// noiseCheck is what the noise check needs of a case: its batch shape
// and, for an Adam optimizer, eps, the sum of the reference's per-step
// learning rates and the weights' tolerance (AdamEps 0: not Adam).
type noiseCheck struct {
	B, GAS, World int
	AdamEps       float64
	LRSum         float64
	WeightsTol    float64
	// Average is what turns the first global batch's summed gradient into
	// the step's gradient before clipping: 1/(World·GAS), and under
	// DeepSpeed's ZeRO-3 sequence-parallel averaging over every rank
	// 1/sp of that (zero means 1/(World·GAS)).
	Average float64
	// Clip is the gradient_clipping max norm (0: none).
	Clip float64
}

// noiseCheckOf reads the noise check's inputs from a case's plan and
// reference steps.
// The world is the data-parallel ranks': a sequence-parallel group's
// ranks read the same samples.
func noiseCheckOf(plan dsconfig.Plan, steps []StepRecord, tol Tolerances) noiseCheck {
	world := int(plan.DataParallelSize())
	nc := noiseCheck{B: int(plan.Batch.TrainMicroBatchSizePerGPU), GAS: int(plan.Batch.GradientAccumulationSteps), World: world, WeightsTol: tol.WeightsAbs,
		Average: 1 / float64(world*int(plan.Batch.GradientAccumulationSteps)), Clip: plan.GradientClipping}
	if plan.SeqParallelZeRO3AveragesOverWorld() {
		nc.Average /= float64(plan.SequenceParallelSize)
	}
	switch plan.Optimizer.Impl {
	case "torch.optim.Adam", "torch.optim.AdamW", "FusedAdam", "DeepSpeedCPUAdam":
		nc.AdamEps = plan.Optimizer.Eps
		for _, s := range steps {
			nc.LRSum += s.LRUsed
		}
	}
	return nc
}

// noiseDriven returns the mask of the noise-driven elements (nil when
// there are none).
func (a *arch) noiseDriven(init []float32, nc noiseCheck) ([]bool, error) {
	inOrder, err := a.firstGradient(init, nc, false)
	if err != nil {
		return nil, err
	}
	var ss float64
	for _, g := range inOrder {
		ss += float64(g) * float64(g)
	}
	rms := math.Sqrt(ss / float64(len(inOrder)))
	if rms == 0 {
		return nil, nil
	}
	var mask []bool
	mark := func(i int) {
		if mask == nil {
			mask = make([]bool, len(inOrder))
		}
		mask[i] = true
	}
	for i, g := range inOrder {
		if g != 0 && math.Abs(float64(g)) < noiseRatio*rms {
			mark(i)
		}
	}
	if nc.AdamEps <= 0 || nc.LRSum <= 0 {
		return mask, nil
	}
	bySample, err := a.firstGradient(init, nc, true)
	if err != nil {
		return nil, err
	}
	scale := nc.Average
	if scale == 0 {
		scale = 1 / float64(nc.World*nc.GAS)
	}
	if nc.Clip > 0 {
		var ss float64
		for _, g := range inOrder {
			ss += (float64(g) * scale) * (float64(g) * scale)
		}
		if norm := math.Sqrt(ss); norm > nc.Clip {
			scale *= nc.Clip / (norm + 1e-6) // DeepSpeed's clip coefficient
		}
	}
	for _, sp := range a.layout.Specs {
		var dd float64
		for i := sp.Offset; i < sp.Offset+sp.Numel; i++ {
			d := (float64(inOrder[i]) - float64(bySample[i])) * scale
			dd += d * d
		}
		delta := math.Sqrt(dd / float64(sp.Numel))
		for i := sp.Offset; i < sp.Offset+sp.Numel; i++ {
			g := math.Abs(float64(inOrder[i]) * scale)
			if g == 0 {
				continue // no noise: see above
			}
			if drift := nc.LRSum * delta * nc.AdamEps / ((g + nc.AdamEps) * (g + nc.AdamEps)); drift > nc.WeightsTol {
				mark(i)
			}
		}
	}
	return mask, nil
}

// firstGradient is the sum over the first global batch's micro-batches
// (every rank's) of the gradient of their mean loss at the initial
// weights, in float32: micro-batch by micro-batch in the run's order, or,
// with bySample, sample by sample (each scaled by 1/B) in reverse order.
func (a *arch) firstGradient(init []float32, nc noiseCheck, bySample bool) ([]float32, error) {
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
	batches := caseBatches{a: a, gas: nc.GAS, world: nc.World}
	var mbs []model.Batch
	for micro := range nc.GAS {
		for r := range nc.World {
			b := model.Batch{B: nc.B}
			if err := batches.Batch(0, micro, r, &b); err != nil {
				return nil, err
			}
			mbs = append(mbs, b)
		}
	}
	run := func(b model.Batch, scale float32) error {
		if _, err := m.Forward(b); err != nil {
			return fmt.Errorf("the noise check's forward: %w", err)
		}
		if err := m.Backward(scale); err != nil {
			return fmt.Errorf("the noise check's backward: %w", err)
		}
		return nil
	}
	for k := range mbs {
		if !bySample {
			if err := run(mbs[k], 1); err != nil {
				return nil, err
			}
			continue
		}
		b := mbs[len(mbs)-1-k]
		for i := b.B - 1; i >= 0; i-- {
			if err := run(sampleOf(b, i), 1/float32(b.B)); err != nil {
				return nil, err
			}
		}
	}
	return grads, nil
}

// sampleOf is sample i of b as a batch of one.
func sampleOf(b model.Batch, i int) model.Batch {
	s := model.Batch{B: 1}
	if n := len(b.Tokens) / b.B; n > 0 {
		s.Tokens, s.Targets = b.Tokens[i*n:(i+1)*n], b.Targets[i*n:(i+1)*n]
	}
	if n := len(b.X) / b.B; n > 0 {
		s.X = b.X[i*n : (i+1)*n]
	}
	if n := len(b.Y) / b.B; n > 0 {
		s.Y = b.Y[i*n : (i+1)*n]
	}
	return s
}

type noHooks struct{}

func (noHooks) BeforeForward(int) error  { return nil }
func (noHooks) AfterForward(int) error   { return nil }
func (noHooks) BeforeBackward(int) error { return nil }
func (noHooks) AfterBackward(int) error  { return nil }

// splitWeights compares the final weights: the noise-driven elements
// (mask) in a NoiseReport with their tensors' bands, the others against
// tol as weightMetric does. A nil mask compares every element against tol.
func splitWeights(got, want, init []float32, mask []bool, l *model.Layout, tol Tolerances) (Metric, *NoiseReport) {
	if mask == nil {
		return weightMetric(got, want, tol), nil
	}
	var g, w []float32
	nr := &NoiseReport{Tensors: map[string]Metric{}}
	for _, sp := range l.Specs {
		var m Metric
		var movedRef, movedOurs float64
		for i := sp.Offset; i < sp.Offset+sp.Numel; i++ {
			if !mask[i] {
				g, w = append(g, got[i]), append(w, want[i])
				continue
			}
			movedRef = math.Max(movedRef, math.Abs(float64(want[i])-float64(init[i])))
			movedOurs = math.Max(movedOurs, math.Abs(float64(got[i])-float64(init[i])))
			m.add(float64(got[i]), float64(want[i]))
		}
		if m.N > 0 {
			m.Tol = 2*math.Min(movedRef, movedOurs) + tol.WeightsAbs
			nr.Tensors[sp.Name] = m
		}
	}
	return weightMetric(g, w, tol), nr
}
