package checkpoint

import (
	"fmt"
	"math"
	"strings"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/ptfile"
	"github.com/dszero/dszero/zero"
	"github.com/dszero/dszero/zero/lossscale"
	"github.com/dszero/dszero/zero/optim"
)

// DSVersion is the ds_version the files carry: the DeepSpeed release whose
// layout they follow.
const DSVersion = "0.14.5"

// ZeroStageEnum's members, by stage (deepspeed.runtime.zero.config).
var stageEnum = [...]string{"disabled", "optimizer_states", "gradients", "weights"}

func dsObject(module, name string, state *ptfile.Dict) *ptfile.Object {
	return &ptfile.Object{Module: module, Name: name, Kind: ptfile.NewObject, Args: ptfile.Tuple{}, State: state}
}

func shape64(s []int) []int64 {
	out := make([]int64, len(s))
	for i, x := range s {
		out[i] = int64(x)
	}
	return out
}

// lossScaler is DeepSpeed's pickled LossScaler.
func lossScaler(st zero.State) *ptfile.Object {
	c := st.ScalerConfig
	if !st.Dynamic || c == nil {
		return dsObject("deepspeed.runtime.fp16.loss_scaler", "LossScaler", ptfile.DictOf("cur_scale", st.Scaler.CurScale, "dynamic", st.Dynamic))
	}
	// DynamicLossScaler's attributes, in __init__'s order; DeepSpeed's
	// load_state_dict adopts the unpickled object as the run's scaler.
	return dsObject("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler", ptfile.DictOf(
		"cur_scale", st.Scaler.CurScale, "dynamic", true,
		"cur_iter", int64(st.Scaler.CurIter), "last_overflow_iter", int64(st.Scaler.LastOverflowIter),
		"scale_factor", c.ScaleFactor, "scale_window", int64(c.ScaleWindow), "min_scale", pyNumber(c.MinScale),
		"delayed_shift", int64(c.DelayedShift), "cur_hysteresis", int64(st.Scaler.CurHysteresis),
		"consecutive_hysteresis", c.ConsecutiveHysteresis, "raise_error_at_min_scale", c.RaiseErrorAtMinScale,
		"dtype", ptfile.Float16))
}

// pyNumber is x as Python keeps a number read from JSON: an int when
// integral.
func pyNumber(x float64) any {
	if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
		return int64(x)
	}
	return x
}

// clientState is what an exact resume needs beyond DeepSpeed's keys.
func clientState(st zero.State) *ptfile.Dict {
	return ptfile.DictOf("format", 1, "zero_stage", st.Strategy.Stage,
		"loss_scaler", ptfile.DictOf("cur_scale", st.Scaler.CurScale, "cur_iter", st.Scaler.CurIter,
			"last_overflow_iter", st.Scaler.LastOverflowIter, "cur_hysteresis", st.Scaler.CurHysteresis, "dynamic", st.Dynamic))
}

// torchState is one flat parameter's entry of a torch optimizer's state:
// views of elements [lo, hi) of o's buffers, followed by pad zeros (the
// padding of a stage-1/2 partition), as a tensor of shape.
func torchState(o zcore.OptimState, lo, hi, pad int, shape []int64) *ptfile.Dict {
	d := ptfile.NewDict()
	if strings.HasPrefix(o.Name, "torch.") {
		d.Set("step", ptfile.FromFloat32(nil, []float32{float32(o.Steps)}))
	} else {
		d.Set("step", o.Steps)
	}
	for _, n := range o.Names {
		if v, ok := o.State[n]; ok {
			d.Set(n, stateTensor(v[lo:hi], pad, shape))
		}
	}
	return d
}

// streamedState is torchState of a group read from where it lives
// (zcore.StreamedGroup), as tensors of shape.
func streamedState(o zcore.OptimState, sg *zcore.StreamedGroup, shape []int64) *ptfile.Dict {
	d := ptfile.NewDict()
	if strings.HasPrefix(o.Name, "torch.") {
		d.Set("step", ptfile.FromFloat32(nil, []float32{float32(o.Steps)}))
	} else {
		d.Set("step", o.Steps)
	}
	for _, n := range o.Names {
		if r, ok := sg.Readers[n]; ok {
			d.Set(n, ptfile.NewSourceTensor(ptfile.Float32, shape, r))
		}
	}
	return d
}

