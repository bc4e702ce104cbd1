package checkpoint

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/dszero/dszero/checkpoint/dcp"
	"github.com/dszero/dszero/checkpoint/hfstate"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/ptfile"
	"github.com/dszero/dszero/zero"
)

// Accelerate's SHARDED_STATE_DICT. FSDP users save intermediate
// checkpoints as sharded state dicts: save_fsdp_model and
// save_fsdp_optimizer hand dcp.save {"model": model_sd} and {"optimizer":
// optim_sd}, written to pytorch_model_fsdp_0/ and optimizer_0/ in
// torch.distributed.checkpoint's format (package dcp; the names and keys
// in package hfstate). SaveSharded writes that from a ZeRO engine at any
// stage: every rank writes the pieces of each parameter its partition
// holds — a flat range of the parameter, saved as the boxes that tile it
// (dcp.FlatBoxes) — so the chunks are ZeRO's, not FSDP's rows, and any
// reader that plans by boxes (torch's DefaultLoadPlanner, LoadSharded)
// reads them at any world size. The fp32 master weights are the model's
// state dict, as FSDP's sharded state dict of fp32 parameters is.
//
// What an exact resume needs beyond torch's state dicts — the global and
// skipped step counts, the loss scaler, DeepSpeed's lr scheduler state,
// the optimizer's running state outside its state dict — rank 0 writes
// to dszero_state.pt beside them (Accelerate's own extra files,
// scheduler.bin and random_states_R.pkl, hold torch objects dszero does
// not have). A checkpoint without it (one torch wrote) loads into an
// engine without an lr scheduler or loss scaler, from its optimizer's
// step count.

// EngineStateName is the file of dszero's engine state beside a sharded
// state dict.
const EngineStateName = "dszero_state.pt"

// written is one rank's dcp results, passed to rank 0 through the
// checkpoint directory (the ranks may be processes on several machines
// sharing the directory, as a checkpoint's files are).
type written struct {
	Model, Optim []dcp.Written
}

func writtenName(rank int) string { return fmt.Sprintf(".dszero_written_%d.json", rank) }

// SaveSharded writes the engine's state into dir as Accelerate's
// SHARDED_STATE_DICT (dir/pytorch_model_fsdp_0, dir/optimizer_0) and
// dszero's engine state (dir/dszero_state.pt). Every rank calls it; rank 0
// writes each .metadata once every rank's files are complete, so a crash
// mid-save leaves no index to load.
func SaveSharded(dir string, e *zero.Engine, o Options) error {
	sy := o.syncer()
	rank := sy.rank()
	modelDir, optimDir := filepath.Join(dir, hfstate.ModelDir(0)), filepath.Join(dir, hfstate.OptimizerDir(0))
	var err error
	if rank == 0 {
		err = errors.Join(dcp.Prepare(modelDir), dcp.Prepare(optimDir))
	}
	if err = sy.agree(err, "prepare the sharded checkpoint "+dir); err != nil {
		return err
	}
	st, err := e.ExportState()
	var w written
	if err == nil {
		w, err = saveShardedRank(modelDir, optimDir, e, st, o.Layout, rank)
	}
	if err == nil {
		b, _ := json.Marshal(w)
		err = writeFileSync(filepath.Join(dir, writtenName(rank)), b)
	}
	if err = sy.agree(err, "write its shards of checkpoint "+dir); err != nil {
		return err
	}
	if rank == 0 {
		err = finishSharded(dir, modelDir, optimDir, e, st, o.Layout, sy.world())
	}
	return sy.agree(err, "publish the sharded checkpoint "+dir)
}

