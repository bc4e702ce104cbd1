package stage3

import "github.com/dszero/dszero/internal/zcore"

// ViewState is ExportState over the strategy's own buffers (see
// zcore.ViewOptim), valid until the next step: each sub-group's master
// partition and optimizer state in place, whatever their tier. With
// offload_optimizer nvme the state lives in the swap files, and a
// sub-group's is read into memory (ExportState's copy) — one sub-group's
// worth, sub_group_size bounds it.
func (s *Strategy) ViewState() (zcore.StrategyState, error) {
	if s.swap != nil {
		return s.ExportState()
	}
	st := zcore.StrategyState{Stage: 3, World: s.world, Rank: s.rank, Numel: s.l.Numel}
	for g := range s.lay.SubGroups {
		lo, n := s.lay.SubGroupOffset(g), s.lay.SubGroupNumel(g)
		st.Groups = append(st.Groups, zcore.GroupState{Master: s.master[lo : lo+n : lo+n], Optim: zcore.ViewOptim(s.opts[g])})
	}
	return st, nil
}
