package checkpoint

import (
	"fmt"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/ptfile"
	"github.com/dszero/dszero/zero/optim"
)

// DeepSpeed's 1-bit optimizers (OnebitAdam, ZeroOneAdam, OnebitLamb: stage 0 only)
// keep more per tensor than step and the whole-buffer state: ints (the
// compressed exchange's sizes, 0/1 Adam's counters), floats (its lrs, 1-bit Lamb's coefficients)
// and tensors of their own (the rank's compression errors, 0/1 Adam's
// momentum_accumulator); optim.TensorStateful gives the entries in
// DeepSpeed's order (see zero/optim/onebit_state.go), and the stage-0
// writers put them in the torch state dict as they are. Reading, the
// scalars and those tensors (oneBitTensor) go to zcore.OptimState.Tensors,
// the rest to State.

// setStage0State sets state[i], parameter i's entry of a stage-0 torch
// optimizer state: elements [lo, hi) of o's buffers as tensors of shape,
// in o's per-tensor entries where it has them (no entry for a tensor
// that has no state yet).
func setStage0State(state *ptfile.Dict, o zcore.OptimState, i, lo, hi int, shape []int64) {
	if o.Tensors == nil {
		state.Set(i, torchState(o, lo, hi, 0, shape))
		return
	}
	if i >= len(o.Tensors) || o.Tensors[i] == nil {
		return
	}
	d := ptfile.NewDict()
	for _, e := range o.Tensors[i] {
		switch v := e.Value.(type) {
		case optim.StateRef:
			if b, ok := o.State[string(v)]; ok {
				d.Set(e.Key, stateTensor(b[lo:hi], 0, shape))
			}
		case optim.Shaped:
			d.Set(e.Key, ptfile.ViewFloat32(shape, v))
		case []float32:
			d.Set(e.Key, ptfile.ViewFloat32([]int64{int64(len(v))}, v))
		case int64, float64:
			d.Set(e.Key, v)
		default:
			panic(fmt.Sprintf("checkpoint: optimizer state %q of parameter %d is a %T", e.Key, i, e.Value))
		}
	}
	state.Set(i, d)
}

// oneBitTensor reports whether a stage-0 state tensor is one of the 1-bit
// optimizers' per-tensor tensors rather than whole-buffer state.
func oneBitTensor(key string) bool {
	switch key {
	case "worker_error", "server_error", "momentum_accumulator":
		return true
	}
	return false
}

// trimTensors drops o.Tensors when no parameter's entry holds anything
// (every optimizer but the 1-bit ones).
func trimTensors(o *zcore.OptimState) {
	for _, e := range o.Tensors {
		if len(e) > 0 {
			return
		}
	}
	o.Tensors = nil
}
