package checkpoint

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/ptfile"
	"github.com/dszero/dszero/zero/partition"
)

// Which file is which. A checkpoint is several files — at stage 3 a
// model-states file per rank, at stages 1–3 an optimizer-states file per
// rank — and a file copied in from another step, or two ranks' files
// swapped (their manifests rewritten to match), would otherwise load as
// this checkpoint's and resume from the wrong state without a word. So
// every file dszero writes says which it is, under its top-level client
// key "dszero" as "file" (DeepSpeed and zero_to_fp32 ignore keys they do
// not know):
//
//	kind                   "model_states" or "optim_states"
//	rank, world            the rank that wrote it, of how many
//	zero_stage, dtype      the run's stage and training dtype
//	global_steps           the step it was saved after
//	numel                  the model's parameter count
//	round_robin_gradients  the flat buffer's order at stages 1 and 2
//	fp32_groups            optimizer states: the rank's fp32 elements in
//	                       each group, padding included where saved
//
// and every file a load or an export reads is checked against the
// checkpoint: rank 0's model-states file says the stage, world size,
// dtype, step and flat order (and agrees with rank 0's manifest), the
// file's name its rank, and the model its partition's size. DeepSpeed's
// files carry none of this; what they do carry is checked the same way:
// global_steps and dp_world_size in model-states files, zero_stage,
// partition_count, the fp32 partition's size and param_slice_mappings in
// optimizer-states files.

const (
	kindModel = "model_states"
	kindOptim = "optim_states"
)

// identity is what a dszero-written file says it is.
type identity struct {
	Kind        string
	Rank, World int
	Stage       int
	DType       string
	Steps       int64
	Numel       int64
	RoundRobin  bool
	Groups      []int64 // optimizer states only
}

func (id identity) dict() *ptfile.Dict {
	d := ptfile.DictOf("kind", id.Kind, "rank", int64(id.Rank), "world", int64(id.World), "zero_stage", int64(id.Stage),
		"dtype", id.DType, "global_steps", id.Steps, "numel", id.Numel, "round_robin_gradients", id.RoundRobin)
	if id.Kind == kindOptim {
		l := make(ptfile.List, len(id.Groups))
		for i, n := range id.Groups {
			l[i] = n
		}
		d.Set("fp32_groups", l)
	}
	return d
}

func (id identity) String() string {
	s := fmt.Sprintf("rank %d of %d, ZeRO stage %d, %s, step %d, %d parameters", id.Rank, id.World, id.Stage, id.DType, id.Steps, id.Numel)
	if id.RoundRobin {
		s += ", round_robin_gradients"
	}
	return s
}

// readIdentity reads a file's identity; ok is false when it has none (a
// file DeepSpeed wrote).
func readIdentity(v any) (id identity, ok bool, err error) {
	x, lerr := ptfile.Lookup(v, clientKey+".file")
	if lerr != nil || x == nil {
		return id, false, nil
	}
	bad := func(e error) (identity, bool, error) {
		return id, true, fmt.Errorf("its dszero identity (%s.file) is malformed: %w", clientKey, e)
	}
	var ints [6]int64
	for i, k := range []string{"rank", "world", "zero_stage", "global_steps", "numel", "round_robin_gradients"} {
		if ints[i], err = asInt(x, k); err != nil {
			return bad(err)
		}
	}
	id = identity{Rank: int(ints[0]), World: int(ints[1]), Stage: int(ints[2]), Steps: ints[3], Numel: ints[4], RoundRobin: ints[5] != 0}
	if id.Kind, err = get[string](x, "kind"); err != nil {
		return bad(err)
	}
	if id.DType, err = get[string](x, "dtype"); err != nil {
		return bad(err)
	}
	if id.Kind == kindOptim {
		l, err := get[ptfile.List](x, "fp32_groups")
		if err != nil {
			return bad(err)
		}
		for i, n := range l {
			k, ok := n.(int64)
			if !ok {
				return bad(fmt.Errorf("fp32_groups[%d] is %s", i, ptfile.TypeName(n)))
			}
			id.Groups = append(id.Groups, k)
		}
	}
	return id, true, nil
}

