package stage3

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dszero/dszero/model"
)

// TestGroups: the transformer policy gathers each model unit on its own;
// size-based wrapping merges consecutive units until they hold
// min_num_params (the rest joining the last group); FSDP's NO_WRAP (a
// min_num_params no model reaches) makes the whole model one unit; a
// borrowed unit (a tied head's embeddings) is borrowed from its group.
func TestGroups(t *testing.T) {
	var b model.LayoutBuilder
	b.Unit("emb")
	b.Param("wte", model.Init{}, 10, 4)
	for _, n := range []string{"b0", "b1", "b2"} {
		b.Unit(n)
		b.Param(n+".w", model.Init{}, 30)
	}
	b.Unit("head", 0)
	b.Param("ln", model.Init{}, 4)
	l := b.Build()
	type g struct {
		Units   []int
		Numel   int
		Borrows []int
	}
	project := func(gs []Group) []g {
		var out []g
		for _, x := range gs {
			out = append(out, g{x.Units, x.Numel, x.Borrows})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		min  int
		want []g
	}{
		{"transformer", 0, []g{{[]int{0}, 40, nil}, {[]int{1}, 30, nil}, {[]int{2}, 30, nil}, {[]int{3}, 30, nil}, {[]int{4}, 4, []int{0}}}},
		{"size 60", 60, []g{{[]int{0, 1}, 70, nil}, {[]int{2, 3, 4}, 64, []int{0}}}},
		{"no wrap", math.MaxInt, []g{{[]int{0, 1, 2, 3, 4}, 134, nil}}},
	} {
		if d := cmp.Diff(tc.want, project(Groups(&l, WrapPolicy{MinNumParams: tc.min}))); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
}

// TestGroupStateMoves: a group moves released → gathering → gathered →
// released (or back to released when its gather fails), and any other
// move is a programmer error that panics naming both states.
func TestGroupStateMoves(t *testing.T) {
	legal := map[[2]groupState]bool{
		{released, gathering}: true, {gathering, gathered}: true, {gathering, released}: true, {gathered, released}: true,
	}
	for _, from := range []groupState{released, gathering, gathered} {
		for _, next := range []groupState{released, gathering, gathered} {
			g := gstate{state: from}
			panicked := func() (p any) {
				defer func() { p = recover() }()
				g.to(next)
				return nil
			}()
			if legal[[2]groupState{from, next}] == (panicked != nil) {
				t.Errorf("%v → %v: panicked %v, legal %v", from, next, panicked, legal[[2]groupState{from, next}])
			}
		}
	}
	f := fetcher{phase: forward}
	defer func() {
		if recover() == nil {
			t.Error("a pass ended in its forward without a panic")
		}
	}()
	f.to(idle)
}