// saveShardedRank writes rank's pieces of the master weights and
// optimizer state (rank 0 also the step counts and the param group).
func saveShardedRank(modelDir, optimDir string, e *zero.Engine, st zero.State, l *model.Layout, rank int) (written, error) {
	plan := e.Plan()
	if plan.Zero.RoundRobinGradients {
		return written{}, fmt.Errorf("checkpoint: a sharded state dict from round_robin_gradients partitions is not supported; save with DeepSpeed's layout (--save), or turn round_robin_gradients off")
	}
	gs := st.Strategy.Groups
	if len(gs) == 0 {
		return written{}, fmt.Errorf("checkpoint: rank %d has no fp32 groups", rank)
	}
	opt := gs[0].Optim
	// The master first, then each optimizer state in the optimizer's
	// order: the files come out the same on every save.
	keys, srcs := []string{""}, map[string][]float32{"": concat(gs, "")}
	for _, n := range opt.Names {
		if v := concat(gs, n); v != nil {
			keys, srcs[n] = append(keys, n), v
		}
	}
	var mitems, oitems []dcp.WriteItem
	// Stage 0 holds everything on every rank: rank 0 writes it. Hybrid
	// sharding (MiCS, HYBRID_SHARD) partitions over groups of
	// Strategy.World consecutive ranks, each group a replica: the first
	// group writes.
	world, part := partitioning(st)
	writes := rank < world
	if st.Strategy.Stage == 0 {
		writes = rank == 0
	}
	if writes {
		eachPiece(st.Strategy.Stage, world, part, l, func(sp *model.ParamSpec, a, b, at int) {
			size := shape64(sp.Shape)
			for _, box := range dcp.FlatBoxes(size, int64(a), int64(b)) {
				k := int(dcp.Numel(box.Sizes))
				for _, n := range keys {
					t := ptfile.FromFloat32(box.Sizes, srcs[n][at:at+k])
					if n == "" {
						mitems = append(mitems, dcp.TensorChunk(hfstate.ModelFQN(sp.Name), size, box.Offsets, t))
					} else {
						oitems = append(oitems, dcp.TensorChunk(hfstate.OptimizerFQN(sp.Name, n), size, box.Offsets, t))
					}
				}
				at += k
			}
		})
	}
	if rank == 0 {
		names := make(ptfile.List, len(l.Specs))
		for i, sp := range l.Specs {
			names[i] = sp.Name
			oitems = append(oitems, dcp.WholeTensor(hfstate.OptimizerFQN(sp.Name, "step"), ptfile.FromFloat32(nil, []float32{float32(opt.Steps)})))
		}
		for _, k := range slices.Sorted(maps.Keys(opt.Group)) {
			oitems = append(oitems, dcp.ValueItem(hfstate.ParamGroupFQN(0, k), groupValue(opt.Group[k])))
		}
		oitems = append(oitems, dcp.ValueItem(hfstate.ParamGroupFQN(0, "params"), names))
	}
	var w written
	var err error
	if w.Model, err = dcp.WriteRank(modelDir, rank, mitems); err != nil {
		return w, err
	}
	w.Optim, err = dcp.WriteRank(optimDir, rank, oitems)
	return w, err
}

// groupValue is a param group's value as torch holds it: betas a tuple.
func groupValue(v any) any {
	switch x := v.(type) {
	case []float64:
		t := make(ptfile.Tuple, len(x))
		for i, f := range x {
			t[i] = f
		}
		return t
	case [2]float64:
		return ptfile.Tuple{x[0], x[1]}
	case int:
		return int64(x)
	}
	return v
}

// eachPiece calls fn for each parameter piece rank holds at stage over
// world ranks: elements [a, b) of parameter sp lie at [at, at+b-a) of the
// rank's concatenated fp32 groups.
func eachPiece(stage, world, rank int, l *model.Layout, fn func(sp *model.ParamSpec, a, b, at int)) {
	pieces(stage, world, rank, layoutParams(l), func(lo, hi, at int) {
		for i := range l.Specs {
			sp := &l.Specs[i]
			// The flat buffer holds the parameters one after another in
			// Specs' order (layoutParams).
			a, b := max(lo, sp.Offset), min(hi, sp.Offset+sp.Numel)
			if a < b {
				fn(sp, a-sp.Offset, b-sp.Offset, at+a-lo)
			}
		}
	})
}