// expect is what the files of one checkpoint must say: the reference —
// rank 0's model-states file, and rank 0's manifest — and the model's
// parameters in the flat buffer's order.
type expect struct {
	path    string // the checkpoint directory
	refName string // the reference file, rank 0's model states
	ref     identity
	dszero  bool // the files carry identities (dszero wrote them)
	dtype   device.DType
	// flat is the model's parameters in flattening order: the order of
	// the stage 1 and 2 flat buffer, the model's at stage 3.
	flat []partition.Param
}

// newExpect reads the reference from rank 0's model-states file v
// (refName) in a checkpoint whose manifest (or, without one, whose files)
// say man.
func newExpect(path string, man manifest, dtype device.DType, refName string, v any, flat []partition.Param) (expect, error) {
	x := expect{path: path, refName: refName, dtype: dtype, flat: flat}
	fail := func(err error) (expect, error) {
		return x, fmt.Errorf("checkpoint: %s: %w", filepath.Join(path, refName), err)
	}
	mixed := func(format string, a ...any) (expect, error) {
		return x, mixedError(filepath.Join(path, refName), format, a...)
	}
	id, ok, err := readIdentity(v)
	if err != nil {
		return fail(err)
	}
	numel := int64(0)
	for _, p := range flat {
		numel += int64(p.Numel)
	}
	if !ok {
		// DeepSpeed's: its stage and world come from its files (foreignManifest).
		steps, err := asInt(v, "global_steps")
		if err != nil {
			return fail(err)
		}
		id = identity{Kind: kindModel, World: man.World, Stage: man.Stage, DType: dtype.String(), Steps: steps, Numel: numel}
	} else if man.foreign {
		return fail(fmt.Errorf("dszero wrote it, but the checkpoint has no dszero manifest: the save did not complete, or the directory was altered"))
	}
	x.ref, x.dszero = id, ok
	if ok {
		// The files must agree with each other; the run's dtype may differ
		// from the one they were trained in.
		want := identity{Kind: kindModel, Rank: 0, World: man.World, Stage: man.Stage, DType: id.DType, Steps: id.Steps, Numel: numel, RoundRobin: id.RoundRobin}
		if d := id.differs(want); d != "" {
			return mixed("it says %s; as this checkpoint's rank-0 model states it must say %s, as rank 0's manifest and the model do (%s)", id, want, d)
		}
	}
	return x, nil
}

// differs names the fields in which id and want differ ("" when none);
// fp32_groups are compared by check.
func (id identity) differs(want identity) string {
	var d []string
	add := func(name string, got, want any) {
		if got != want {
			d = append(d, fmt.Sprintf("%s %v, not %v", name, got, want))
		}
	}
	add("kind", id.Kind, want.Kind)
	add("rank", id.Rank, want.Rank)
	add("world", id.World, want.World)
	add("zero_stage", id.Stage, want.Stage)
	add("dtype", id.DType, want.DType)
	add("global_steps", id.Steps, want.Steps)
	add("numel", id.Numel, want.Numel)
	add("round_robin_gradients", id.RoundRobin, want.RoundRobin)
	return strings.Join(d, ", ")
}

