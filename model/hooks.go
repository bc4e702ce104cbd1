package model

import "fmt"

// HookKind names one of the four UnitHooks methods, for a model that calls
// them through CallHook.
type HookKind int

const (
	HookBeforeForward HookKind = iota
	HookAfterForward
	HookBeforeBackward
	HookAfterBackward
)

var hookNames = [...]string{"BeforeForward", "AfterForward", "BeforeBackward", "AfterBackward"}

func (k HookKind) String() string {
	if k < 0 || int(k) >= len(hookNames) {
		return fmt.Sprintf("HookKind(%d)", int(k))
	}
	return hookNames[k]
}

// CallHook calls h's method of kind k for the unit of l at index unit. It
// returns nil when h is nil, and a hook's error wrapped with the hook, the
// unit index and the unit name: `BeforeBackward(unit 2 "h.1"): ...`.
func CallHook(h UnitHooks, k HookKind, l *Layout, unit int) error {
	if h == nil {
		return nil
	}
	var err error
	switch k {
	case HookBeforeForward:
		err = h.BeforeForward(unit)
	case HookAfterForward:
		err = h.AfterForward(unit)
	case HookBeforeBackward:
		err = h.BeforeBackward(unit)
	case HookAfterBackward:
		err = h.AfterBackward(unit)
	default:
		panic(fmt.Sprintf("model.CallHook: unknown %v", k))
	}
	if err != nil {
		return fmt.Errorf("%v(unit %d %q): %w", k, unit, l.Units[unit].Name, err)
	}
	return nil
}
