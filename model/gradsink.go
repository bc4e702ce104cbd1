package model

// GradSink is how a model's backward hands over each parameter gradient:
// PyTorch's AccumulateGrad, shared by every model.
//
// A micro-step's gradient of a parameter is computed whole in a scratch
// (Out) and then rounded and added to the accumulated gradient (Commit):
// grad += fresh, so the sum does not depend on how a Gemmer blocks its
// accumulation. After the model's OverwriteGrads (zero_grad with
// set_to_none=True), the next backward computes every gradient straight
// into the gradient buffer instead, which PyTorch's first micro-step does
// to a .grad that is None.
//
// The model owns Scratch (accounted as mem.Temp, the largest tensor's
// size) and brackets each backward with Begin and End.
type GradSink struct {
	// Round, if set, rounds every fresh gradient (16-bit training).
	Round func([]float32)
	// Scratch is where a fresh gradient is computed when accumulating;
	// nil until the model allocates it.
	Scratch []float32

	next, on bool
}

// OverwriteNext marks the next backward as one that writes the gradients
// (the model's OverwriteGrads).
func (s *GradSink) OverwriteNext() { s.next = true }

// Begin starts a backward and takes the mark: it reports whether this
// backward writes the gradients rather than adding to them.
func (s *GradSink) Begin() (overwriting bool) {
	s.on, s.next = s.next, false
	return s.on
}

// Abort ends a backward that failed before touching any gradient, giving
// the mark back to the next one.
func (s *GradSink) Abort() { s.next, s.on = s.on, false }

// End ends the backward.
func (s *GradSink) End() { s.on = false }

// Overwriting reports whether the running backward writes the gradients.
func (s *GradSink) Overwriting() bool { return s.on }

// Out is where the backward computes the fresh gradient of the parameter
// whose gradient view is grad: grad itself when overwriting, else the
// scratch. The caller writes every element and then calls Commit.
func (s *GradSink) Out(grad []float32) []float32 {
	if s.on {
		return grad
	}
	return s.Scratch[:len(grad)]
}

// Commit rounds the fresh gradient (from Out) and, unless it was computed
// in place, adds it to grad.
func (s *GradSink) Commit(grad, fresh []float32) {
	if s.Round != nil {
		s.Round(fresh)
	}
	if s.on {
		return
	}
	grad = grad[:len(fresh)]
	for i, v := range fresh {
		grad[i] += v
	}
}
