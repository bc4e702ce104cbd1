package checkpoint

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/ptfile"
	"github.com/dszero/dszero/zero"
	"github.com/dszero/dszero/zero/partition"
)

// Options are what Save and Load need besides the engine.
type Options struct {
	// Layout is the model's parameter layout (names and shapes).
	Layout *model.Layout
	// Comm is the engine's data-parallel communicator: the ranks meet on
	// it before the directory is published. Nil means one rank.
	Comm comm.Comm
	// Ctx bounds the barriers (nil: context.Background()).
	Ctx context.Context
	// DSConfig is the ds_config value the files carry (a ptfile value:
	// the parsed JSON as *ptfile.Dict); nil writes what the plan knows.
	DSConfig any
	// Write tunes the files' writer (its I/O buffer, O_DIRECT); the zero
	// value is ptfile's default.
	Write ptfile.WriteOptions
	// Acct, when set, is the rank's accountant: a save reserves its
	// writer's scratch (ptfile.ScratchBytes) on it as temporaries while it
	// writes, and an asynchronous save its snapshot.
	Acct *mem.Accountant

	// fault, set by tests, is called before each file of a save is
	// written; its error fails the write.
	fault func(path string) error
}

// manifest is a rank's list of the files it wrote.
type manifest struct {
	Rank  int             `json:"rank"`
	World int             `json:"world"`
	Stage int             `json:"zero_stage"`
	Files []manifestEntry `json:"files"`
	// foreign: no manifest on disk (a checkpoint DeepSpeed wrote): the
	// stage and world are read from its files, which are checked by their
	// CRC-32s and what they record (identity.go).
	foreign bool
}

type manifestEntry struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

func manifestName(rank int) string { return fmt.Sprintf("dszero_manifest_rank_%d.json", rank) }

// partitionedStage0 says a stage-0 run of dtype partitions its fp32
// master and optimizer state across the ranks as stage 1 does: DeepSpeed's
// BF16_Optimizer, which it uses for bf16 at stage 0, and whose per-rank
// files dszero writes and reads the same way.
func partitionedStage0(stage int, dtype device.DType) bool { return stage == 0 && dtype == device.BF16 }

// fileStage is the stage whose file layout a checkpoint of stage and dtype
// has.
func fileStage(stage int, dtype device.DType) int {
	if partitionedStage0(stage, dtype) {
		return 1
	}
	return stage
}

// FileNames are the files rank writes at stage for dtype, in DeepSpeed's
// naming.
func FileNames(stage, rank int, dtype device.DType) (model, optim string) {
	prefix := ""
	if dtype == device.BF16 {
		prefix = "bf16_"
	}
	switch {
	case stage == 3:
		model = fmt.Sprintf("zero_pp_rank_%d_mp_rank_00_model_states.pt", rank)
	case rank == 0:
		model = "mp_rank_00_model_states.pt"
	}
	if fileStage(stage, dtype) >= 1 {
		optim = fmt.Sprintf("%szero_pp_rank_%d_mp_rank_00_optim_states.pt", prefix, rank)
	}
	return model, optim
}

// Tag is DeepSpeed's default tag after steps optimizer steps.
func Tag(steps int64) string { return fmt.Sprintf("global_step%d", steps) }