// check checks file name, rank rank's file of kind, whose pickle is v.
func (x expect) check(name string, rank int, kind string, v any) error {
	fail := func(format string, a ...any) error { return mixedError(filepath.Join(x.path, name), format, a...) }
	id, ok, err := readIdentity(v)
	if err != nil {
		return fail("%v", err)
	}
	if ok != x.dszero {
		if ok {
			return fail("dszero wrote it, but %s, the checkpoint's rank-0 model states, was written by DeepSpeed", x.refName)
		}
		return fail("it carries no dszero identity, but the rest of the checkpoint does: it was not written by the save that wrote %s", x.refName)
	}
	if ok {
		want := x.ref
		want.Kind, want.Rank = kind, rank
		if d := id.differs(want); d != "" {
			return fail("it says %s; this checkpoint's %s file of rank %d must say %s, as %s does (%s)", id, kind, rank, want, x.refName, d)
		}
	}
	if err := x.checkDeepSpeed(kind, rank, v); err != nil {
		return fail("%v", err)
	}
	if ok && kind == kindOptim {
		var sum int64
		for _, n := range id.Groups {
			sum += n
		}
		if got := x.fp32Len(v); got != sum {
			return fail("its identity lists fp32 groups %v (%d elements), the file holds %d", id.Groups, sum, got)
		}
	}
	return nil
}

// mixedError is a file that is not the one its checkpoint needs there.
func mixedError(file, format string, a ...any) error {
	return fmt.Errorf("checkpoint: %s: %s: a file of another checkpoint or rank was copied in, or files were renamed: restore this checkpoint's own files, or load the checkpoint it came from",
		file, fmt.Sprintf(format, a...))
}

// fileStage is the file layout's stage (BF16_Optimizer at stage 0 is
// stage 1's).
func (x expect) fileStage() int { return fileStage(x.ref.Stage, x.dtype) }

// fp32Key is the optimizer-states key of the rank's fp32 groups in a
// file of file stage fileStage.
func fp32Key(fileStage int) string {
	if fileStage == 3 {
		return "optimizer_state_dict.fp32_flat_groups"
	}
	return "optimizer_state_dict.single_partition_of_fp32_groups"
}

func (x expect) fp32Key() string { return fp32Key(x.fileStage()) }

// fp32Len is the number of fp32 elements an optimizer-states file holds
// (-1 when it holds no list of tensors there).
func (x expect) fp32Len(v any) int64 {
	l, err := get[ptfile.List](v, x.fp32Key())
	if err != nil {
		return -1
	}
	var n int64
	for _, g := range l {
		t, ok := g.(*ptfile.Tensor)
		if !ok {
			return -1
		}
		n += t.Numel()
	}
	return n
}

