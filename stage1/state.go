package stage1

import "github.com/dszero/dszero/internal/zcore"

// ExportState is the rank's state: its fp32 master partition (without
// padding) and the optimizer state over it.
func (s *Strategy) ExportState() (zcore.StrategyState, error) { return s.shard.ExportState(1), nil }

// ImportState restores a state ExportState made on the same rank of a
// world of the same size (a collective: the working parameters are
// all-gathered from every rank's master).
func (s *Strategy) ImportState(st zcore.StrategyState) error { return s.shard.ImportState(1, st) }