// pyTypes says which Python types the optimizer's param group holds
// where a Go float64 cannot tell: betas a tuple (the optimizer's default,
// or OneCycle's cycled momentum; betas from the config stay the list JSON
// gave), and the params that are ints (dsconfig's Optimizer.IntParams:
// torch.optim.Adam's default weight_decay is the int 0). A scheduler
// writes lr as a float.
type pyTypes struct {
	betasTuple bool
	ints       map[string]bool
}

func groupTypes(plan dsconfig.Plan) pyTypes {
	t := pyTypes{betasTuple: !plan.Optimizer.BetasGiven || (plan.Scheduler.Type == "OneCycle" && plan.Scheduler.CycleMomentum),
		ints: map[string]bool{}}
	for k := range plan.Optimizer.IntParams {
		if k != "lr" || plan.Scheduler.Type == "" {
			t.ints[k] = true
		}
	}
	return t
}

// paramGroup is the optimizer's param_groups entry, params 0..n-1, with
// the Python types t.
func paramGroup(o zcore.OptimState, n int, t pyTypes) *ptfile.Dict {
	d := ptfile.NewDict()
	for _, k := range []string{"lr", "betas", "eps", "weight_decay", "amsgrad", "foreach", "maximize", "capturable", "differentiable", "fused",
		"momentum", "dampening", "nesterov", "lr_decay", "initial_accumulator_value", "bias_correction", "max_grad_norm", "max_coeff", "min_coeff", "step"} {
		if v, ok := o.Group[k]; ok {
			pv := pyValue(v)
			if l, isList := pv.(ptfile.List); isList && k == "betas" && t.betasTuple {
				pv = ptfile.Tuple(l)
			}
			if f, isFloat := pv.(float64); isFloat && t.ints[k] && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
				pv = int64(f)
			}
			d.Set(k, pv)
		}
	}
	params := make(ptfile.List, n)
	for i := range params {
		params[i] = i
	}
	d.Set("params", params)
	return d
}

func pyValue(v any) any {
	switch x := v.(type) {
	case [2]float64:
		return ptfile.List{x[0], x[1]}
	case []float64:
		l := make(ptfile.List, len(x))
		for i, f := range x {
			l[i] = f
		}
		return l
	case int:
		return int64(x)
	case float32:
		return float64(x)
	case []any: // LambdaLR's lr_lambdas
		l := make(ptfile.List, len(x))
		for i, e := range x {
			l[i] = pyValue(e)
		}
		return l
	case map[string]any:
		d := ptfile.NewDict()
		for k, e := range x {
			d.Set(k, pyValue(e))
		}
		return d
	}
	return v
}

// module is the state dict of the working parameters: views of one flat
// storage in the training dtype (stages 0–2), or empty placeholders
// (stage 3).
func module(l *model.Layout, work []float32, dtype device.DType, stage int) *ptfile.Dict {
	d := ptfile.NewOrderedDict()
	dt := ptfile.Float32
	switch dtype {
	case device.BF16:
		dt = ptfile.BFloat16
	case device.F16:
		dt = ptfile.Float16
	}
	if stage == 3 {
		for _, sp := range l.Specs {
			d.Set(sp.Name, ptfile.NewTensor(dt, []int64{0}, []byte{}))
		}
		return d
	}
	// The working parameters as the file holds them, rounded to 16 bits
	// a piece at a time as the writer reads them: no copy of the model.
	flat := ptfile.ViewFloat32([]int64{int64(len(work))}, work)
	if dt != ptfile.Float32 {
		flat = ptfile.NewSourceTensor(dt, []int64{int64(len(work))}, ptfile.Half16Source(dt, work))
	}
	for _, sp := range l.Specs {
		sh := shape64(sp.Shape)
		v, err := flat.View(int64(sp.Offset), sh, ptfile.ContiguousStride(sh))
		if err != nil {
			panic(err) // the layout's views lie inside its buffer
		}
		d.Set(sp.Name, v)
	}
	return d
}

func paramShapes(l *model.Layout, order []int) ptfile.List {
	d := ptfile.NewOrderedDict()
	for _, i := range order {
		d.Set(l.Specs[i].Name, ptfile.Size(shape64(l.Specs[i].Shape)))
	}
	return ptfile.List{d}
}

