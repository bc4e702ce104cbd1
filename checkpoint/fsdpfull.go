package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/dszero/dszero/checkpoint/dcp"
	"github.com/dszero/dszero/checkpoint/hfstate"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/ptfile"
	"github.com/dszero/dszero/zero"
)

// Accelerate's FULL_STATE_DICT: save_fsdp_model and save_fsdp_optimizer
// gather the whole state dicts on rank 0, which torch.saves them as
// pytorch_model_fsdp.bin (an OrderedDict name → tensor) and optimizer.bin
// ({"state": {name: {"step", "exp_avg", "exp_avg_sq"}}, "param_groups":
// [...]}). SaveFull writes them the same way — rank 0 holds the whole
// model's state while it writes, as FSDP's rank-0 gather does — by
// saving the sharded form first and consolidating it tensor by tensor.
// LoadFull reads only each rank's pieces of every tensor from the files
// (ptfile's ReadAt), at any stage and world size.

// SaveFull writes the engine's state into dir as Accelerate's
// FULL_STATE_DICT (dir/pytorch_model_fsdp.bin, dir/optimizer.bin) and
// dszero's engine state (dir/dszero_state.pt). Every rank calls it. The
// optimizer must be Adam-like (exp_avg and exp_avg_sq), as the files'
// format is torch's AdamW state dict.
func SaveFull(dir string, e *zero.Engine, o Options) error {
	sy := o.syncer()
	tmp := filepath.Join(dir, ".full.tmp")
	if err := SaveSharded(tmp, e, o); err != nil {
		return err
	}
	var err error
	if sy.rank() == 0 {
		err = consolidate(tmp, dir, o.Layout)
	}
	return sy.agree(err, "write the full state dicts of "+dir)
}

// consolidate writes the full state dicts from the sharded ones in tmp,
// moves the engine state beside them and removes tmp.
func consolidate(tmp, dir string, l *model.Layout) error {
	mc, err := dcp.Open(filepath.Join(tmp, hfstate.ModelDir(0)))
	if err != nil {
		return err
	}
	defer mc.Close()
	oc, err := dcp.Open(filepath.Join(tmp, hfstate.OptimizerDir(0)))
	if err != nil {
		return err
	}
	defer oc.Close()
	params := make([]hfstate.Param, len(l.Specs))
	states := make([]hfstate.AdamWParam, len(l.Specs))
	names := make([]string, len(l.Specs))
	for i, sp := range l.Specs {
		t, err := mc.ReadTensor(hfstate.ModelFQN(sp.Name))
		if err != nil {
			return err
		}
		params[i], names[i] = hfstate.Param{Name: sp.Name, Tensor: t}, sp.Name
		if _, ok := oc.Meta.Item(hfstate.OptimizerFQN(sp.Name, "exp_avg")); !ok {
			return fmt.Errorf("checkpoint: FULL_STATE_DICT's optimizer.bin holds torch AdamW's state (exp_avg, exp_avg_sq); this run's optimizer has none (another optimizer, or no step taken yet): save as SHARDED_STATE_DICT")
		}
		if states[i], err = hfstate.ReadAdamW(oc, sp.Name, 1, 0); err != nil {
			return err
		}
	}
	g := hfstate.AdamWGroup{Params: names}
	lr, err1 := paramGroupFloat(oc, "lr")
	eps, err2 := paramGroupFloat(oc, "eps")
	wd, err3 := paramGroupFloat(oc, "weight_decay")
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	g.LR, g.InitialLR, g.Eps, g.WeightDecay = lr, lr, eps, wd
	if b, err := oc.ReadValue(hfstate.ParamGroupFQN(0, "betas"), ptfile.Options{}); err == nil {
		if t, ok := b.(ptfile.Tuple); ok && len(t) == 2 {
			b0, ok0 := t[0].(float64)
			b1, ok1 := t[1].(float64)
			if ok0 && ok1 {
				g.Betas = [2]float64{b0, b1}
			}
		}
	}
	if err := hfstate.WriteFullModel(filepath.Join(dir, hfstate.FullModelName(0)), params); err != nil {
		return err
	}
	if err := hfstate.WriteFullOptimizer(filepath.Join(dir, hfstate.FullOptimizerName(0)), states, []hfstate.AdamWGroup{g}); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(tmp, EngineStateName), filepath.Join(dir, EngineStateName)); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return syncDir(dir)
}

func paramGroupFloat(c *dcp.Checkpoint, key string) (float64, error) {
	v, err := c.ReadValue(hfstate.ParamGroupFQN(0, key), ptfile.Options{})
	if err != nil {
		return 0, err
	}
	switch x := v.(type) {
	case float64:
		return x, nil
	case int64:
		return float64(x), nil
	}
	return 0, fmt.Errorf("checkpoint: %s: param_groups[0][%q] is %s", c.Dir, key, ptfile.TypeName(v))
}

// IsFull reports whether dir holds Accelerate's FULL_STATE_DICT files.
func IsFull(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, hfstate.FullModelName(0)))
	return err == nil
}

// LoadFull restores the engine's rank state from the full state dicts in
// dir: each rank reads its pieces of every tensor. Every rank calls it,
// on a freshly built engine.
func LoadFull(dir string, e *zero.Engine, o Options) error {
	return loadWith(dir, e, o, "load the full state dicts of "+dir, readFull)
}