// finishSharded is rank 0's part once every rank's files are written:
// the two .metadata files and dszero_state.pt.
func finishSharded(dir, modelDir, optimDir string, e *zero.Engine, st zero.State, l *model.Layout, world int) error {
	ranks := make([]written, world)
	for r := range ranks {
		p := filepath.Join(dir, writtenName(r))
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("checkpoint: rank %d's shard list: %w (the ranks must share the checkpoint directory)", r, err)
		}
		if err := json.Unmarshal(b, &ranks[r]); err != nil {
			return fmt.Errorf("checkpoint: %s: %w", p, err)
		}
	}
	var mw, ow [][]dcp.Written
	for _, w := range ranks {
		mw, ow = append(mw, w.Model), append(ow, w.Optim)
	}
	var mm, om []dcp.Mapping
	for _, sp := range l.Specs {
		mm = append(mm, dcp.Mapping{Key: hfstate.ModelFQN(sp.Name), Path: []any{hfstate.ModelKey, sp.Name}})
		om = append(om, dcp.Mapping{Key: hfstate.OptimizerFQN(sp.Name, "step"), Path: []any{hfstate.OptimizerKey, "state", sp.Name, "step"}})
		for _, n := range st.Strategy.Groups[0].Optim.Names {
			om = append(om, dcp.Mapping{Key: hfstate.OptimizerFQN(sp.Name, n), Path: []any{hfstate.OptimizerKey, "state", sp.Name, n}})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(st.Strategy.Groups[0].Optim.Group)) {
		om = append(om, dcp.Mapping{Key: hfstate.ParamGroupFQN(0, k), Path: []any{hfstate.OptimizerKey, "param_groups", int64(0), k}})
	}
	om = append(om, dcp.Mapping{Key: hfstate.ParamGroupFQN(0, "params"), Path: []any{hfstate.OptimizerKey, "param_groups", int64(0), "params"}})
	if _, err := dcp.WriteMetadata(modelDir, mw, dcp.Options{Mappings: mm}); err != nil {
		return err
	}
	if _, err := dcp.WriteMetadata(optimDir, ow, dcp.Options{Mappings: keepWritten(om, ow)}); err != nil {
		return err
	}
	if err := writeEngineState(filepath.Join(dir, EngineStateName), e, st); err != nil {
		return err
	}
	for r := range ranks {
		os.Remove(filepath.Join(dir, writtenName(r)))
	}
	return syncDir(dir)
}

// keepWritten drops the mappings of optimizer state no rank wrote (a
// moment not created before the first step).
func keepWritten(ms []dcp.Mapping, ranks [][]dcp.Written) []dcp.Mapping {
	have := map[string]bool{}
	for _, ws := range ranks {
		for _, w := range ws {
			have[w.FQN] = true
		}
	}
	var out []dcp.Mapping
	for _, m := range ms {
		if have[m.Key] {
			out = append(out, m)
		}
	}
	return out
}

// writeEngineState writes dszero_state.pt: DeepSpeed's model-states keys
// for the counts and the scheduler, and dszero's client state.
func writeEngineState(path string, e *zero.Engine, st zero.State) error {
	d := ptfile.DictOf("global_steps", st.GlobalSteps, "skipped_steps", st.SkippedSteps, "zero_stage", int64(st.Strategy.Stage),
		"dp_world_size", int64(st.Strategy.World), "optimizer", st.Strategy.Groups[0].Optim.Name)
	if st.Scheduler != nil {
		sd := ptfile.NewDict()
		for k, v := range st.Scheduler {
			sd.Set(k, pyValue(v))
		}
		d.Set("lr_scheduler", sd)
	} else {
		d.Set("lr_scheduler", nil)
	}
	cs := clientState(st)
	if r := resumeList(st.Strategy.Groups[:1]); r != nil {
		cs.Set("optim_resume", r[0])
	}
	d.Set(clientKey, cs)
	if err := ptfile.Write(path, d); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// IsSharded reports whether dir holds a sharded state dict (a
// pytorch_model_fsdp_0 folder with its .metadata).
func IsSharded(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, hfstate.ModelDir(0), dcp.MetadataFile))
	return err == nil
}