// modelStates is the model-states file of a rank (stages 0–2: rank 0's).
func modelStates(e *zero.Engine, st zero.State, l *model.Layout, work []float32, dsConfig any) *ptfile.Dict {
	plan := e.Plan()
	stage := st.Strategy.Stage
	order := make([]int, len(l.Specs))
	for i := range order {
		order[i] = i
	}
	if stage == 1 || stage == 2 {
		_, order = zcore.FlatOrder(l, st.Strategy.World, plan.Zero.RoundRobinGradients)
	}
	d := ptfile.NewDict()
	d.Set("module", module(l, work, plan.Precision.DType, stage))
	d.Set("buffer_names", ptfile.List{})
	dtype := plan.Precision.DType
	if stage == 0 && !partitionedStage0(stage, dtype) {
		g := st.Strategy.Groups[0]
		if w := zero.FP16WrapperOf(plan); w != zero.NoFP16Wrapper {
			d.Set("optimizer", fp16WrapperState(w, st, g, l, plan)) // the master inside
		} else {
			state := ptfile.NewDict()
			for i, sp := range l.Specs {
				setStage0State(state, g.Optim, i, sp.Offset, sp.Offset+sp.Numel, shape64(sp.Shape))
			}
			d.Set("optimizer", ptfile.DictOf("state", state, "param_groups", ptfile.List{paramGroup(g.Optim, len(l.Specs), groupTypes(plan))}))
		}
		d.Set("param_shapes", nil)
	} else {
		d.Set("optimizer", nil)
		d.Set("param_shapes", paramShapes(l, order))
	}
	var frozen any
	if stage >= 2 {
		frozen = ptfile.NewOrderedDict()
	}
	d.Set("frozen_param_shapes", frozen)
	if stage == 0 && !partitionedStage0(stage, dtype) {
		d.Set("shared_params", nil)
	} else {
		d.Set("shared_params", ptfile.NewDict())
	}
	if stage >= 2 {
		frozen = ptfile.NewOrderedDict() // a second, distinct dict
	}
	d.Set("frozen_param_fragments", frozen)
	if st.Scheduler != nil {
		sd := ptfile.NewDict()
		for k, v := range st.Scheduler {
			sd.Set(k, pyValue(v))
		}
		d.Set("lr_scheduler", sd)
	} else {
		d.Set("lr_scheduler", nil)
	}
	d.Set("data_sampler", nil)
	d.Set("random_ltd", nil)
	d.Set("sparse_tensor_module_names", ptfile.Set{})
	d.Set("skipped_steps", st.SkippedSteps)
	d.Set("global_steps", st.GlobalSteps)
	d.Set("global_samples", st.GlobalSteps*plan.Batch.TrainBatchSize)
	d.Set("dp_world_size", int64(st.Strategy.World))
	d.Set("mp_world_size", int64(1))
	d.Set("ds_config", dsConfig)
	d.Set("ds_version", DSVersion)
	cs := clientState(st)
	if stage == 0 && !partitionedStage0(stage, dtype) {
		if r := resumeList(st.Strategy.Groups); r != nil {
			cs.Set("optim_resume", r)
		}
	}
	d.Set(clientKey, cs)
	return d
}

// optimStates is rank's optim-states file (stages 1–3, and stage 0 when
// partitionedStage0).
func optimStates(e *zero.Engine, st zero.State, l *model.Layout, dsConfig any) *ptfile.Dict {
	plan := e.Plan()
	ss := st.Strategy
	if partitionedStage0(ss.Stage, plan.Precision.DType) {
		return withResume(ptfile.DictOf("optimizer_state_dict", bf16OptimizerState(ss, l, plan), "ds_config", dsConfig, "ds_version", DSVersion), ss.Groups)
	}
	common := func(d *ptfile.Dict) {
		d.Set("loss_scaler", lossScaler(st))
		d.Set("dynamic_loss_scale", st.Dynamic)
		d.Set("overflow", st.Overflow)
	}
	enum := &ptfile.Object{Module: "deepspeed.runtime.zero.config", Name: "ZeroStageEnum", Kind: ptfile.EnumMember, Attr: stageEnum[ss.Stage]}
	osd := ptfile.NewDict()
	if ss.Stage == 3 {
		osd.Set("zero_stage", enum)
		common(osd)
		osd.Set("partition_count", int64(ss.World))
		state := ptfile.NewDict()
		var flats ptfile.List
		for g, gs := range ss.Groups {
			if sg := gs.Streamed; sg != nil {
				// In swap files: each tensor read from its file as it is written.
				n := []int64{int64(sg.N)}
				state.Set(g, streamedState(gs.Optim, sg, n))
				flats = append(flats, ptfile.NewSourceTensor(ptfile.Float32, n, sg.Readers["master"]))
				continue
			}
			n := len(gs.Master)
			state.Set(g, torchState(gs.Optim, 0, n, 0, []int64{int64(n)}))
			flats = append(flats, ptfile.ViewFloat32([]int64{int64(n)}, gs.Master))
		}
		osd.Set("optimizer_state_dict", ptfile.DictOf("state", state, "param_groups", ptfile.List{paramGroup(ss.Groups[0].Optim, len(ss.Groups), groupTypes(plan))}))
		osd.Set("fp32_flat_groups", flats)
	} else {
		common(osd)
		g := ss.Groups[0]
		partitionState(osd, g, 0, len(g.Master), l, ss, plan.GradientClipping, plan.Zero.RoundRobinGradients, groupTypes(plan), enum)
	}
	return withResume(ptfile.DictOf("optimizer_state_dict", osd, "ds_config", dsConfig, "ds_version", DSVersion), ss.Groups)
}

