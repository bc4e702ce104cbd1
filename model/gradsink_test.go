package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestGradSink: accumulating adds the rounded fresh gradient; after
// OverwriteNext the next backward (only) writes in place; Abort gives the
// mark back to the backward after.
func TestGradSink(t *testing.T) {
	half := func(x []float32) {
		for i := range x {
			x[i] = float32(int(x[i]*2)) / 2 // a visible rounding
		}
	}
	s := GradSink{Round: half, Scratch: make([]float32, 4)}
	grad := []float32{1, 1, 1}
	backward := func(fresh ...float32) {
		t.Helper()
		out := s.Out(grad)
		copy(out, fresh)
		s.Commit(grad, out[:len(fresh)])
	}

	s.Begin()
	backward(0.3, 0.6, 1.7)
	s.End()
	if d := cmp.Diff([]float32{1, 1.5, 2.5}, grad); d != "" {
		t.Errorf("accumulate (-want +got):\n%s", d)
	}

	s.OverwriteNext()
	if !s.Begin() || !s.Overwriting() {
		t.Fatal("the backward after OverwriteNext does not overwrite")
	}
	backward(4.2, 5, 6.9)
	s.End()
	if d := cmp.Diff([]float32{4, 5, 6.5}, grad); d != "" {
		t.Errorf("overwrite (-want +got):\n%s", d)
	}
	if s.Begin() {
		t.Error("the mark outlived the backward it was for")
	}
	s.End()

	s.OverwriteNext()
	s.Begin()
	s.Abort()
	if !s.Begin() {
		t.Error("Abort did not give the mark back")
	}
	s.End()
}
