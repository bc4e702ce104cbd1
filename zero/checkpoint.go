package zero

import (
	"fmt"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/zero/lossscale"
)

// StatefulStrategy is a strategy whose rank state can be exported and
// imported (every stage is one). ImportState may be a collective (stages
// 1–3 rebuild the working parameters from every rank's master).
type StatefulStrategy interface {
	ExportState() (zcore.StrategyState, error)
	ImportState(zcore.StrategyState) error
}

// StrategyState is a strategy's rank state (see zcore.StrategyState).
type StrategyState = zcore.StrategyState

// State is one rank's complete training state in canonical form: what a
// checkpoint holds and all that resuming needs for the next steps to be
// bit-identical to uninterrupted training. The data position follows from
// GlobalSteps (the training loop's batches are indexed by step).
type State struct {
	Strategy zcore.StrategyState
	Scaler   lossscale.State
	Dynamic  bool // the loss scale is dynamic (fp16)
	// ScalerConfig is the dynamic loss scaler's parameters under ZeRO (what
	// DeepSpeed pickles with its DynamicLossScaler); nil otherwise. Export
	// only: loading takes them from the config.
	ScalerConfig *lossscale.Config
	Scheduler    map[string]any // the lr scheduler's state dict; nil without a scheduler
	GlobalSteps  int64          // optimizer steps taken, skipped ones included
	SkippedSteps int64
	// Overflow says the last step overflowed and was skipped (what
	// DeepSpeed's optimizer saves as "overflow"). Export only.
	Overflow bool
}

// Plan is the plan the engine was built from.
func (e *Engine) Plan() dsconfig.Plan { return e.plan }

// ExportState copies the rank's training state.
func (e *Engine) ExportState() (State, error) {
	ss, ok := e.strategy.(StatefulStrategy)
	if !ok {
		return State{}, fmt.Errorf("stage %d: the strategy cannot export its state", e.plan.Zero.Stage)
	}
	st, err := ss.ExportState()
	if err != nil {
		return State{}, err
	}
	return e.stateOf(st), nil
}

// stateOf completes the strategy's state st with the engine's.
func (e *Engine) stateOf(st zcore.StrategyState) State {
	s := State{Strategy: st, Scaler: e.scaler.State(), Dynamic: e.scaler.Dynamic(), GlobalSteps: e.globalSteps, SkippedSteps: e.skippedSteps, Overflow: e.overflow}
	if e.sched != nil {
		s.Scheduler = e.sched.StateDict()
		// The optimizer's param group holds what the next step will use:
		// DeepSpeed's scheduler has already stepped when it saves, and its
		// load_checkpoint takes the next step's lr from the param group.
		lr := e.sched.LR()
		betas, cycled := e.sched.Betas()
		for i := range s.Strategy.Groups {
			g := &s.Strategy.Groups[i].Optim
			if g.Group == nil {
				continue
			}
			g.Group["lr"] = lr
			if _, has := g.Group["betas"]; has && cycled {
				g.Group["betas"] = []float64{betas[0], betas[1]}
			}
		}
	}
	if d, ok := e.scaler.(*lossscale.Dynamic); ok {
		c := d.Config()
		s.ScalerConfig = &c
	}
	return s
}

// ImportState restores a rank's training state into an engine built from
// the same config for the same model and world, before its first step. It
// is a collective: every rank calls it.
func (e *Engine) ImportState(s State) error {
	ss, ok := e.strategy.(StatefulStrategy)
	if !ok {
		return fmt.Errorf("stage %d: the strategy cannot import a state", e.plan.Zero.Stage)
	}
	if e.globalSteps != 0 {
		return fmt.Errorf("load a checkpoint into a freshly built engine, before its first step (this one has taken %d)", e.globalSteps)
	}
	if (e.sched == nil) != (s.Scheduler == nil) {
		return fmt.Errorf("the checkpoint has a scheduler state: %v, this config has a scheduler block: %v; use the config the checkpoint was trained with", s.Scheduler != nil, e.sched != nil)
	}
	if s.Dynamic != e.scaler.Dynamic() {
		return fmt.Errorf("the checkpoint's loss scale is dynamic: %v, this config's: %v; use the fp16 settings the checkpoint was trained with", s.Dynamic, e.scaler.Dynamic())
	}
	if err := ss.ImportState(s.Strategy); err != nil {
		return err
	}
	if err := e.scaler.LoadState(s.Scaler); err != nil {
		return fmt.Errorf("loss scaler: %w", err)
	}
	if e.sched != nil {
		if err := e.sched.LoadStateDict(s.Scheduler); err != nil {
			return fmt.Errorf("lr scheduler: %w", err)
		}
	}
	e.globalSteps, e.skippedSteps = s.GlobalSteps, s.SkippedSteps
	return nil
}