func readFull(dir string, e *zero.Engine, l *model.Layout) (zero.State, error) {
	plan := e.Plan()
	if plan.Zero.RoundRobinGradients {
		return zero.State{}, fmt.Errorf("checkpoint %s: loading full state dicts into round_robin_gradients partitions is not supported; turn round_robin_gradients off", dir)
	}
	mpath, opath := filepath.Join(dir, hfstate.FullModelName(0)), filepath.Join(dir, hfstate.FullOptimizerName(0))
	mf, err := ptfile.Open(mpath, ptfile.Options{})
	if err != nil {
		return zero.State{}, err
	}
	defer mf.Close()
	of, err := ptfile.Open(opath, ptfile.Options{})
	if err != nil {
		return zero.State{}, err
	}
	defer of.Close()
	st, err := e.ExportState()
	if err != nil {
		return st, err
	}
	gs := st.Strategy.Groups
	if len(gs) == 0 {
		return st, fmt.Errorf("checkpoint %s: this run's rank has no fp32 groups", dir)
	}
	n := 0
	for _, g := range gs {
		n += len(g.Master)
	}
	keys := []string{"", "exp_avg", "exp_avg_sq"}
	dsts := map[string][]float32{}
	for _, k := range keys {
		dsts[k] = make([]float32, n)
	}
	tensor := func(k string, sp *model.ParamSpec) (*ptfile.File, *ptfile.Tensor, string, error) {
		f, root, key := mf, mf.Root, sp.Name
		if k != "" {
			f, root, key = of, of.Root, "state."+sp.Name+"."+k
		}
		where := mpath + ": " + key
		if k != "" {
			where = opath + ": " + key
		}
		v, err := lookupKey(root, key, k != "")
		if err != nil {
			return nil, nil, where, fmt.Errorf("checkpoint %s: %w", where, err)
		}
		t, ok := v.(*ptfile.Tensor)
		if !ok {
			return nil, nil, where, fmt.Errorf("checkpoint %s is %s, not a tensor", where, ptfile.TypeName(v))
		}
		return f, t, where, nil
	}
	world, part := partitioning(st)
	eachPiece(plan.Zero.Stage, world, part, l, func(sp *model.ParamSpec, a, b, at int) {
		for _, k := range keys {
			if err != nil {
				return
			}
			f, t, where, terr := tensor(k, sp)
			if terr != nil {
				err = terr
				return
			}
			switch {
			case !equalShape(t.Shape, sp.Shape):
				err = fmt.Errorf("checkpoint %s is %v, this model's %s is %v: use the model the checkpoint was trained with", where, t.Shape, sp.Name, sp.Shape)
			case t.DType != ptfile.Float32 || !t.Contiguous():
				err = fmt.Errorf("checkpoint %s is a %s tensor with strides %v: dszero resumes contiguous fp32 state dicts", where, t.DType, t.Stride)
			default:
				raw := make([]byte, 4*(b-a))
				if err = f.ReadAt(t.Storage, raw, 4*(t.Offset+int64(a))); err == nil {
					dst := dsts[k][at : at+b-a]
					for i := range dst {
						dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
					}
				}
			}
		}
	})
	if err != nil {
		return st, err
	}
	_, stepT, where, err := tensor("step", &l.Specs[0])
	if err != nil {
		return st, err
	}
	step := make([]byte, 4)
	if stepT.DType != ptfile.Float32 || stepT.Numel() != 1 {
		return st, fmt.Errorf("checkpoint %s is not a step count", where)
	}
	if err := of.ReadAt(stepT.Storage, step, 4*stepT.Offset); err != nil {
		return st, err
	}
	return loaded(dir, st, dsts, int64(math.Float32frombits(binary.LittleEndian.Uint32(step))))
}

// lookupKey finds key in root: a parameter name (dots and all) in a
// model state dict; "state.NAME.K" in an optimizer's.
func lookupKey(root any, key string, optim bool) (any, error) {
	d, ok := root.(*ptfile.Dict)
	if !ok {
		return nil, fmt.Errorf("the file holds %s, not a state dict", ptfile.TypeName(root))
	}
	if !optim {
		v, ok := d.Get(key)
		if !ok {
			return nil, fmt.Errorf("no such parameter: the checkpoint is of another model")
		}
		return v, nil
	}
	sv, ok := d.Get("state")
	sd, isDict := sv.(*ptfile.Dict)
	if !ok || !isDict {
		return nil, fmt.Errorf("no \"state\" dict: not an optimizer state dict")
	}
	rest := key[len("state."):]
	for i := len(rest) - 1; i >= 0; i-- {
		if rest[i] == '.' {
			pv, ok := sd.Get(rest[:i])
			pd, isDict := pv.(*ptfile.Dict)
			if !ok || !isDict {
				return nil, fmt.Errorf("no optimizer state for %s", rest[:i])
			}
			v, ok := pd.Get(rest[i+1:])
			if !ok {
				return nil, fmt.Errorf("no %s in the optimizer state of %s", rest[i+1:], rest[:i])
			}
			return v, nil
		}
	}
	return nil, fmt.Errorf("bad key %s", key)
}
