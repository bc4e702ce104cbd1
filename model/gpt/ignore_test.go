package gpt

import (
	"math"
	"strings"
	"testing"

	"github.com/dszero/dszero/model"
)

// TestIgnoredTargets: positions whose target is model.IgnoreIndex take no
// loss and no gradient, the mean divides by the positions that do, and
// LossDenom replaces that count. The gradients of the means over a subset
// S of positions and over its complement, weighted by their counts, add up
// to N times the gradient of the mean over every position.
func TestIgnoredTargets(t *testing.T) {
	cfg, params := harnessTiny(t)
	idx, tgt := microBatch(harnessTokens(t), 0, 0, 0)
	const B = 4
	N := len(tgt)
	m, _ := newTestModel(t, cfg, Options{}, params)

	run := func(b model.Batch) (float32, []float32) {
		t.Helper()
		clear(m.grads)
		loss, err := m.Forward(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(1); err != nil {
			t.Fatal(err)
		}
		return loss, append([]float32(nil), m.grads...)
	}
	all, gAll := run(model.Batch{Tokens: idx, B: B, Targets: tgt})
	perPos := append([]float32(nil), m.a.losses[:N]...)

	// S: every third position; C: the rest.
	inS, inC := make([]int32, N), make([]int32, N)
	var sumS float64
	nS := 0
	for i := range tgt {
		inS[i], inC[i] = model.IgnoreIndex, model.IgnoreIndex
		if i%3 == 0 {
			inS[i] = tgt[i]
			sumS += float64(perPos[i])
			nS++
		} else {
			inC[i] = tgt[i]
		}
	}
	lossS, gS := run(model.Batch{Tokens: idx, B: B, Targets: inS})
	if want := float32(sumS / float64(nS)); lossS != want {
		t.Errorf("mean over the kept positions: %v, want %v (their per-position losses / %d)", lossS, want, nS)
	}
	_, gC := run(model.Batch{Tokens: idx, B: B, Targets: inC})
	var d2, n2 float64
	for i := range gAll {
		sum := float64(nS)*float64(gS[i]) + float64(N-nS)*float64(gC[i])
		d := sum - float64(N)*float64(gAll[i])
		d2 += d * d
		n2 += float64(N) * float64(gAll[i]) * float64(N) * float64(gAll[i])
	}
	if rel := math.Sqrt(d2 / n2); rel > 1e-5 {
		t.Errorf("|S|·∇mean_S + |C|·∇mean_C differs from N·∇mean by %.3g relative", rel)
	}

	// LossDenom = the count is the mean, bit for bit; another denominator
	// scales the loss and its gradient.
	lossD, gD := run(model.Batch{Tokens: idx, B: B, Targets: inS, LossDenom: float64(nS)})
	if lossD != lossS || !equalF32(gD, gS) {
		t.Errorf("LossDenom = the count (%d): loss %v and gradients differ from the mean's %v", nS, lossD, lossS)
	}
	loss2, g2 := run(model.Batch{Tokens: idx, B: B, Targets: inS, LossDenom: 2 * float64(nS)})
	if want := float32(sumS / float64(2*nS)); loss2 != want {
		t.Errorf("LossDenom 2·count: loss %v, want %v", loss2, want)
	}
	for i := range g2 {
		if d := math.Abs(float64(2*g2[i] - gS[i])); d > 1e-6*math.Abs(float64(gS[i]))+1e-12 {
			t.Fatalf("LossDenom 2·count: gradient %d is %v, want half of %v", i, g2[i], gS[i])
		}
	}
	_ = all

	// Every target ignored: no loss, no gradient.
	none := make([]int32, N)
	for i := range none {
		none[i] = model.IgnoreIndex
	}
	lossN, gN := run(model.Batch{Tokens: idx, B: B, Targets: none})
	if lossN != 0 || !equalF32(gN, make([]float32, len(gN))) {
		t.Errorf("every target ignored: loss %v, gradients not all zero", lossN)
	}
}

func equalF32(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// TestForwardRefusesPacking: GPT-2's learned positions are 0…T−1 per row;
// position ids (packed samples) are an error that says so.
func TestForwardRefusesPacking(t *testing.T) {
	cfg, params := harnessTiny(t)
	idx, tgt := microBatch(harnessTokens(t), 0, 0, 0)
	m, _ := newTestModel(t, cfg, Options{}, params)
	_, err := m.Forward(model.Batch{Tokens: idx, B: 4, Targets: tgt, Positions: make([]int32, len(idx))})
	if err == nil || !strings.Contains(err.Error(), "without packing") {
		t.Errorf("Forward with position ids: %v, want an error saying to train without packing", err)
	}
	bad := append([]int32(nil), tgt...)
	bad[3] = -7
	if _, err := m.Forward(model.Batch{Tokens: idx, B: 4, Targets: bad}); err == nil || !strings.Contains(err.Error(), "-7") {
		t.Errorf("a target of -7: %v, want an error naming it (only %d is ignored)", err, model.IgnoreIndex)
	}
}
