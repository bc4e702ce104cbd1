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

	"github.com/dszero/dszero/device"
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
// files are first checked against their manifests; every file's identity
// against the checkpoint's (identity.go); and every byte read against its
// zip entry's CRC-32 — the file is written under a temporary name and
// renamed to its own only when every storage it was read from is whole.

// ExportOptions choose the checkpoint and the output.
type ExportOptions struct {
	Tag   string // "" reads latest
	DType string // "F32" (or ""), "BF16" or "F16": the dtype written
	// Rename, when set, is given every parameter's name and shape, in the
	// checkpoint's order, before anything is written, and returns the
	// names to write and which tensors to write transposed (a 2-D (out,
	// in) weight as (in, out): Hugging Face GPT-2's Conv1D weights). An
	// error stops the export.
	Rename func(names []string, shapes [][]int) (out []string, transpose []bool, err error)
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

// piece is where a run of one parameter's values lies: elements of a
// storage.
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
	dtype := device.F32
	if _, optim := FileNames(1, 0, device.BF16); fileExists(filepath.Join(path, optim)) {
		dtype = device.BF16
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
		f, err := openFile(p)
		if err != nil {
			return nil, err
		}
		if fi, err := os.Stat(p); err == nil {
			st.CheckpointB += fi.Size()
		}
		files[name] = f
		return f, nil
	}
	names, shapes, where, err := locate(path, man, dtype, open)
	if err != nil {
		return st, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	outNames, transpose := names, make([]bool, len(names))
	if o.Rename != nil {
		if outNames, transpose, err = o.Rename(names, shapes); err != nil {
			return st, fmt.Errorf("checkpoint %s: %w", path, err)
		}
		if len(outNames) != len(names) || len(transpose) != len(names) {
			panic("checkpoint: ExportOptions.Rename returned another number of names")
		}
	}
	r := &pieceReader{}
	tensors := make([]model.Tensor, len(names))
	for i := range names {
		ps, shape := where[i], shapes[i]
		if transpose[i] {
			if len(shape) != 2 {
				return st, fmt.Errorf("checkpoint %s: %s has shape %v: only a 2-D weight can be written transposed", path, names[i], shape)
			}
			shape = []int{shape[1], shape[0]}
		}
		tensors[i] = model.Tensor{Name: outNames[i], Shape: shape, DType: o.DType, Transpose: transpose[i],
			ReadAt: func(dst []float32, off int) error { return r.read(ps, dst, int64(off)) }}
		n := int64(1)
		for _, d := range shapes[i] {
			n *= int64(d)
		}
		st.Elements += n
	}
	st.Params = len(names)
	// Written under a temporary name, and renamed once every storage the
	// values came from has been read whole and matched its CRC-32.
	tmp := out + ".unverified"
	err = model.WriteSafetensors(tmp, tensors, map[string]string{"format": "pt", "source": "dszero export " + path})
	if err == nil {
		err = verifyPieces(where)
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		os.Remove(tmp)
		var pe *ptfile.Error
		if errors.As(err, &pe) {
			// The checkpoint's fault: say so, not which tensor was being written.
			return st, fmt.Errorf("checkpoint %s: %w (%s was not written)", path, userError(pe), out)
		}
		return st, err
	}
	if fi, err := os.Stat(out); err == nil {
		st.WrittenB = fi.Size()
	}
	return st, nil
}

// pieceReader reads runs of a parameter's values from its pieces.
type pieceReader struct{ buf []byte }

// read reads elements [off, off+len(dst)) of the parameter held by ps
// into dst, as float32.
func (r *pieceReader) read(ps []piece, dst []float32, off int64) error {
	var start int64 // of the current piece, in the parameter
	for _, p := range ps {
		lo, hi := max(off, start), min(off+int64(len(dst)), start+p.n)
		if lo < hi {
			size := p.dtype.Size()
			if need := (hi - lo) * size; int64(len(r.buf)) < need {
				r.buf = make([]byte, need)
			}
			b := r.buf[:(hi-lo)*size]
			if err := p.f.ReadAt(p.s, b, (p.off+lo-start)*size); err != nil {
				return err
			}
			v := dst[lo-off : hi-off]
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
		}
		start += p.n
	}
	return nil
}

// verifyPieces checks the CRC-32 of every storage the pieces lie in,
// reading what the export did not need of them (padding, the rest of a
// flat buffer).
func verifyPieces(where [][]piece) error {
	seen := map[*ptfile.Storage]bool{}
	for _, ps := range where {
		for _, p := range ps {
			if !seen[p.s] {
				seen[p.s] = true
				if err := p.f.Verify(p.s); err != nil {
					return err
				}
			}
		}
	}
	return nil
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

// locate finds each parameter's name, shape and pieces in the checkpoint
// at path, checking the files it opens against the checkpoint's identity.
func locate(path string, man manifest, dtype device.DType, open func(string, int) (*ptfile.File, error)) (names []string, shapes [][]int, where [][]piece, err error) {
	model0, _ := FileNames(man.Stage, 0, dtype)
	ms, err := open(model0, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	// expectFor reads the checkpoint's identity once the parameters, in
	// the flat buffer's order, are known.
	var x expect
	var numel int
	expectFor := func(flat []partition.Param) error {
		for _, p := range flat {
			numel += p.Numel
		}
		var err error
		if x, err = newExpect(path, man, dtype, model0, ms.Root, flat); err != nil {
			return err
		}
		if err := checkStorages(ms, numel, len(flat), man.World); err != nil {
			return err
		}
		return x.check(model0, 0, kindModel, ms.Root)
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
		// The fp32 master of 16-bit training: the fp16 wrapper's
		// (fp16wrap.go), flat or per parameter, or dszero's own copy
		// (bf16, and fp16 checkpoints of earlier dszero versions); fp32
		// training's module is the master.
		master, _ := ptfile.Lookup(ms.Root, "optimizer.fp32_groups_flat[0]")
		if master == nil {
			master, _ = ptfile.Lookup(ms.Root, "dszero.fp32_master")
		}
		mt, _ := master.(*ptfile.Tensor)
		copies, _ := ptfile.Lookup(ms.Root, "optimizer.fp32_groups[0]")
		perParam, _ := copies.(ptfile.List)
		var off int64
		i := 0
		for k, v := range mod.All() {
			t, ok := v.(*ptfile.Tensor)
			if !ok {
				return nil, nil, nil, fmt.Errorf("module[%v] is %s", k, ptfile.TypeName(v))
			}
			n := t.Numel()
			names, shapes = append(names, fmt.Sprint(k)), append(shapes, ints(t.Shape))
			switch {
			case mt != nil:
				where = append(where, []piece{tensorPiece(ms, mt, off, n)})
			case perParam != nil:
				if i >= len(perParam) {
					return nil, nil, nil, fmt.Errorf("optimizer.fp32_groups[0] has %d fp32 copies, module more", len(perParam))
				}
				c, ok := perParam[i].(*ptfile.Tensor)
				if !ok || c.Numel() != n {
					return nil, nil, nil, fmt.Errorf("optimizer.fp32_groups[0][%d] is not module[%v]'s fp32 copy (%s)", i, k, ptfile.TypeName(perParam[i]))
				}
				where = append(where, []piece{tensorPiece(ms, c, 0, n)})
			default:
				where = append(where, []piece{tensorPiece(ms, t, 0, n)})
			}
			off += n
			i++
		}
		flat := make([]partition.Param, len(names))
		for i := range names {
			flat[i] = partition.Param{Name: names[i], Numel: int(where[i][0].n)}
		}
		if err := expectFor(flat); err != nil {
			return nil, nil, nil, err
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
	if err := expectFor(params); err != nil {
		return nil, nil, nil, err
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
		if err := x.check(optim, r, kindOptim, f.Root); err != nil {
			return nil, nil, nil, err
		}
		if err := checkStorages(f, numel, len(params), man.World); err != nil {
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