// checkDeepSpeed checks what DeepSpeed's layout itself records.
func (x expect) checkDeepSpeed(kind string, rank int, v any) error {
	stage, world := x.fileStage(), x.ref.World
	if kind == kindModel {
		if steps, err := asInt(v, "global_steps"); err != nil {
			return err
		} else if steps != x.ref.Steps {
			return fmt.Errorf("global_steps is %d; %s says %d", steps, x.refName, x.ref.Steps)
		}
		if stage > 0 {
			if dp, err := asInt(v, "dp_world_size"); err == nil && dp != int64(world) {
				return fmt.Errorf("dp_world_size is %d; the checkpoint has %d ranks", dp, world)
			}
		}
		return nil
	}
	if zs, err := ptfile.Lookup(v, "optimizer_state_dict.zero_stage"); err == nil {
		o, ok := zs.(*ptfile.Object)
		if s, known := zeroStages[objAttr(o, ok)]; !known || s != x.ref.Stage {
			return fmt.Errorf("zero_stage is %v; the checkpoint is of ZeRO stage %d", zs, x.ref.Stage)
		}
	}
	if pc, err := ptfile.Lookup(v, "optimizer_state_dict.partition_count"); err == nil {
		counts, ok := pc.(ptfile.List) // one per parameter group at stages 1 and 2
		if !ok {
			counts = ptfile.List{pc}
		}
		for _, c := range counts {
			if n, ok := c.(int64); !ok || n != int64(world) {
				return fmt.Errorf("partition_count is %v; the checkpoint has %d ranks", pc, world)
			}
		}
	}
	got := x.fp32Len(v)
	if stage == 3 {
		want := int64(0)
		for _, p := range x.flat {
			want += int64(partition.ParamPartitionSize(p.Numel, world))
		}
		if got != want {
			return fmt.Errorf("its fp32 partition (%s) holds %d elements; rank %d's of this model on %d ranks holds %d", x.fp32Key(), got, rank, world, want)
		}
		return nil
	}
	if groups, _ := get[ptfile.List](v, x.fp32Key()); len(groups) != 1 {
		// Several parameter groups, each partitioned on its own: the
		// model's one flat buffer says nothing about their sizes.
		return nil
	}
	flat := partition.Flat(x.flat, world)
	// DeepSpeed 0.14.5 strips the padding from the last rank only
	// (partition.FlatLayout.Padding).
	old := int64(flat.PartitionSize)
	if rank == world-1 {
		old -= int64(flat.Padded - flat.Total)
	}
	want := int64(flat.SavedLen(rank))
	if partitionedStage0(x.ref.Stage, x.dtype) {
		// BF16_Optimizer saves its fp32 partition whole, padding
		// included (fp32_groups_flat_partition); dszero's older
		// checkpoints saved it stripped, as stages 1 and 2 do.
		old, want = want, int64(flat.PartitionSize)
	}
	if got != want && got != old {
		return fmt.Errorf("its fp32 partition (%s) holds %d elements; rank %d's of this model on %d ranks holds %d", x.fp32Key(), got, rank, world, want)
	}
	maps, err := get[ptfile.List](v, "optimizer_state_dict.param_slice_mappings")
	if err != nil || len(maps) != 1 {
		return nil // not recorded, or several parameter groups: nothing to compare with
	}
	m, ok := maps[0].(*ptfile.Dict)
	if !ok {
		return fmt.Errorf("param_slice_mappings[0] is %s", ptfile.TypeName(maps[0]))
	}
	var gotF, wantF []string
	for k, a := range m.All() {
		numel, _ := asInt(objState(a), "numel")
		start, _ := asInt(objState(a), "start")
		gotF = append(gotF, fmt.Sprintf("%v[%d:%d]", k, start, start+numel))
	}
	for _, f := range flat.SliceMappings(rank) {
		wantF = append(wantF, fmt.Sprintf("%s[%d:%d]", f.Name, f.PartitionOffset, f.PartitionOffset+f.Len))
	}
	if !slices.Equal(gotF, wantF) {
		return fmt.Errorf("its param_slice_mappings place %s in the partition; rank %d's of this model on %d ranks places %s", brief(gotF), rank, world, brief(wantF))
	}
	return nil
}

func objAttr(o *ptfile.Object, ok bool) string {
	if !ok || o == nil {
		return ""
	}
	return o.Attr
}

func objState(v any) any {
	if o, ok := v.(*ptfile.Object); ok {
		return o.State
	}
	return v
}

// brief lists at most the first four of xs.
func brief(xs []string) string {
	if len(xs) > 4 {
		return fmt.Sprintf("%s, … (%d in all)", strings.Join(xs[:4], ", "), len(xs))
	}
	return strings.Join(xs, ", ")
}

// withIdentity adds id to d, a file's top-level dict, under the client key.
func withIdentity(d *ptfile.Dict, id identity) *ptfile.Dict {
	cs, _ := d.Get(clientKey)
	c, ok := cs.(*ptfile.Dict)
	if !ok {
		c = ptfile.NewDict()
		d.Set(clientKey, c)
	}
	c.Set("file", id.dict())
	return d
}

// fp32Groups are the lengths of the fp32 groups an optimizer-states file
// of file stage fileStage holds.
func fp32Groups(d *ptfile.Dict, fileStage int) []int64 {
	l, _ := get[ptfile.List](d, fp32Key(fileStage))
	out := make([]int64, len(l))
	for i, g := range l {
		out[i] = g.(*ptfile.Tensor).Numel()
	}
	return out
}
