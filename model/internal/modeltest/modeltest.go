// Package modeltest holds what the tests of the model packages share: the
// deterministic GEMM they run on, the reference harness's result files,
// the loss and gradient comparisons against them, and a UnitHooks
// recorder. It imports package model, so model's own tests use it only
// from the external package model_test.
package modeltest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/model"
)

// Gonum returns package blas's gonum engine: pure Go and deterministic, so
// tests that compare bits across runs get the same bits on every machine.
func Gonum(t testing.TB) blas.Engine {
	t.Helper()
	e, err := blas.New(blas.Options{Backend: blas.Gonum})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Result is the part of the harness's plain PyTorch result.json
// (plain_dsclip_result.json) the tests read.
type Result struct {
	Steps []struct {
		Step        int `json:"step"`
		MicroLosses []struct {
			Micro int     `json:"micro"`
			Rank  int     `json:"rank"`
			Loss  float64 `json:"loss"`
		} `json:"micro_losses"`
		EvalLossAfterStep float64 `json:"eval_loss_after_step"`
	} `json:"steps"`
}

// ZeroResult is the part of a DeepSpeed run's result.json
// (z0_bf16_result.json) the tests read: per step, the micro losses by rank
// ("rank0", ...) and micro-batch.
type ZeroResult struct {
	Steps []struct {
		MicroLosses map[string][]float64 `json:"micro_losses"`
	} `json:"steps"`
}

// ReadResult reads a plain PyTorch result.json.
func ReadResult(t testing.TB, path string) Result {
	t.Helper()
	var r Result
	readJSON(t, path, &r)
	return r
}

// ReadZeroResult reads a DeepSpeed run's result.json.
func ReadZeroResult(t testing.TB, path string) ZeroResult {
	t.Helper()
	var r ZeroResult
	readJSON(t, path, &r)
	return r
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// CheckLoss logs our loss against torch's and fails t when they differ by
// more than tol relative to torch's.
func CheckLoss(t testing.TB, what string, got float32, torch, tol float64) {
	t.Helper()
	rel := math.Abs(float64(got)-torch) / math.Abs(torch)
	t.Logf("%s: ours %.9g torch %.9g rel %.2e", what, got, torch, rel)
	if rel > tol {
		t.Errorf("%s: loss %.9g, torch %.9g (rel %.2e > %.0e)", what, got, torch, rel, tol)
	}
}

// CheckGrads compares our gradients with torch's, tensor by tensor of l:
// a tensor's largest difference must be within tol of its largest torch
// gradient (float32 summation order differs, nothing else). It logs the
// worst tensor's ratio and how many elements are bit-identical.
func CheckGrads(t testing.TB, l *model.Layout, got, torch []float32, tol float64) {
	t.Helper()
	same, worst := 0, 0.0
	for i, s := range l.Specs {
		g, ref := l.View(got, i), l.View(torch, i)
		var gmax, dmax float64
		for j := range ref {
			gmax = max(gmax, math.Abs(float64(ref[j])))
			dmax = max(dmax, math.Abs(float64(g[j]-ref[j])))
			if g[j] == ref[j] {
				same++
			}
		}
		worst = max(worst, dmax/gmax)
		if dmax > tol*gmax {
			t.Errorf("%s: max |Δ| %.3g, largest gradient %.3g (rel %.2e > %.0e)", s.Name, dmax, gmax, dmax/gmax, tol)
		}
	}
	t.Logf("gradients: worst tensor max|Δ|/max|g| %.2e; %d of %d elements bit-identical to torch", worst, same, len(torch))
}

// ErrInjected is the error a Recorder returns from its FailAt call.
var ErrInjected = errors.New("injected")

// Recorder is a model.UnitHooks that logs its calls as "BF(0)", "AF(0)",
// ..., "BB(2)", "AB(2)" and fails the call named FailAt with ErrInjected.
// A test's own hooks can embed it and call Event.
type Recorder struct {
	Log    []string
	FailAt string
}

var _ model.UnitHooks = (*Recorder)(nil)

// Event logs the call name(unit) and returns ErrInjected if it is FailAt.
func (r *Recorder) Event(name string, unit int) error {
	e := fmt.Sprintf("%s(%d)", name, unit)
	r.Log = append(r.Log, e)
	if e == r.FailAt {
		return ErrInjected
	}
	return nil
}

func (r *Recorder) BeforeForward(unit int) error  { return r.Event("BF", unit) }
func (r *Recorder) AfterForward(unit int) error   { return r.Event("AF", unit) }
func (r *Recorder) BeforeBackward(unit int) error { return r.Event("BB", unit) }
func (r *Recorder) AfterBackward(unit int) error  { return r.Event("AB", unit) }