// withResume adds the groups' optimizer resume state (zcore.OptimState's
// Resume), if any, as dszero's client state "dszero.optim_resume": one
// list of floats (or None) per group.
func withResume(d *ptfile.Dict, gs []zcore.GroupState) *ptfile.Dict {
	if r := resumeList(gs); r != nil {
		d.Set(clientKey, ptfile.DictOf("optim_resume", r))
	}
	return d
}

func resumeList(gs []zcore.GroupState) ptfile.List {
	var out ptfile.List
	some := false
	for _, g := range gs {
		if g.Optim.Resume == nil {
			out = append(out, nil)
			continue
		}
		l := make(ptfile.List, len(g.Optim.Resume))
		for i, x := range g.Optim.Resume {
			l[i] = x
		}
		out, some = append(out, l), true
	}
	if !some {
		return nil
	}
	return out
}

// readResume reads the groups' resume state from path (a list per group)
// when the file has it.
func readResume(v any, path string, gs []zcore.GroupState) error {
	x, err := ptfile.Lookup(v, path)
	if err != nil || x == nil {
		return nil // none: a torch optimizer, or a checkpoint DeepSpeed wrote
	}
	l, ok := x.(ptfile.List)
	if !ok || len(l) != len(gs) {
		return fmt.Errorf("%s: want a list of %d groups, got %s", path, len(gs), ptfile.TypeName(x))
	}
	for g, e := range l {
		if e == nil {
			continue
		}
		vals, ok := e.(ptfile.List)
		if !ok {
			return fmt.Errorf("%s[%d] is %s", path, g, ptfile.TypeName(e))
		}
		gs[g].Optim.Resume = make([]float64, len(vals))
		for i, x := range vals {
			f, ok := x.(float64)
			if !ok {
				return fmt.Errorf("%s[%d][%d] is %s, not a float", path, g, i, ptfile.TypeName(x))
			}
			gs[g].Optim.Resume[i] = f
		}
	}
	return nil
}

// stateTensor is v followed by pad zeros as a float32 tensor of shape,
// streamed from v (ptfile.Source) rather than copied.
func stateTensor(v []float32, pad int, shape []int64) *ptfile.Tensor {
	if pad == 0 {
		return ptfile.ViewFloat32(shape, v)
	}
	n := int64(len(v))
	return ptfile.NewSourceTensor(ptfile.Float32, shape, ptfile.PaddedSource(ptfile.Float32Source(v), 4*n, 4*(n+int64(pad))))
}

// bf16OptimizerState is DeepSpeed's BF16_Optimizer state at stage 0: the
// rank's stage-1 partition of the whole fp32 master and optimizer state
// every rank holds, without a loss scaler or zero_stage.
func bf16OptimizerState(ss zcore.StrategyState, l *model.Layout, plan dsconfig.Plan) *ptfile.Dict {
	flat, _ := zcore.FlatOrder(l, ss.World, false)
	lo, _ := flat.Partition(ss.Rank)
	osd := ptfile.NewDict()
	partitionState(osd, ss.Groups[0], lo, lo+flat.SavedLen(ss.Rank), l, ss, plan.GradientClipping, false, groupTypes(plan), nil)
	// Unlike ZeRO-1/2, BF16_Optimizer saves its fp32 partition with the
	// padding (state_dict's fp32_groups_flat_partition, zeros there): a
	// partition of PartitionSize elements on every rank.
	n := flat.SavedLen(ss.Rank)
	osd.Set("single_partition_of_fp32_groups", ptfile.List{stateTensor(ss.Groups[0].Master[lo:lo+n], flat.PartitionSize-n, []int64{int64(flat.PartitionSize)})})
	return osd
}