func checkTag(tag string) error {
	if tag == "" || tag == "." || tag == ".." || strings.ContainsAny(tag, `/\`) || strings.HasPrefix(tag, ".") || filepath.Base(tag) != tag {
		return fmt.Errorf("checkpoint tag %q is not a plain directory name inside the checkpoint directory: refused", tag)
	}
	return nil
}

type syncer struct {
	c   comm.Comm
	ctx context.Context
}

// agree is a barrier that also tells every rank which ranks failed at
// what (a phrase: "load checkpoint DIR/TAG"): a rank that did not fail
// returns an error naming them.
func (s syncer) agree(err error, what string) error {
	if s.c == nil || s.c.Size() == 1 {
		return err
	}
	flags := make([]float32, s.c.Size())
	if err != nil {
		flags[s.c.Rank()] = 1
	}
	if cerr := s.c.AllReduce(s.ctx, comm.F32(flags), comm.Sum).Wait(); cerr != nil {
		return errors.Join(err, fmt.Errorf("checkpoint: ranks could not agree whether they managed to %s: %w", what, cerr))
	}
	if err != nil {
		return err
	}
	var failed []string
	for r, f := range flags {
		if f != 0 {
			failed = append(failed, strconv.Itoa(r))
		}
	}
	switch len(failed) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("checkpoint: rank %s failed to %s (its error says why)", failed[0], what)
	}
	return fmt.Errorf("checkpoint: ranks %s failed to %s (their errors say why)", strings.Join(failed, ", "), what)
}

// Save writes the engine's state as checkpoint dir/tag (tag "" means
// global_step{N}) and points dir/latest at it. Every rank calls it; each
// writes only its own files. See the package doc for the layout and the
// crash-safety protocol.
func Save(dir, tag string, e *zero.Engine, o Options) error {
	if tag == "" {
		tag = Tag(e.GlobalSteps())
	}
	if err := checkTag(tag); err != nil {
		return err
	}
	sy := syncer{c: o.Comm, ctx: o.Ctx}
	if sy.ctx == nil {
		sy.ctx = context.Background()
	}
	rank := 0
	if o.Comm != nil {
		rank = o.Comm.Rank()
	}
	final, tmp := filepath.Join(dir, tag), filepath.Join(dir, "."+tag+".tmp")
	var err error
	if rank == 0 {
		err = prepare(dir, final, tmp)
	}
	if err = sy.agree(err, "prepare the directory "+tmp+" for checkpoint "+final); err != nil {
		return err
	}
	v, err := viewOf(e)
	if err == nil {
		err = saveRank(tmp, e, v, o, rank)
	}
	if err = sy.agree(err, "write its files of checkpoint "+final); err != nil {
		return err
	}
	if rank == 0 {
		err = publish(dir, tag, final, tmp)
	}
	return sy.agree(err, "publish checkpoint "+final)
}

func prepare(dir, final, tmp string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.RemoveAll(tmp); err != nil { // an earlier save that crashed
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// saveRank writes the rank's files of the view v into tmp: each streamed
// from v's buffers (ptfile.Source) through one I/O buffer, with its sha256
// computed as it is written (ptfile.WriteFile).
func saveRank(tmp string, e *zero.Engine, v view, o Options, rank int) error {
	st := v.st
	for _, g := range st.Strategy.Groups {
		if g.Streamed != nil && g.Streamed.Close != nil {
			defer g.Streamed.Close()
		}
	}
	if o.Layout == nil || o.Layout.Numel != st.Strategy.Numel {
		return fmt.Errorf("checkpoint: Options.Layout must be the engine's model layout")
	}
	ds := o.DSConfig
	if ds == nil {
		ds = defaultDSConfig(e)
	}
	stage := st.Strategy.Stage
	man := manifest{Rank: rank, World: st.Strategy.World, Stage: stage}
	plan := e.Plan()
	modelName, optimName := FileNames(stage, rank, plan.Precision.DType)
	id := identity{Kind: kindModel, Rank: rank, World: st.Strategy.World, Stage: stage, DType: plan.Precision.DType.String(), Steps: st.GlobalSteps,
		Numel: int64(o.Layout.Numel), RoundRobin: plan.Zero.RoundRobinGradients && (stage == 1 || stage == 2)}
	if o.Acct != nil {
		n := ptfile.ScratchBytes(o.Write)
		if err := o.Acct.Reserve(mem.Temp, mem.Device, n); err != nil {
			return fmt.Errorf("checkpoint: rank %d: the writer's buffer: %w", rank, err)
		}
		defer o.Acct.Release(mem.Temp, mem.Device, n)
	}
	wr := ptfile.NewWriter(o.Write) // one I/O buffer for the rank's files
	write := func(name string, root any) error {
		p := filepath.Join(tmp, name)
		if o.fault != nil {
			if err := o.fault(p); err != nil {
				return fmt.Errorf("checkpoint: rank %d: write %s: %w", rank, p, err)
			}
		}
		w, err := wr.WriteFile(p, root)
		if err != nil {
			return fmt.Errorf("checkpoint: rank %d: %w", rank, err)
		}
		man.Files = append(man.Files, manifestEntry{Name: name, Bytes: w.Bytes, SHA256: hex.EncodeToString(w.SHA256[:])})
		return nil
	}
	if modelName != "" {
		work := v.work // stage 3's model states hold placeholders, not the parameters
		if stage < 3 {
			work = work[:o.Layout.Numel]
		}
		if err := write(modelName, withIdentity(modelStates(e, st, o.Layout, work, ds), id)); err != nil {
			return err
		}
	}
	if optimName != "" {
		d := optimStates(e, st, o.Layout, ds)
		id.Kind, id.Groups = kindOptim, fp32Groups(d, fileStage(stage, plan.Precision.DType))
		if err := write(optimName, withIdentity(d, id)); err != nil {
			return err
		}
	}
	b, _ := json.MarshalIndent(man, "", " ")
	return writeFileSync(filepath.Join(tmp, manifestName(rank)), b)
}

// writeFileSync writes path through a temporary file, fsynced and renamed.
func writeFileSync(path string, b []byte) error {
	t := path + ".tmp"
	f, err := os.Create(t)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(t, path)
	}
	if err != nil {
		os.Remove(t)
		return fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("checkpoint: fsync %s: %w", dir, err)
	}
	return nil
}

// publish makes the finished temporary directory the tag, then latest.
func publish(dir, tag, final, tmp string) error {
	if err := syncDir(tmp); err != nil {
		return err
	}
	// A checkpoint of the same tag (a rerun) is replaced, never written
	// into: it is moved aside, the new one renamed in, and the old one
	// removed. A crash in between leaves it as .TAG.old.
	old := filepath.Join(dir, "."+tag+".old")
	if _, err := os.Stat(final); err == nil {
		if err := os.RemoveAll(old); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if err := os.Rename(final, old); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	return writeFileSync(filepath.Join(dir, "latest"), []byte(tag))
}

// LatestTag reads dir/latest, refusing a tag that leaves dir.
func LatestTag(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "latest"))
	if err != nil {
		return "", fmt.Errorf("checkpoint: no latest file in %s (pass a tag, or point at a directory save_checkpoint wrote): %w", dir, err)
	}
	tag := strings.TrimSpace(string(b))
	if err := checkTag(tag); err != nil {
		return "", fmt.Errorf("%s/latest: %w", dir, err)
	}
	return tag, nil
}

// Load restores the engine's rank state from checkpoint dir/tag (tag ""
// reads dir/latest). Every rank calls it, on a freshly built engine with
// the config, model and world size the checkpoint was saved with. The
// files are read straight into the engine's buffers, and their sha256s
// checked as they are read: when Load fails, the engine's state is
// undefined (build a new one).
func Load(dir, tag string, e *zero.Engine, o Options) error {
	sy := syncer{c: o.Comm, ctx: o.Ctx}
	if sy.ctx == nil {
		sy.ctx = context.Background()
	}
	st, end, err := readRank(dir, tag, e, o)
	err = end(err) // the writes into swap files (load3.go) done
	what := "load checkpoint " + filepath.Join(dir, tag)
	if tag == "" {
		what = "load the latest checkpoint of " + dir
	}
	if err = sy.agree(err, what); err != nil {
		end(err) // another rank failed: void this one's load
		return err
	}
	if err := e.ImportState(st); err != nil {
		return fmt.Errorf("checkpoint %s: %w", filepath.Join(dir, tag), err)
	}
	return nil
}

// checkpointPath resolves tag ("" reads latest) to its directory in dir:
// DIR/TAG, or the copy a crash left moved aside while a rerun replaced the
// tag (publish).
func checkpointPath(dir, tag string) (string, string, error) {
	if tag == "" {
		var err error
		if tag, err = LatestTag(dir); err != nil {
			return "", "", err
		}
	} else if err := checkTag(tag); err != nil {
		return "", "", err
	}
	path := filepath.Join(dir, tag)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if old := filepath.Join(dir, "."+tag+".old"); dirExists(old) {
			path = old
		}
	}
	return tag, path, nil
}

// readRank reads the rank's state of checkpoint dir/tag for e. end,
// never nil, is to be called with the load's outcome: it completes the
// writes of a load into swap files (targetOf) and returns the outcome
// joined with theirs; called again with an error, it voids that load.
func readRank(dir, tag string, e *zero.Engine, o Options) (st zero.State, end func(error) error, err error) {
	end = func(err error) error { return err }
	_, path, err := checkpointPath(dir, tag)
	if err != nil {
		return st, end, err
	}
	plan := e.Plan()
	rank, world := 0, plan.WorldSize
	if o.Comm != nil {
		rank = o.Comm.Rank()
	}
	stage, dtype := plan.Zero.Stage, plan.Precision.DType
	man, err := readManifest(path, 0)
	if errors.Is(err, fs.ErrNotExist) {
		// No manifest: a checkpoint DeepSpeed (or another tool) wrote.
		man, err = foreignManifest(path, dtype)
	}
	if err != nil {
		return st, end, err
	}
	same := man.Stage == stage && (man.World == world || stage == 0)
	// The files' flat buffer is in this run's order when they are read as
	// they are, in the model's when they are resharded.
	rr := same && plan.Zero.RoundRobinGradients
	x, err := expectOf(path, man, dtype, o.Layout, rr)
	if err != nil {
		return st, end, err
	}
	if same {
		if (stage == 1 || stage == 2) && x.dszero && x.ref.RoundRobin != rr {
			return st, end, fmt.Errorf("checkpoint %s was saved with round_robin_gradients %v, this run has %v: the partitions hold the parameters in another order; set round_robin_gradients as it was saved", path, x.ref.RoundRobin, rr)
		}
		// Stages 1–3 read the fp32 partitions and optimizer state straight
		// into the engine's own buffers (its view), which ImportState then
		// takes as they are, or into its swap files (load3.go): no copy of
		// the state is made.
		var to target
		if stage > 0 {
			if to, end, err = targetOf(e); err != nil {
				return st, end, err
			}
		}
		st, err = readSaved(path, x, stage, rank, world, dtype, o.Layout, to)
		return st, end, err
	}
	// Another stage or world size: every rank reads every saved rank's
	// state, puts the model's fp32 master and optimizer state back
	// together, and takes its own part of them in this run's layout.
	st, err = reshard(path, man, x, e, o, rank)
	return st, end, err
}

// expectOf reads what the files of the checkpoint at path must say (see
// identity) from rank 0's model-states file, for the model l whose flat
// buffer the files hold in round-robin order when rr.
func expectOf(path string, man manifest, dtype device.DType, l *model.Layout, rr bool) (expect, error) {
	ref, _ := FileNames(man.Stage, 0, dtype)
	f, err := openFile(filepath.Join(path, ref))
	if err != nil {
		return expect{}, err
	}
	defer f.Close()
	flat := layoutParams(l)
	switch {
	case partitionedStage0(man.Stage, dtype):
		flat = partition.Flat(flat, man.World).Params
	case man.Stage == 1 || man.Stage == 2:
		ft, _ := zcore.FlatOrder(l, man.World, rr)
		flat = ft.Params
	}
	return newExpect(path, man, dtype, ref, f.Root, flat)
}

// readSaved reads saved rank rank's state of a checkpoint of stage over
// world ranks, checking each file it reads against x. to is where the
// fp32 groups' values go (see readOptim). A file whose sha256 is not the manifest's fails it with
// that error, whatever else went wrong reading it.
func readSaved(path string, x expect, stage, rank, world int, dtype device.DType, l *model.Layout, to target) (st zero.State, err error) {
	manRank := rank
	if stage == 0 {
		manRank = 0 // stage 0 partitions nothing: every rank reads rank 0's file
	}
	man, err := readManifest(path, manRank)
	if errors.Is(err, fs.ErrNotExist) {
		man, err = foreignManifest(path, dtype)
	}
	if err != nil {
		return st, err
	}
	switch {
	case !man.foreign && man.Rank != manRank:
		return st, fmt.Errorf("checkpoint %s: %s says it lists rank %d's files: the checkpoint is inconsistent (a manifest was copied or renamed)", path, manifestName(manRank), man.Rank)
	case man.Stage != stage:
		return st, fmt.Errorf("checkpoint %s: rank %d's manifest says ZeRO stage %d, rank 0's %d: the checkpoint is inconsistent", path, manRank, man.Stage, stage)
	case man.World != world && stage > 0:
		return st, fmt.Errorf("checkpoint %s: rank %d's manifest says %d ranks, rank 0's %d: the checkpoint is inconsistent", path, manRank, man.World, world)
	}
	man0 := man
	if rank != 0 && stage < 3 && !man.foreign {
		if man0, err = readManifest(path, 0); err != nil {
			return st, err
		}
	}
	modelName, _ := FileNames(stage, 0, dtype) // stages 0–2: rank 0's
	modelRank := 0
	if stage == 3 {
		modelName, _ = FileNames(stage, rank, dtype)
		modelRank = rank
	}
	_, optimName := FileNames(stage, rank, dtype)
	ms, doneMS, err := readChecked(path, modelName, man0, l)
	if err != nil {
		return st, err
	}
	defer func() { err = doneMS(err) }()
	if man.foreign {
		if _, err := ptfile.Lookup(ms, "dszero"); err == nil {
			return st, fmt.Errorf("checkpoint: %s was written by dszero but its manifest %s is missing: the save did not complete, or the directory was altered", path, manifestName(manRank))
		}
	}
	if err := x.check(modelName, modelRank, kindModel, ms); err != nil {
		return st, err
	}
	if err := checkShapes(ms, l, stage, path+"/"+modelName); err != nil {
		return st, err
	}
	st.Strategy = zcore.StrategyState{Stage: stage, World: world, Rank: rank, Numel: l.Numel}
	if st.GlobalSteps, err = asInt(ms, "global_steps"); err != nil {
		return st, fmt.Errorf("%s/%s: %w", path, modelName, err)
	}
	if st.SkippedSteps, err = asInt(ms, "skipped_steps"); err != nil {
		return st, fmt.Errorf("%s/%s: %w", path, modelName, err)
	}
	scalerErr := readScaler(ms, &st)
	if scalerErr != nil && !man.foreign {
		return st, fmt.Errorf("%s/%s: %w (not a checkpoint dszero wrote?)", path, modelName, scalerErr)
	}
	if sd, err := ptfile.Lookup(ms, "lr_scheduler"); err == nil && sd != nil {
		d, ok := sd.(*ptfile.Dict)
		if !ok {
			return st, fmt.Errorf("%s/%s: lr_scheduler is %s", path, modelName, ptfile.TypeName(sd))
		}
		st.Scheduler = map[string]any{}
		for k, v := range d.All() {
			st.Scheduler[fmt.Sprint(k)] = v
		}
	}
	src := ms // where the loss scaler is: the model states at stage 0
	switch {
	case partitionedStage0(stage, dtype):
		err = readPartitionedStage0(path, x, man0, l, dtype, &st)
	case stage == 0:
		err = readStage0(ms, &st, l, dtype)
	default:
		var doneOS func(error) error
		if src, doneOS, err = readChecked(path, optimName, man, l); err != nil {
			return st, err
		}
		defer func() { err = doneOS(err) }()
		if err := x.check(optimName, rank, kindOptim, src); err != nil {
			return st, err
		}
		if err = readOptim(src, &st, to); err != nil {
			err = fmt.Errorf("%s: %w", optimName, err)
		}
	}
	if err != nil {
		return st, fmt.Errorf("%s: %w", path, err)
	}
	if scalerErr != nil {
		// DeepSpeed's own: the LossScaler object it pickles (cur_scale and,
		// when dynamic, the state machine's counters).
		if err := readDSScaler(src, &st); err != nil {
			return st, fmt.Errorf("%s: the loss scaler: %w", path, err)
		}
	}
	return st, nil
}

func readManifest(path string, rank int) (manifest, error) {
	var m manifest
	p := filepath.Join(path, manifestName(rank))
	b, err := os.ReadFile(p)
	if err != nil {
		return m, fmt.Errorf("checkpoint: %w (not a complete dszero checkpoint: the manifest is written last by each rank)", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("checkpoint: %s: %w", p, err)
	}
	return m, nil
}

// checkShapes compares the checkpoint's parameter names and shapes with
// the model's.
func checkShapes(ms any, l *model.Layout, stage int, file string) error {
	mod, err := get[*ptfile.Dict](ms, "module")
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if mod.Len() != len(l.Specs) {
		return fmt.Errorf("%s: the checkpoint's model has %d parameters, this model %d: load it into the model it was trained with (--model)", file, mod.Len(), len(l.Specs))
	}
	for i, k := range mod.Keys() {
		sp := l.Specs[i]
		v, _ := mod.Get(k)
		t, ok := v.(*ptfile.Tensor)
		if k != sp.Name || !ok {
			return fmt.Errorf("%s: parameter %d is %v, this model's is %s: load it into the model it was trained with", file, i, k, sp.Name)
		}
		if stage < 3 && fmt.Sprint(t.Shape) != fmt.Sprint(shape64(sp.Shape)) {
			return fmt.Errorf("%s: %s has shape %v, this model's %v: load it into the model it was trained with", file, sp.Name, t.Shape, sp.Shape)
		}
	}
	return nil
}

func readStage0(ms any, st *zero.State, l *model.Layout, dtype device.DType) error {
	g := zcore.GroupState{Optim: zcore.OptimState{State: map[string][]float32{}}}
	if ok, err := readFP16Wrapper(ms, &g, l); ok { // fp16: FP16_Optimizer's or FP16_UnfusedOptimizer's state_dict
		if err != nil {
			return err
		}
		st.Strategy.Groups = []zcore.GroupState{g}
		return readResume(ms, clientKey+".optim_resume", st.Strategy.Groups)
	}
	for i := range l.Specs {
		if err := readTorchState(ms, fmt.Sprintf("optimizer.state[%d]", i), &g.Optim, nil, false); err != nil {
			return err
		}
	}
	trimTensors(&g.Optim)
	var err error
	if dtype == device.F32 {
		g.Master = make([]float32, 0, l.Numel)
		for _, sp := range l.Specs {
			v, err := floats(ms, fmt.Sprintf("module[%q]", sp.Name))
			if err != nil {
				return err
			}
			g.Master = append(g.Master, v...)
		}
	} else if g.Master, err = floats(ms, "dszero.fp32_master"); err != nil {
		return err
	}
	st.Strategy.Groups = []zcore.GroupState{g}
	return readResume(ms, clientKey+".optim_resume", st.Strategy.Groups)
}

// readPartitionedStage0 reads the fp32 master and optimizer state of a
// partitioned stage-0 checkpoint (partitionedStage0) from every saved
// rank's file, man0 being rank 0's manifest: at stage 0 each rank holds
// them whole.
func readPartitionedStage0(path string, x expect, man0 manifest, l *model.Layout, dtype device.DType, st *zero.State) error {
	saved := make([]zero.State, man0.World)
	for r := range saved {
		man := man0
		if r != 0 && !man0.foreign {
			var err error
			if man, err = readManifest(path, r); err != nil {
				return err
			}
		}
		_, name := FileNames(0, r, dtype)
		v, done, err := readChecked(path, name, man, l)
		if err != nil {
			return err
		}
		err = x.check(name, r, kindOptim, v)
		if err == nil {
			saved[r].Strategy.Stage = 1
			if err = readOptim(v, &saved[r], target{}); err != nil {
				err = fmt.Errorf("%s: %w", name, err)
			}
		}
		if err := done(err); err != nil {
			return err
		}
	}
	f, err := gather(saved, 1, man0.World, l)
	if err != nil {
		return err
	}
	st.Strategy.Groups = []zcore.GroupState{{Master: f.master, Optim: zcore.OptimState{Name: f.name, Steps: f.steps, State: f.optim, Resume: f.resume}}}
	return nil
}

// readOptim reads an optim-states file's fp32 groups and optimizer state
// into st. A group's master, and a state tensor of the same size, are
// read into to's group (the engine's own buffers) when to has one of
// that size; with to's swap loader (stage 3, load3.go) every tensor goes
// to it instead, and st's groups hold only the step counts and the
// optimizer's resume state.
func readOptim(v any, st *zero.State, to target) error {
	var groups []any
	var statePath string
	if st.Strategy.Stage == 3 {
		l, err := get[ptfile.List](v, "optimizer_state_dict.fp32_flat_groups")
		if err != nil {
			return err
		}
		groups, statePath = l, "optimizer_state_dict.optimizer_state_dict.state[%d]"
	} else {
		l, err := get[ptfile.List](v, "optimizer_state_dict.single_partition_of_fp32_groups")
		if err != nil {
			return err
		}
		groups, statePath = l, "optimizer_state_dict.base_optimizer_state.state[%d]"
	}
	// The tensors are read in the files' order — every group's optimizer
	// state, then the fp32 groups, as DeepSpeed and dszero save them — so
	// that the file is read once (hashingReader).
	gss := make([]zcore.GroupState, len(groups))
	for g := range groups {
		gs := &gss[g]
		gs.Optim.State = map[string][]float32{}
		if to.swap != nil {
			if err := readSwappedState(v, fmt.Sprintf(statePath, g), g, &gs.Optim, to.swap); err != nil {
				return err
			}
			continue
		}
		// Stages 1 and 2 save the optimizer state with the partition's
		// padding, the fp32 partition without it: a state tensor is read
		// into the engine's unpadded buffer, its padding checked on the way
		// (readTorchState), or read whole and checked below.
		padded := st.Strategy.Stage != 3
		if err := readTorchState(v, fmt.Sprintf(statePath, g), &gs.Optim, groupState(to.group(g)), padded); err != nil {
			return err
		}
		trimTensors(&gs.Optim)
	}
	for g := range groups {
		gs := &gss[g]
		t, ok := groups[g].(*ptfile.Tensor)
		if !ok {
			return fmt.Errorf("fp32 group %d is %s, not a tensor", g, ptfile.TypeName(groups[g]))
		}
		if to.swap != nil {
			if err := to.swap.LoadTensor(g, "master", func(dst []float32) error { return readExact(t, dst) }); err != nil {
				return fmt.Errorf("fp32 group %d: %w", g, err)
			}
			continue
		}
		var err error
		if gs.Master, err = values(t, groupMaster(to.group(g))); err != nil {
			return fmt.Errorf("fp32 group %d: %w", g, err)
		}
		for k, x := range gs.Optim.State {
			if len(x) <= len(gs.Master) || st.Strategy.Stage == 3 {
				continue
			}
			for _, pad := range x[len(gs.Master):] {
				if pad != 0 {
					return fmt.Errorf("optimizer state %s of group %d has %d elements, the fp32 partition %d, and the extra ones are not the partition's zero padding", k, g, len(x), len(gs.Master))
				}
			}
			gs.Optim.State[k] = x[:len(gs.Master)]
		}
	}
	st.Strategy.Groups = append(st.Strategy.Groups, gss...)
	return readResume(v, clientKey+".optim_resume", st.Strategy.Groups)
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
