package zcore

import (
	"fmt"

	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
)

// UnitGrads follows the model units' gradients through backward passes,
// for the stages that reduce them unit by unit (2 and 3). A unit's
// gradients are live in the model's gradient buffer — accounted as
// mem.Comm — from the BeforeBackward of the unit, or of a unit that
// borrows it, until the stage has reduced and released them; they are
// complete after the unit's own AfterBackward and those of every unit that
// borrows it (a tied head writes the embeddings' gradients).
type UnitGrads struct {
	who       string // the stage, for errors: "stage 2"
	acct      *mem.Accountant
	units     []model.Unit
	borrowers [][]int // borrowers[v]: the units whose backward also writes v's gradients
	waiting   []int   // per unit: AfterBackward calls to come before its gradients are complete
	live      []bool  // the unit's gradients are accounted (mem.Comm)
	liveNumel int     // the elements of the live units
	complete  int     // units complete in this backward pass

	inBackward bool
	backwards  int // complete backward passes since the last step
}

// InBackward reports whether a backward pass is under way.
func (g *UnitGrads) InBackward() bool { return g.inBackward }

// Backwards is the number of complete backward passes since the last
// step (TakeStep).
func (g *UnitGrads) Backwards() int { return g.backwards }

// TakeStep is the check at an optimizer step: one or more backward passes
// have completed since the last step and none is under way. It starts the
// count again.
func (g *UnitGrads) TakeStep() error {
	switch {
	case g.inBackward:
		return fmt.Errorf("%s: step in the middle of a backward pass", g.who)
	case g.backwards == 0:
		return fmt.Errorf("%s: no complete backward pass since the last step: the model must call the engine's unit hooks (bind it with Hooks: engine.Strategy())", g.who)
	}
	g.backwards = 0
	return nil
}

// NewUnitGrads follows units' gradients, accounted in acct; who names
// the stage in errors.
func NewUnitGrads(who string, acct *mem.Accountant, units []model.Unit) *UnitGrads {
	g := &UnitGrads{who: who, acct: acct, units: units, borrowers: make([][]int, len(units)), waiting: make([]int, len(units)), live: make([]bool, len(units))}
	for u, un := range units {
		for _, b := range un.Borrows {
			g.borrowers[b] = append(g.borrowers[b], u)
		}
	}
	return g
}

// Begin starts a backward pass, unless one is under way: every unit waits
// for its own AfterBackward and its borrowers'.
func (g *UnitGrads) Begin() {
	if g.inBackward {
		return
	}
	g.inBackward = true
	g.complete = 0
	for v := range g.waiting {
		g.waiting[v] = 1 + len(g.borrowers[v])
	}
}

// Before is BeforeBackward(u): the gradients of u and of the units it
// borrows become live.
func (g *UnitGrads) Before(u int) error {
	g.Begin()
	if err := g.touch(u); err != nil {
		return err
	}
	for _, b := range g.units[u].Borrows {
		if err := g.touch(b); err != nil {
			return err
		}
	}
	return nil
}

func (g *UnitGrads) touch(v int) error {
	if g.live[v] {
		return nil
	}
	if err := g.acct.Reserve(mem.Comm, mem.Device, 4*int64(g.units[v].Numel)); err != nil {
		return fmt.Errorf("%s: gradients of unit %q: %w", g.who, g.units[v].Name, err)
	}
	g.live[v] = true
	g.liveNumel += g.units[v].Numel
	return nil
}

// After is AfterBackward(u): it calls complete for u and each unit u
// borrows whose gradients are now complete, in that order (returning its
// errors as they are), and reports
// whether every unit's are (the pass is over once the stage has reduced
// them: EndPass).
func (g *UnitGrads) After(u int, complete func(v int) error) (bool, error) {
	g.Begin()
	if err := g.done(u, complete); err != nil {
		return false, err
	}
	for _, b := range g.units[u].Borrows {
		if err := g.done(b, complete); err != nil {
			return false, err
		}
	}
	return g.complete == len(g.units), nil
}

func (g *UnitGrads) done(v int, complete func(int) error) error {
	g.waiting[v]--
	switch {
	case g.waiting[v] > 0:
		return nil
	case g.waiting[v] < 0:
		return fmt.Errorf("%s: unit %q finished backward twice in one pass", g.who, g.units[v].Name)
	}
	g.complete++
	return complete(v)
}

// EndPass ends a backward pass whose gradients are all reduced.
func (g *UnitGrads) EndPass() {
	g.inBackward = false
	g.backwards++
}

// Live reports whether unit v's gradients are live: from the
// BeforeBackward that makes them so until Release.
func (g *UnitGrads) Live(v int) bool { return g.live[v] }

// LiveNumel is the elements of the units whose gradients are live.
func (g *UnitGrads) LiveNumel() int { return g.liveNumel }

// Release returns unit v's live gradients to the accountant.
func (g *UnitGrads) Release(v int) {
	if g.live[v] {
		g.acct.Release(mem.Comm, mem.Device, 4*int64(g.units[v].Numel))
		g.live[v] = false
		g.liveNumel -= g.units[v].Numel
	}
}

// ReleaseAll releases every live unit (after a failed pass, at Close).
func (g *UnitGrads) ReleaseAll() {
	for v := range g.live {
		g.Release(v)
	}
}
