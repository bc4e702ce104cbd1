package checkpoint

import (
	"fmt"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/ptfile"
	"github.com/dszero/dszero/zero"
)

// Stage-0 fp16: the model states' "optimizer" is the state_dict of the
// wrapper DeepSpeed 0.14.5 builds (zero.FP16Wrapper), in its key order:
//
//	dynamic_loss_scale  bool
//	cur_scale           int or float (below)
//	cur_iter            int
//	last_overflow_iter  int      ┐
//	scale_factor        2.0 | 2  │ when dynamic: FP16_UnfusedOptimizer's
//	scale_window        int      ┘ float 2.0, FP16_Optimizer's int 2
//	optimizer_state_dict          the torch optimizer's: one state per
//	                              parameter (unfused), or one for the flat
//	                              master (fused)
//	fp32_groups         [[fp32 copy per parameter]]   (unfused)
//	fp32_groups_flat    [flat fp32 master]            (fused)
//	clip_grad           float: gradient_clipping       (fused)
//
// cur_scale is a Python int while it is the initial 2**initial_scale_power
// of the config: FP16_UnfusedOptimizer's scale_factor 2.0 turns it into a
// float at the first growth or overflow, FP16_Optimizer's int 2 keeps it
// an int through growth, its true division by 2 at the first overflow
// makes it a float. A static scale is written as pyNumber writes it, and
// its cur_iter is the number of steps taken (skipped ones too).
//
// The master lives there, not in dszero's client state.

// fp16WrapperState is the wrapper's state_dict of stage-0 group g.
func fp16WrapperState(w zero.FP16Wrapper, st zero.State, g zcore.GroupState, l *model.Layout, plan dsconfig.Plan) *ptfile.Dict {
	sc := st.Scaler
	var cur any = pyNumber(sc.CurScale)
	if st.Dynamic {
		cur = sc.CurScale
		grown := sc.CurScale != float64(uint64(1)<<plan.Precision.InitialScalePower)
		if sc.LastOverflowIter < 0 && (w == zero.FP16Fused || !grown) {
			cur = int64(sc.CurScale)
		}
	}
	iter := int64(sc.CurIter)
	if !st.Dynamic {
		iter = st.GlobalSteps // _update_scale counts every step with a static scale too
	}
	d := ptfile.DictOf("dynamic_loss_scale", st.Dynamic, "cur_scale", cur, "cur_iter", iter)
	if st.Dynamic {
		var factor any = 2.0
		if w == zero.FP16Fused {
			factor = int64(2)
		}
		d.Set("last_overflow_iter", int64(sc.LastOverflowIter))
		d.Set("scale_factor", factor)
		d.Set("scale_window", plan.Precision.LossScaleWindow)
	}
	state := ptfile.NewDict()
	if w == zero.FP16Fused {
		setStage0State(state, g.Optim, 0, 0, len(g.Master), []int64{int64(len(g.Master))})
		d.Set("optimizer_state_dict", ptfile.DictOf("state", state, "param_groups", ptfile.List{paramGroup(g.Optim, 1, groupTypes(plan))}))
		d.Set("fp32_groups_flat", ptfile.List{ptfile.ViewFloat32([]int64{int64(len(g.Master))}, g.Master)})
		d.Set("clip_grad", plan.GradientClipping)
		return d
	}
	copies := make(ptfile.List, len(l.Specs))
	for i, sp := range l.Specs {
		state.Set(i, torchState(g.Optim, sp.Offset, sp.Offset+sp.Numel, 0, shape64(sp.Shape)))
		copies[i] = ptfile.ViewFloat32(shape64(sp.Shape), g.Master[sp.Offset:sp.Offset+sp.Numel])
	}
	d.Set("optimizer_state_dict", ptfile.DictOf("state", state, "param_groups", ptfile.List{paramGroup(g.Optim, len(l.Specs), groupTypes(plan))}))
	d.Set("fp32_groups", ptfile.List{copies})
	return d
}

// readFP16Wrapper reads the optimizer state and the fp32 master of a
// stage-0 fp16 wrapper's state_dict at optimizer (either kind, told by
// its keys), and reports whether the file has one.
func readFP16Wrapper(ms any, g *zcore.GroupState, l *model.Layout) (bool, error) {
	if _, err := ptfile.Lookup(ms, "optimizer.optimizer_state_dict"); err != nil {
		return false, nil
	}
	const p = "optimizer.optimizer_state_dict.state"
	if _, err := ptfile.Lookup(ms, "optimizer.fp32_groups_flat"); err == nil {
		if err := readTorchState(ms, p+"[0]", &g.Optim, nil, false); err != nil {
			return true, err
		}
		m, err := floats(ms, "optimizer.fp32_groups_flat[0]")
		if err != nil {
			return true, err
		}
		if len(m) != l.Numel {
			return true, fmt.Errorf("optimizer.fp32_groups_flat[0] holds %d elements, the model has %d: a checkpoint of another model", len(m), l.Numel)
		}
		g.Master = m
		trimTensors(&g.Optim)
		return true, nil
	}
	g.Master = make([]float32, 0, l.Numel)
	for i, sp := range l.Specs {
		if err := readTorchState(ms, fmt.Sprintf("%s[%d]", p, i), &g.Optim, nil, false); err != nil {
			return true, err
		}
		v, err := floats(ms, fmt.Sprintf("optimizer.fp32_groups[0][%d]", i))
		if err != nil {
			return true, err
		}
		if len(v) != sp.Numel {
			return true, fmt.Errorf("optimizer.fp32_groups[0][%d] holds %d elements, %s has %d: a checkpoint of another model", i, len(v), sp.Name, sp.Numel)
		}
		g.Master = append(g.Master, v...)
	}
	trimTensors(&g.Optim)
	return true, nil
}

// readFP16WrapperScaler reads the loss scale of a stage-0 fp16 wrapper's
// state_dict (DeepSpeed's own checkpoints; dszero's keep theirs in the
// client state too); false when the file has none.
func readFP16WrapperScaler(ms any, st *zero.State) (bool, error) {
	dyn, err := ptfile.Lookup(ms, "optimizer.dynamic_loss_scale")
	if err != nil {
		return false, nil
	}
	b, ok := dyn.(bool)
	if !ok {
		return true, fmt.Errorf("optimizer.dynamic_loss_scale is %s", ptfile.TypeName(dyn))
	}
	st.Dynamic = b
	if st.Scaler.CurScale, err = asFloat(ms, "optimizer.cur_scale"); err != nil {
		return true, err
	}
	it, err := asInt(ms, "optimizer.cur_iter")
	if err != nil {
		return true, err
	}
	st.Scaler.CurIter, st.Scaler.LastOverflowIter = int(it), -1
	if b {
		last, err := asInt(ms, "optimizer.last_overflow_iter")
		if err != nil {
			return true, err
		}
		st.Scaler.LastOverflowIter = int(last)
	}
	return true, nil
}
