package stage2

import "github.com/dszero/dszero/internal/zcore"

// ViewState is ExportState over the strategy's own buffers (see
// zcore.ViewOptim): valid until the next step.
func (s *Strategy) ViewState() (zcore.StrategyState, error) { return s.shard.ViewState(2), nil }
