package checkpoint

import (
	"fmt"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/ptfile"
	"github.com/dszero/dszero/zero"
)

// Loading into the swap files. A stage-3 engine with offload_optimizer
// nvme keeps its fp32 master partitions and optimizer state in swap
// files, where no buffer of the engine's could take a file's tensor. Its
// strategy (stage3.Strategy) is then a swapLoader: readOptim hands it
// each tensor in the file's order, and the strategy reads it, through a
// buffer of its swap pool, from the checkpoint file straight into the
// tensor's swap file (the masters into the parameter partitions too). A
// load's extra memory is then that of stages 1 and 2 — none of the
// model's size — and each file is still read once, its sha256 computed
// from those reads.

// swapLoader is a stage-3 strategy that loads a checkpoint's tensors
// where they live (stage3.Strategy.BeginLoad).
type swapLoader interface {
	// BeginLoad reports whether the tensors go through LoadTensor (the
	// state lives in swap files) rather than into ViewState's buffers.
	BeginLoad() (bool, error)
	// LoadTensor lends read a buffer of sub-group g's size for tensor
	// name ("master" or an optimizer state) and stores what read put in it.
	LoadTensor(g int, name string, read func(dst []float32) error) error
	// EndLoad waits for the stores and returns err joined with any that
	// failed; a failure voids the load.
	EndLoad(err error) error
}

// target is where a load reads a file's fp32 groups to: the engine's own
// buffers (view, its ViewState), its swap files (swap), or, when neither
// is set (a reshard, a group of another size), new slices.
type target struct {
	view *zcore.StrategyState
	swap swapLoader
}

// group is the engine's group g to read into, or nil.
func (to target) group(g int) *zcore.GroupState {
	if to.view != nil && g < len(to.view.Groups) {
		return &to.view.Groups[g]
	}
	return nil
}

// targetOf is where a load of a checkpoint saved at this engine's stage
// and world size reads to; end, called with the load's outcome, returns
// it joined with the swap loader's.
func targetOf(e *zero.Engine) (to target, end func(error) error, err error) {
	end = func(err error) error { return err }
	if sl, ok := e.Strategy().(swapLoader); ok && e.Plan().Zero.Stage == 3 {
		swapped, err := sl.BeginLoad()
		if err != nil {
			return to, end, err
		}
		if swapped {
			return target{swap: sl}, sl.EndLoad, nil
		}
	}
	v, err := e.ViewState()
	if err != nil {
		return to, end, err
	}
	return target{view: &v.Strategy}, end, nil
}

// readSwappedState is readTorchState for stage-3 sub-group g of a
// swapLoader: each state tensor goes to it, not into o.State.
func readSwappedState(v any, path string, g int, o *zcore.OptimState, sl swapLoader) error {
	return eachStateTensor(v, path, o, nil, func(name string, t *ptfile.Tensor) error {
		return sl.LoadTensor(g, name, func(dst []float32) error { return readExact(t, dst) })
	})
}

// readExact reads a floating tensor of len(dst) elements into dst.
func readExact(t *ptfile.Tensor, dst []float32) error {
	if t.Numel() != int64(len(dst)) {
		return fmt.Errorf("%d elements, this rank's sub-group %d: load the checkpoint with the sub_group_size it was saved with", t.Numel(), len(dst))
	}
	f, err := values(t, dst)
	if err != nil {
		return err
	}
	if len(f) > 0 && &f[0] != &dst[0] { // not contiguous: read through a copy
		copy(dst, f)
	}
	return nil
}
