package model_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/internal/modeltest"
)

func TestCallHook(t *testing.T) {
	var b model.LayoutBuilder
	b.Unit("a")
	b.Param("w", model.Init{Kind: model.InitZeros}, 2)
	b.Unit("b")
	b.Param("v", model.Init{Kind: model.InitZeros}, 3)
	l := b.Build()
	if err := model.CallHook(nil, model.HookAfterBackward, &l, 1); err != nil {
		t.Errorf("nil hooks: %v", err)
	}
	r := &modeltest.Recorder{FailAt: "BB(1)"}
	var errs []string
	for k := model.HookBeforeForward; k <= model.HookAfterBackward; k++ {
		for u := range l.Units {
			if err := model.CallHook(r, k, &l, u); err != nil {
				if !errors.Is(err, modeltest.ErrInjected) {
					t.Errorf("%v(%d): %v does not wrap the hook's error", k, u, err)
				}
				errs = append(errs, err.Error())
			}
		}
	}
	want := []string{"BF(0)", "BF(1)", "AF(0)", "AF(1)", "BB(0)", "BB(1)", "AB(0)", "AB(1)"}
	if d := cmp.Diff(want, r.Log); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{`BeforeBackward(unit 1 "b"): injected`}, errs); d != "" {
		t.Errorf("errors (-want +got):\n%s", d)
	}
	if s := model.HookKind(7).String(); s != "HookKind(7)" {
		t.Errorf("HookKind(7).String() = %q", s)
	}
}
