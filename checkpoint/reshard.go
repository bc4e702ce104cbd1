package checkpoint

import (
	"fmt"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/zero"
	"github.com/dszero/dszero/zero/partition"
)

// Resharding: a checkpoint saved at one ZeRO stage and world size resumes
// at another (DeepSpeed needs its universal-checkpoint conversion for
// that). Every rank reads every saved rank's fp32 master and optimizer
// state, puts the model's back together in the flat buffer's order (the
// inverse of the saved stage's partitioning), and takes its own part in
// this run's layout. The counters, loss scaler and scheduler are saved
// rank 0's. Each rank briefly holds the whole model's fp32 master and
// optimizer state.

// full is the model's fp32 master and optimizer state, each Layout.Numel
// long, in the flat buffer's order.
type full struct {
	master []float32
	optim  map[string][]float32
	name   string // the optimizer
	steps  int64
	resume []float64 // rank 0's first group's: the same for every group (zcore.OptimState.Resume)
}

func reshard(path string, man manifest, x expect, e *zero.Engine, o Options, rank int) (zero.State, error) {
	plan, l := e.Plan(), o.Layout
	if plan.Zero.RoundRobinGradients {
		return zero.State{}, fmt.Errorf("checkpoint %s was saved at stage %d on %d ranks: resuming it with round_robin_gradients on another layout is not supported; resume at stage %d on %d ranks, or without round_robin_gradients", path, man.Stage, man.World, man.Stage, man.World)
	}
	if x.ref.RoundRobin {
		return zero.State{}, fmt.Errorf("checkpoint %s was saved with round_robin_gradients at stage %d on %d ranks: resharding it is not supported; resume it at stage %d on %d ranks with round_robin_gradients", path, man.Stage, man.World, man.Stage, man.World)
	}
	ranks := man.World
	if man.Stage == 0 {
		ranks = 1
	}
	saved := make([]zero.State, ranks)
	for r := range saved {
		var err error
		if saved[r], err = readSaved(path, x, man.Stage, r, man.World, plan.Precision.DType, l, target{}); err != nil {
			return zero.State{}, err
		}
	}
	f, err := gather(saved, man.Stage, man.World, l)
	if err != nil {
		return zero.State{}, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	tmpl, err := e.ExportState() // this run's layout, to be filled
	if err != nil {
		return zero.State{}, err
	}
	st := saved[0]
	st.Strategy = tmpl.Strategy
	if err := scatter(&st.Strategy, f, plan.Zero.Stage, plan.WorldSize, rank, l); err != nil {
		return zero.State{}, fmt.Errorf("checkpoint %s (stage %d, %d ranks) into stage %d on %d ranks: %w", path, man.Stage, man.World, plan.Zero.Stage, plan.WorldSize, err)
	}
	return st, nil
}

// pieces calls fn for each piece of the flat buffer that rank holds at
// stage over world ranks — params in flattening order — in flat order:
// flat[lo, hi) lies at [at, at+hi-lo) of the rank's concatenated fp32
// groups (its partition without padding at stages 1 and 2, every
// parameter's partition with its padding at stage 3). How the groups are
// cut into sub-groups does not matter.
func pieces(stage, world, rank int, params []partition.Param, fn func(lo, hi, at int)) {
	switch stage {
	case 0:
		n := 0
		for _, p := range params {
			n += p.Numel
		}
		fn(0, n, 0)
	case 1, 2:
		flat := partition.Flat(params, world)
		lo, _ := flat.Partition(rank)
		fn(lo, lo+flat.SavedLen(rank), 0)
	case 3:
		lay := partition.Stage3(params, world, 0)
		off := 0
		for i, p := range params {
			lo, hi, _ := partition.PerParam(p.Numel, world, rank)
			fn(off+lo, off+hi, lay.Offsets[i])
			off += p.Numel
		}
	}
}

// layoutParams is l's parameters in flattening order.
func layoutParams(l *model.Layout) []partition.Param {
	ps := make([]partition.Param, len(l.Specs))
	for i, sp := range l.Specs {
		ps[i] = partition.Param{Name: sp.Name, Numel: sp.Numel}
	}
	return ps
}

// concat is a rank's groups, one after the other: its master or one of
// its optimizer state tensors (nil when a group lacks it).
func concat(gs []zcore.GroupState, state string) []float32 {
	var out []float32
	for _, g := range gs {
		v := g.Master
		if state != "" {
			if v = g.Optim.State[state]; v == nil {
				return nil
			}
		}
		out = append(out, v...)
	}
	return out
}

// gather puts the saved ranks' states back together.
func gather(saved []zero.State, stage, world int, l *model.Layout) (full, error) {
	g0 := saved[0].Strategy.Groups
	if len(g0) == 0 {
		return full{}, fmt.Errorf("rank 0 saved no fp32 groups")
	}
	f := full{master: make([]float32, l.Numel), optim: map[string][]float32{}, name: g0[0].Optim.Name, steps: g0[0].Optim.Steps, resume: g0[0].Optim.Resume}
	for n := range g0[0].Optim.State {
		f.optim[n] = make([]float32, l.Numel)
	}
	for r, st := range saved {
		gs := st.Strategy.Groups
		srcs := map[string][]float32{"": concat(gs, "")}
		for n := range f.optim {
			if srcs[n] = concat(gs, n); srcs[n] == nil {
				return full{}, fmt.Errorf("rank %d saved no optimizer state %q", r, n)
			}
		}
		var err error
		pieces(stage, world, r, layoutParams(l), func(lo, hi, at int) {
			for n, src := range srcs {
				if at+hi-lo > len(src) {
					err = fmt.Errorf("rank %d's saved partition has %d elements, its layout needs %d", r, len(src), at+hi-lo)
					return
				}
				dst := f.master
				if n != "" {
					dst = f.optim[n]
				}
				copy(dst[lo:hi], src[at:at+hi-lo])
			}
		})
		if err != nil {
			return full{}, err
		}
	}
	return f, nil
}

// scatter fills st, this run's rank state as exported (its groups give
// the lengths), with the rank's part of f.
func scatter(st *zcore.StrategyState, f full, stage, world, rank int, l *model.Layout) error {
	gs := st.Groups
	if len(gs) == 0 {
		return fmt.Errorf("this run's rank has no fp32 groups")
	}
	if name := gs[0].Optim.Name; f.name != "" && name != f.name {
		return fmt.Errorf("the checkpoint's optimizer is %s, this run's is %s: use the optimizer the checkpoint was trained with", f.name, name)
	}
	n := 0
	for _, g := range gs {
		n += len(g.Master)
	}
	dsts := map[string][]float32{"": make([]float32, n)}
	for name := range f.optim {
		dsts[name] = make([]float32, n) // padding stays zero
	}
	var err error
	pieces(stage, world, rank, layoutParams(l), func(lo, hi, at int) {
		if at+hi-lo > n {
			err = fmt.Errorf("the partition needs %d elements, this run's rank holds %d", at+hi-lo, n)
			return
		}
		for name, dst := range dsts {
			src := f.master
			if name != "" {
				src = f.optim[name]
			}
			copy(dst[at:at+hi-lo], src[lo:hi])
		}
	})
	if err != nil {
		return err
	}
	at := 0
	for i := range gs {
		k := len(gs[i].Master)
		gs[i].Master = dsts[""][at : at+k]
		gs[i].Optim.State = map[string][]float32{}
		for name := range f.optim {
			gs[i].Optim.State[name] = dsts[name][at : at+k]
		}
		gs[i].Optim.Steps, gs[i].Optim.Resume = f.steps, f.resume
		at += k
	}
	return nil
}
