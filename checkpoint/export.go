package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/dszero/dszero/half"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/ptfile"
	"github.com/dszero/dszero/zero/partition"
)

// Export is zero_to_fp32's job without its memory: it writes a
// checkpoint's consolidated fp32 weights (dszero's or DeepSpeed's, any
// stage and world size) as one safetensors file under their parameter
// names, one parameter at a time, each read piece by piece from the ranks'
// files (ptfile.File.ReadAt). Memory stays near one read buffer: no
// parameter, partition or model is ever held whole. A dszero checkpoint's
// files are first checked against their manifests.

// ExportOptions choose the checkpoint and the output.
type ExportOptions struct {
	Tag   string // "" reads latest
	DType string // "F32" (or ""), "BF16" or "F16": the dtype written
}

// ExportStats describe an export.
type ExportStats struct {
	Tag           string
	Stage, World  int
	Params        int
	Elements      int64
	CheckpointB   int64 // bytes of the checkpoint's files
	WrittenB      int64 // bytes of the safetensors file
	ManifestCheck bool  // the files were checked against their manifests
}

// source is where one parameter's values lie: pieces of storages.
type piece struct {
	f      *ptfile.File
	s      *ptfile.Storage
	dtype  ptfile.DType
	off, n int64 // elements of the storage
}