// partitionState sets the keys of a stage-1/2 optimizer state (and
// BF16_Optimizer's, with no enum) for the rank's partition, elements
// [lo, hi) of g.
func partitionState(osd *ptfile.Dict, g zcore.GroupState, lo, hi int, l *model.Layout, ss zcore.StrategyState, clip float64, roundRobin bool, pt pyTypes, enum *ptfile.Object) {
	n := hi - lo
	flat, order := zcore.FlatOrder(l, ss.World, roundRobin)
	pad := flat.PartitionSize - flat.SavedLen(ss.Rank)
	osd.Set("clip_grad", clip)
	// The base optimizer's state is saved whole, padding included (its
	// state_dict(), elastic_checkpoint being off); the fp32 partition
	// without it. The padding's state is zero: it never has a gradient.
	osd.Set("base_optimizer_state", ptfile.DictOf("state", ptfile.DictOf(0, torchState(g.Optim, lo, hi, pad, []int64{int64(n + pad)})),
		"param_groups", ptfile.List{paramGroup(g.Optim, 1, pt)}))
	osd.Set("single_partition_of_fp32_groups", ptfile.List{ptfile.ViewFloat32([]int64{int64(n)}, g.Master[lo:hi])})
	if enum != nil {
		osd.Set("zero_stage", enum)
	}
	osd.Set("group_paddings", ptfile.List{int64(pad)})
	osd.Set("partition_count", ptfile.List{int64(ss.World)})
	osd.Set("ds_version", DSVersion)
	maps := ptfile.NewOrderedDict()
	for _, f := range flat.SliceMappings(ss.Rank) {
		maps.Set(l.Specs[order[f.Param]].Name, dsObject("deepspeed.utils.tensor_fragment", "fragment_address",
			ptfile.DictOf("numel", int64(f.Len), "start", int64(f.PartitionOffset))))
	}
	osd.Set("param_slice_mappings", ptfile.List{maps})
}

// defaultDSConfig is the part of the config DeepSpeed's ds_config key
// shows that the plan knows.
func defaultDSConfig(e *zero.Engine) *ptfile.Dict {
	p := e.Plan()
	d := ptfile.DictOf("train_micro_batch_size_per_gpu", p.Batch.TrainMicroBatchSizePerGPU,
		"gradient_accumulation_steps", p.Batch.GradientAccumulationSteps,
		"gradient_clipping", p.GradientClipping,
		"optimizer", ptfile.DictOf("type", p.Optimizer.Type, "params", ptfile.DictOf("lr", p.Optimizer.LR)),
		"zero_optimization", ptfile.DictOf("stage", int64(p.Zero.Stage)))
	if p.Precision.DType == device.BF16 {
		d.Set("bf16", ptfile.DictOf("enabled", true))
	}
	if p.Precision.DType == device.F16 {
		d.Set("fp16", ptfile.DictOf("enabled", true))
	}
	return d
}

// --- reading ---

func get[T any](v any, path string) (T, error) { return ptfile.Get[T](v, path) }

func asInt(v any, path string) (int64, error) {
	x, err := ptfile.Lookup(v, path)
	if err != nil {
		return 0, err
	}
	switch n := x.(type) {
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case bool:
		if n {
			return 1, nil
		}
		return 0, nil
	}
	return 0, fmt.Errorf("%s is %s, not an int", path, ptfile.TypeName(x))
}

func asFloat(v any, path string) (float64, error) {
	x, err := ptfile.Lookup(v, path)
	if err != nil {
		return 0, err
	}
	switch n := x.(type) {
	case float64:
		return n, nil
	case int64:
		return float64(n), nil
	}
	return 0, fmt.Errorf("%s is %s, not a float", path, ptfile.TypeName(x))
}

func floats(v any, path string) ([]float32, error) {
	t, err := get[*ptfile.Tensor](v, path)
	if err != nil {
		return nil, err
	}
	return values(t, nil)
}