// LoadSharded restores the engine's rank state from the sharded state
// dict in dir, whatever stage and world size wrote it: each rank reads
// the pieces of every parameter its partition holds. Every rank calls it,
// on a freshly built engine.
func LoadSharded(dir string, e *zero.Engine, o Options) error {
	return loadWith(dir, e, o, "load the sharded checkpoint "+dir, readSharded)
}

// loadWith is every rank reading its state from dir with read, agreeing
// that all of them could (what), and importing it.
func loadWith(dir string, e *zero.Engine, o Options, what string, read func(string, *zero.Engine, *model.Layout) (zero.State, error)) error {
	st, err := read(dir, e, o.Layout)
	if err = o.syncer().agree(err, what); err != nil {
		return err
	}
	if err := e.ImportState(st); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return nil
}

func readSharded(dir string, e *zero.Engine, l *model.Layout) (zero.State, error) {
	plan := e.Plan()
	if plan.Zero.RoundRobinGradients {
		return zero.State{}, fmt.Errorf("checkpoint %s: loading a sharded state dict into round_robin_gradients partitions is not supported; turn round_robin_gradients off", dir)
	}
	mc, err := dcp.Open(filepath.Join(dir, hfstate.ModelDir(0)))
	if err != nil {
		return zero.State{}, err
	}
	defer mc.Close()
	oc, err := dcp.Open(filepath.Join(dir, hfstate.OptimizerDir(0)))
	if err != nil {
		return zero.State{}, err
	}
	defer oc.Close()
	st, err := e.ExportState() // this run's layout, to be filled
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
	names := gs[0].Optim.Names
	dsts := map[string][]float32{"": make([]float32, n)}
	for _, nm := range names {
		if _, ok := oc.Meta.Item(hfstate.OptimizerFQN(l.Specs[0].Name, nm)); ok {
			dsts[nm] = make([]float32, n)
		}
	}
	world, part := partitioning(st)
	eachPiece(plan.Zero.Stage, world, part, l, func(sp *model.ParamSpec, a, b, at int) {
		if err != nil {
			return
		}
		for nm, dst := range dsts {
			c, fqn := mc, hfstate.ModelFQN(sp.Name)
			if nm != "" {
				c, fqn = oc, hfstate.OptimizerFQN(sp.Name, nm)
			}
			if err = readPiece(c, fqn, sp, a, b, dst[at:at+b-a]); err != nil {
				return
			}
		}
	})
	if err != nil {
		return st, err
	}
	step, err := oc.ReadTensor(hfstate.OptimizerFQN(l.Specs[0].Name, "step"))
	if err != nil {
		return st, err
	}
	sv, err := step.Float32s()
	if err != nil || len(sv) != 1 {
		return st, fmt.Errorf("checkpoint %s: %s is not a step count", dir, hfstate.OptimizerFQN(l.Specs[0].Name, "step"))
	}
	return loaded(dir, st, dsts, int64(sv[0]))
}

// loaded puts the pieces read, the master (key "") and each optimizer
// state concatenated over the rank's groups, into st's groups, with the
// step count, and reads dszero_state.pt beside them. A checkpoint without
// it (one torch wrote) resumes from the optimizer's step count with the
// engine's scheduler and loss scaler fresh.
func loaded(dir string, st zero.State, dsts map[string][]float32, steps int64) (zero.State, error) {
	gs := st.Strategy.Groups
	at := 0
	for i := range gs {
		k := len(gs[i].Master)
		gs[i].Master = dsts[""][at : at+k]
		gs[i].Optim.State = map[string][]float32{}
		for nm, v := range dsts {
			if nm != "" {
				gs[i].Optim.State[nm] = v[at : at+k]
			}
		}
		gs[i].Optim.Steps = steps
		at += k
	}
	st.GlobalSteps, st.SkippedSteps = steps, 0
	err := readEngineState(filepath.Join(dir, EngineStateName), &st)
	if errors.Is(err, fs.ErrNotExist) {
		st.Scheduler, st.Dynamic = nil, false
		return st, nil
	}
	return st, err
}

