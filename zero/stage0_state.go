package zero

import "github.com/dszero/dszero/internal/zcore"

// ExportState is the rank's state: the whole fp32 master and the optimizer
// state over it (every rank holds the same).
func (s *Stage0) ExportState() (zcore.StrategyState, error) {
	c := s.o.Comm
	return zcore.StrategyState{Stage: 0, World: c.Size(), Rank: c.Rank(), Numel: s.o.Layout.Numel,
		Groups: []zcore.GroupState{{Master: append([]float32(nil), s.master...), Optim: zcore.ExportOptim(s.opt)}}}, nil
}

// ImportState restores the master and the optimizer state; the working
// parameters are the master rounded to the training precision. Any rank's
// state will do, and the world size may differ: stage 0 partitions nothing.
func (s *Stage0) ImportState(st zcore.StrategyState) error {
	c := s.o.Comm
	st.World, st.Rank = c.Size(), c.Rank()
	if err := st.Check(0, c.Size(), c.Rank(), s.o.Layout.Numel, []int{len(s.master)}); err != nil {
		return err
	}
	g := st.Groups[0]
	if err := zcore.ImportOptim(s.opt, g.Optim); err != nil {
		return err
	}
	copy(s.master, g.Master)
	if s.o.Round != nil {
		copy(s.work, s.master)
		s.o.Round(s.work)
	}
	return nil
}
