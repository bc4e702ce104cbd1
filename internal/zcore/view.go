package zcore

import (
	"io"

	"github.com/dszero/dszero/zero/optim"
)

// Views of a rank's state. ExportState copies; a checkpoint's writer needs
// no copy — it streams the values to the file (ptfile.Source) while the
// rank does not step — so ViewState returns the same StrategyState over
// the strategy's own buffers. A view is valid until the next step, import
// or Close, and must not be written to, except by a loader that fills it
// and then imports it (ImportState of a view copies each buffer onto
// itself).

// ViewOptim is ExportOptim without the copies: State holds opt's own
// buffers.
func ViewOptim(opt optim.Optimizer) OptimState {
	st := OptimState{Name: opt.Name(), Steps: opt.StepCount(), State: map[string][]float32{}, Names: opt.StateNames(), Group: opt.ParamGroup()}
	if r, ok := opt.(resumer); ok {
		st.Resume = r.ResumeState()
	}
	if t, ok := opt.(optim.TensorStateful); ok {
		st.Tensors = t.TensorState() // small: sizes, counters, error buffers
	}
	for _, n := range st.Names {
		if v := opt.State(n); v != nil {
			st.State[n] = v
		}
	}
	return st
}

// ViewState is ExportState over the shard's own buffers (stages 1 and 2).
func (s *Shard) ViewState(stage int) StrategyState {
	_, m := s.Master()
	opt := ViewOptim(s.opt)
	for n, v := range opt.State {
		opt.State[n] = v[:len(m):len(m)]
	}
	return StrategyState{Stage: stage, World: s.o.Comm.Size(), Rank: s.o.Comm.Rank(), Numel: s.o.Layout.Numel,
		Groups: []GroupState{{Master: m[:len(m):len(m)], Optim: opt}}}
}

// StreamedGroup is an fp32 group of N elements read where it lives: each
// tensor ("master" and the optimizer state created so far, by torch name)
// as its little-endian bytes, 4·N of them, read in order (ReadAt; a
// ptfile.Source). Close gives back whatever a read left held; the view's
// user calls it once done.
type StreamedGroup struct {
	N       int
	Readers map[string]io.ReaderAt
	Close   func()
}