// readPiece reads elements [a, b) of tensor fqn (parameter sp) into dst.
func readPiece(c *dcp.Checkpoint, fqn string, sp *model.ParamSpec, a, b int, dst []float32) error {
	it, ok := c.Meta.Item(fqn)
	if !ok || it.Tensor == nil {
		return fmt.Errorf("checkpoint %s: no tensor %s: the checkpoint is of another model, or not a sharded state dict of this one", c.Dir, fqn)
	}
	if !equalShape(it.Tensor.Size, sp.Shape) {
		return fmt.Errorf("checkpoint %s: %s is %v, this model's %s is %v: use the model the checkpoint was trained with", c.Dir, fqn, it.Tensor.Size, sp.Name, sp.Shape)
	}
	if it.Tensor.DType != ptfile.Float32 {
		return fmt.Errorf("checkpoint %s: %s is %s: dszero resumes fp32 state dicts (FSDP's sharded state dict of fp32 parameters)", c.Dir, fqn, it.Tensor.DType)
	}
	raw, err := c.ReadFlat(fqn, int64(a), int64(b))
	if err != nil {
		return err
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return nil
}

func equalShape(a []int64, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != int64(b[i]) {
			return false
		}
	}
	return true
}

// readEngineState reads dszero_state.pt into st.
func readEngineState(path string, st *zero.State) error {
	if _, err := os.Stat(path); err != nil {
		return err
	}
	v, err := ptfile.Read(path, ptfile.Options{})
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if st.GlobalSteps, err = asInt(v, "global_steps"); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if st.SkippedSteps, err = asInt(v, "skipped_steps"); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := readScaler(v, st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	st.Scheduler = nil
	if sd, err := ptfile.Lookup(v, "lr_scheduler"); err == nil && sd != nil {
		d, ok := sd.(*ptfile.Dict)
		if !ok {
			return fmt.Errorf("%s: lr_scheduler is %s", path, ptfile.TypeName(sd))
		}
		st.Scheduler = map[string]any{}
		for k, x := range d.All() {
			st.Scheduler[fmt.Sprint(k)] = x
		}
	}
	if r, err := ptfile.Lookup(v, clientKey+".optim_resume"); err == nil && r != nil {
		l, ok := r.(ptfile.List)
		if !ok {
			return fmt.Errorf("%s: %s.optim_resume is %s", path, clientKey, ptfile.TypeName(r))
		}
		res := make([]float64, len(l))
		for i, x := range l {
			f, ok := x.(float64)
			if !ok {
				return fmt.Errorf("%s: %s.optim_resume[%d] is %s", path, clientKey, i, ptfile.TypeName(x))
			}
			res[i] = f
		}
		for i := range st.Strategy.Groups {
			st.Strategy.Groups[i].Optim.Resume = res
		}
	}
	return nil
}

// partitioning is the ranks a rank's state is partitioned over and its
// place among them: the whole world, or its shard group under hybrid
// sharding (consecutive ranks; see zero.NewEngine).
func partitioning(st zero.State) (world, part int) {
	world = max(st.Strategy.World, 1)
	return world, st.Strategy.Rank % world
}

// Agree is a barrier over c that also tells every rank which ranks
// failed at what (a phrase: "write its files of DIR"): err, on a rank that
// failed; an error naming the failed ranks on the others; nil when none
// did. A nil c is one rank.
func Agree(ctx context.Context, c comm.Comm, err error, what string) error {
	return syncer{c: c, ctx: ctx}.agree(err, what)
}

// syncer is o's barrier.
func (o Options) syncer() syncer {
	sy := syncer{c: o.Comm, ctx: o.Ctx}
	if sy.ctx == nil {
		sy.ctx = context.Background()
	}
	return sy
}

func (s syncer) rank() int {
	if s.c == nil {
		return 0
	}
	return s.c.Rank()
}

func (s syncer) world() int {
	if s.c == nil {
		return 1
	}
	return s.c.Size()
}