// Export writes dir's checkpoint (o.Tag, or latest) to out.
func Export(dir, out string, o ExportOptions) (ExportStats, error) {
	var st ExportStats
	tag, path, err := checkpointPath(dir, o.Tag)
	if err != nil {
		return st, err
	}
	st.Tag = tag
	// The files' names say the precision (bf16_ optimizer files).
	dtype := "fp32"
	if _, optim := FileNames(1, 0, "bf16"); fileExists(filepath.Join(path, optim)) {
		dtype = "bf16"
	}
	man, err := readManifest(path, 0)
	if errors.Is(err, fs.ErrNotExist) {
		man, err = foreignManifest(path, dtype)
	}
	if err != nil {
		return st, err
	}
	st.Stage, st.World, st.ManifestCheck = man.Stage, man.World, !man.foreign
	files := map[string]*ptfile.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	open := func(name string, rank int) (*ptfile.File, error) {
		if f := files[name]; f != nil {
			return f, nil
		}
		p := filepath.Join(path, name)
		if !man.foreign {
			m, err := readManifest(path, rank)
			if err != nil {
				return nil, err
			}
			if err := checkFile(path, name, m); err != nil {
				return nil, err
			}
		}
		f, err := ptfile.Open(p, ptfile.Options{DeepSpeed: true})
		if err != nil {
			return nil, err
		}
		if fi, err := os.Stat(p); err == nil {
			st.CheckpointB += fi.Size()
		}
		files[name] = f
		return f, nil
	}
	names, shapes, where, err := locate(man, dtype, open)
	if err != nil {
		return st, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	buf := make([]byte, 4<<20)
	vals := make([]float32, len(buf)/2)
	tensors := make([]model.Tensor, len(names))
	for i := range names {
		ps := where[i]
		tensors[i] = model.Tensor{Name: names[i], Shape: shapes[i], DType: o.DType, Stream: func(yield func([]float32) error) error {
			for _, p := range ps {
				size := p.dtype.Size()
				for at := int64(0); at < p.n; {
					k := min(p.n-at, int64(len(buf))/size)
					b := buf[:k*size]
					if err := p.f.ReadAt(p.s, b, (p.off+at)*size); err != nil {
						return err
					}
					v := vals[:k]
					for j := range v {
						switch p.dtype {
						case ptfile.Float32:
							v[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
						case ptfile.BFloat16:
							v[j] = half.F32FromBF16(binary.LittleEndian.Uint16(b[2*j:]))
						default:
							v[j] = half.F32FromF16(binary.LittleEndian.Uint16(b[2*j:]))
						}
					}
					if err := yield(v); err != nil {
						return err
					}
					at += k
				}
			}
			return nil
		}}
		n := int64(1)
		for _, d := range shapes[i] {
			n *= int64(d)
		}
		st.Elements += n
	}
	st.Params = len(names)
	if err := model.WriteSafetensors(out, tensors, map[string]string{"format": "pt", "source": "dszero export " + path}); err != nil {
		return st, err
	}
	if fi, err := os.Stat(out); err == nil {
		st.WrittenB = fi.Size()
	}
	return st, nil
}

// checkFile checks one file against a rank's manifest.
func checkFile(path, name string, man manifest) error {
	for _, e := range man.Files {
		if e.Name != name {
			continue
		}
		got, err := digest(filepath.Join(path, name))
		if err != nil {
			return err
		}
		if got.Bytes != e.Bytes || got.SHA256 != e.SHA256 {
			return fmt.Errorf("checkpoint: %s does not match rank %d's manifest (size or sha256): the file is truncated or corrupted", filepath.Join(path, name), man.Rank)
		}
		return nil
	}
	return fmt.Errorf("checkpoint: %s is not in rank %d's manifest", filepath.Join(path, name), man.Rank)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// locate finds each parameter's name, shape and pieces.
func locate(man manifest, dtype string, open func(string, int) (*ptfile.File, error)) (names []string, shapes [][]int, where [][]piece, err error) {
	model0, _ := FileNames(man.Stage, 0, dtype)
	ms, err := open(model0, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	tensorPiece := func(f *ptfile.File, t *ptfile.Tensor, lo, n int64) piece {
		return piece{f: f, s: t.Storage, dtype: t.DType, off: t.Offset + lo, n: n}
	}
	stage := fileStage(man.Stage, dtype)
	if stage == 0 {
		mod, err := get[*ptfile.Dict](ms.Root, "module")
		if err != nil {
			return nil, nil, nil, err
		}
		master, _ := ptfile.Lookup(ms.Root, "dszero.fp32_master")
		mt, _ := master.(*ptfile.Tensor)
		var off int64
		for k, v := range mod.All() {
			t, ok := v.(*ptfile.Tensor)
			if !ok {
				return nil, nil, nil, fmt.Errorf("module[%v] is %s", k, ptfile.TypeName(v))
			}
			n := t.Numel()
			names, shapes = append(names, fmt.Sprint(k)), append(shapes, ints(t.Shape))
			if mt != nil {
				where = append(where, []piece{tensorPiece(ms, mt, off, n)})
			} else {
				where = append(where, []piece{tensorPiece(ms, t, 0, n)})
			}
			off += n
		}
		return names, shapes, where, nil
	}
	var params []partition.Param
	ps, err := ptfile.Lookup(ms.Root, "param_shapes")
	if err != nil {
		return nil, nil, nil, err
	}
	groups, ok := ps.(ptfile.List)
	if !ok {
		groups = ptfile.List{ps}
	}
	for _, g := range groups {
		d, ok := g.(*ptfile.Dict)
		if !ok {
			return nil, nil, nil, fmt.Errorf("param_shapes holds %s", ptfile.TypeName(g))
		}
		for k, v := range d.All() {
			sh, err := shapeOf(v)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("param_shapes[%v]: %w", k, err)
			}
			n := 1
			for _, x := range sh {
				n *= x
			}
			names, shapes = append(names, fmt.Sprint(k)), append(shapes, sh)
			params = append(params, partition.Param{Name: fmt.Sprint(k), Numel: n})
		}
	}
	where = make([][]piece, len(params))
	// Each rank's fp32 storage(s), as one run of elements.
	type run struct {
		f  *ptfile.File
		ts []*ptfile.Tensor
	}
	runs := make([]run, man.World)
	for r := range runs {
		_, optim := FileNames(man.Stage, r, dtype)
		f, err := open(optim, r)
		if err != nil {
			return nil, nil, nil, err
		}
		p := "optimizer_state_dict.single_partition_of_fp32_groups"
		if stage == 3 {
			p = "optimizer_state_dict.fp32_flat_groups"
		}
		l, err := get[ptfile.List](f.Root, p)
		if err != nil {
			return nil, nil, nil, err
		}
		runs[r].f = f
		for _, x := range l {
			t, ok := x.(*ptfile.Tensor)
			if !ok {
				return nil, nil, nil, fmt.Errorf("%s holds %s", p, ptfile.TypeName(x))
			}
			runs[r].ts = append(runs[r].ts, t)
		}
	}
	// at returns the pieces of elements [lo, lo+n) of rank r's run.
	at := func(r int, lo, n int64) []piece {
		var out []piece
		var start int64
		for _, t := range runs[r].ts {
			tn := t.Numel()
			if a, b := max(lo, start), min(lo+n, start+tn); a < b {
				out = append(out, tensorPiece(runs[r].f, t, a-start, b-a))
			}
			start += tn
		}
		return out
	}
	// Each rank's pieces of the flat buffer, split by parameter; ranks in
	// order, so each parameter's pieces come in flat order.
	starts := make([]int, len(params)+1)
	for i, p := range params {
		starts[i+1] = starts[i] + p.Numel
	}
	for r := range man.World {
		pieces(stage, man.World, r, params, func(lo, hi, runAt int) {
			i := sort.SearchInts(starts, lo+1) - 1 // the parameter holding flat[lo]
			for a := lo; a < hi; i++ {
				b := min(hi, starts[i+1])
				where[i] = append(where[i], at(r, int64(runAt+a-lo), int64(b-a))...)
				a = b
			}
		})
	}
	return names, shapes, where, nil
}

func ints(xs []int64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}

// shapeOf reads a torch.Size (or a list of ints).
func shapeOf(v any) ([]int, error) {
	switch s := v.(type) {
	case ptfile.Size:
		return ints([]int64(s)), nil
	case ptfile.Tuple:
		return intList([]any(s))
	case ptfile.List:
		return intList([]any(s))
	}
	return nil, fmt.Errorf("a shape is %s", ptfile.TypeName(v))
}

func intList(xs []any) ([]int, error) {
	out := make([]int, len(xs))
	for i, x := range xs {
		n, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("shape element %s", ptfile.TypeName(x))
		}
		out[i] = int(n)
	}
	return out, nil
}
