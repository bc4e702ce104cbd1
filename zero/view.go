package zero

import (
	"fmt"

	"github.com/dszero/dszero/internal/zcore"
)

// StateViewer is a strategy that can show its rank state in place
// (zcore.ViewOptim): a checkpoint streams it to the files without a copy.
type StateViewer interface {
	ViewState() (zcore.StrategyState, error)
}

// ViewState is ExportState over the strategy's own buffers where the
// strategy can show them (StateViewer), a copy otherwise: valid until the
// next step, import or Close, and not to be modified.
func (e *Engine) ViewState() (State, error) {
	sv, ok := e.strategy.(StateViewer)
	if !ok {
		return e.ExportState()
	}
	st, err := sv.ViewState()
	if err != nil {
		return State{}, fmt.Errorf("stage %d: viewing the rank's state: %w", e.plan.Zero.Stage, err)
	}
	return e.stateOf(st), nil
}

// ViewState is ExportState over the strategy's own buffers.
func (s *Stage0) ViewState() (zcore.StrategyState, error) {
	c := s.o.Comm
	return zcore.StrategyState{Stage: 0, World: c.Size(), Rank: c.Rank(), Numel: s.o.Layout.Numel,
		Groups: []zcore.GroupState{{Master: s.master[:len(s.master):len(s.master)], Optim: zcore.ViewOptim(s.opt)}}}, nil
}