// readTorchState reads one flat parameter's optimizer state into o
// (State keyed by name, appended in order for stage 0's per-parameter
// entries); a tensor is read into into[name] when that has its size, or,
// when padded (stages 1 and 2: the tensors hold the partition's padding,
// into's buffers do not), when it is longer than into[name] by zeros.
func readTorchState(v any, path string, o *zcore.OptimState, into map[string][]float32, padded bool) error {
	stage0 := into == nil && !padded // one entry per parameter: the 1-bit optimizers' entries too
	var entries []optim.Entry
	var pre func(name string, x any) (bool, error)
	if stage0 {
		defer func() { o.Tensors = append(o.Tensors, entries) }()
		pre = func(name string, x any) (bool, error) {
			switch s := x.(type) {
			case int64, float64:
				if name != "step" {
					entries = append(entries, optim.Entry{Key: name, Value: s})
					return true, nil
				}
			case *ptfile.Tensor:
				if oneBitTensor(name) {
					f, err := values(s, nil)
					entries = append(entries, optim.Entry{Key: name, Value: f})
					return true, err
				}
			}
			return false, nil
		}
	}
	return eachStateTensor(v, path, o, pre, func(name string, t *ptfile.Tensor) error {
		var f []float32
		var err error
		if dst := into[name]; padded && len(dst) > 0 && t.Numel() > int64(len(dst)) {
			f, err = paddedValues(t, dst)
		} else {
			f, err = values(t, dst)
		}
		if err != nil {
			return err
		}
		if o.State[name] == nil {
			o.State[name] = f
		} else {
			o.State[name] = append(o.State[name], f...)
		}
		return nil
	})
}

// eachStateTensor walks the torch optimizer state entry at path (one
// parameter's: a dict of step and state tensors): step goes to o.Steps,
// every other value must be a tensor and goes to tensor. pre, when not
// nil, sees each entry first and takes those it reports handled. Errors
// name the entry's path.
func eachStateTensor(v any, path string, o *zcore.OptimState, pre func(name string, x any) (bool, error), tensor func(name string, t *ptfile.Tensor) error) error {
	d, err := get[*ptfile.Dict](v, path)
	if err != nil {
		return err
	}
	for k, x := range d.All() {
		name, _ := k.(string)
		if pre != nil {
			if done, err := pre(name, x); err != nil {
				return fmt.Errorf("%s.%s: %w", path, name, err)
			} else if done {
				continue
			}
		}
		if name == "step" {
			if o.Steps, err = stepOf(path, x); err != nil {
				return err
			}
			continue
		}
		t, ok := x.(*ptfile.Tensor)
		if !ok {
			return fmt.Errorf("%s.%s is %s, not a tensor", path, name, ptfile.TypeName(x))
		}
		if err := tensor(name, t); err != nil {
			return fmt.Errorf("%s.%s: %w", path, name, err)
		}
	}
	return nil
}

// stepOf is the value x of an optimizer state's step at path: a scalar
// tensor (torch's) or an int.
func stepOf(path string, x any) (int64, error) {
	switch s := x.(type) {
	case *ptfile.Tensor:
		f, err := s.Float32s()
		if err != nil || len(f) != 1 {
			return 0, fmt.Errorf("%s.step: not a scalar", path)
		}
		return int64(f[0]), nil
	case int64:
		return s, nil
	}
	return 0, fmt.Errorf("%s.step is %s", path, ptfile.TypeName(x))
}

// readScaler reads the loss scaler from the dszero client state.
func readScaler(ms any, st *zero.State) error {
	p := "dszero.loss_scaler"
	var err error
	if st.Scaler.CurScale, err = asFloat(ms, p+".cur_scale"); err != nil {
		return err
	}
	var it, last, hyst, dyn int64
	for _, f := range []struct {
		k string
		p *int64
	}{{"cur_iter", &it}, {"last_overflow_iter", &last}, {"cur_hysteresis", &hyst}, {"dynamic", &dyn}} {
		if *f.p, err = asInt(ms, p+"."+f.k); err != nil {
			return err
		}
	}
	st.Scaler = lossscale.State{CurScale: st.Scaler.CurScale, CurIter: int(it), LastOverflowIter: int(last), CurHysteresis: int(hyst)}
	st.Dynamic = dyn != 0
	return nil
}
