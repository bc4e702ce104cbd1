package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dszero/dszero/internal/zcore"

	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/ptfile"
)

// Reading a checkpoint's .pt files. Every file is opened — its pickle
// read, nothing else — and the storages it declares are checked against
// what the model needs before any is read: a compressed entry of a few
// megabytes may declare, and inflate to, gigabytes. Errors are the ones a
// user of dszero train --load or dszero export can act on: ptfile's hints
// about its Go Options (which this package sets itself) become what to do
// about the file.

// openFile opens a checkpoint file, its pickle read and checked.
func openFile(path string) (*ptfile.File, error) {
	f, err := ptfile.Open(path, ptfile.Options{DeepSpeed: true})
	if err != nil {
		return nil, userError(err)
	}
	return f, nil
}

// readFile reads a checkpoint file whole for a model of layout l saved on
// world ranks, refusing storages larger than such a checkpoint holds
// before reading them.
func readFile(path string, l *model.Layout, world int) (any, error) {
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := checkStorages(f, l.Numel, len(l.Specs), world); err != nil {
		return nil, err
	}
	if err := f.LoadAll(); err != nil {
		return nil, userError(err)
	}
	return f.Root, nil
}

// storageLimit is the most bytes one storage of a checkpoint of a model
// of numel parameters in params tensors, saved on world ranks, may
// declare. The largest a checkpoint needs is a flat
// buffer of every parameter, or a rank's partition of one with its
// padding (under 2·world elements at stages 1 and 2, under world per
// parameter at stage 3), in fp32 — taken twice over, as float64 — plus
// 64 KiB for the small tensors client state may add (RNG states).
func storageLimit(numel, params, world int) int64 {
	elems := int64(numel) + int64(world)*int64(params+2)
	return 8*elems + 64<<10
}

// maxStoragesPerFile bounds a file's storages together, in units of
// storageLimit: the fattest file, a stage-0 fp16 model-states file, holds
// the 16-bit module, the fp32 master and two fp32 optimizer states (14
// bytes a parameter).
const maxStoragesPerFile = 4

// checkStorages checks the storages f declares against the model before
// any is read.
func checkStorages(f *ptfile.File, numel, params, world int) error {
	limit := storageLimit(numel, params, world)
	var total int64
	for _, s := range f.Storages {
		if n := s.NBytes(); n > limit {
			return fmt.Errorf("checkpoint: %s: storage %s/data/%s declares %d %s elements (%d bytes); a checkpoint of this model (%d parameters, %d ranks) holds at most %d bytes in one: the file is corrupted or is not this model's checkpoint",
				f.Name, f.Archive, s.Key, s.Numel, s.DType, n, numel, world, limit)
		}
		total += s.NBytes()
	}
	if total > maxStoragesPerFile*limit {
		return fmt.Errorf("checkpoint: %s: its %d storages declare %d bytes; a checkpoint file of this model (%d parameters, %d ranks) holds at most %d: the file is corrupted or is not this model's checkpoint",
			f.Name, len(f.Storages), total, numel, world, maxStoragesPerFile*limit)
	}
	return nil
}

// userError replaces the Go hint of a ptfile error (an Options field that
// would accept the file) by what a user can do about the file.
func userError(err error) error {
	var pe *ptfile.Error
	if !errors.As(err, &pe) || pe.Option == "" {
		return err
	}
	hint := "the file is corrupted, or is not a checkpoint DeepSpeed or dszero wrote: restore it from a good copy"
	if pe.Option == "Classes" || pe.Option == "DeepSpeed" {
		hint = "dszero reads only checkpoint data — tensors, numbers, strings, containers and DeepSpeed's own classes: " +
			"save the checkpoint without that object (for example, leave it out of the client_state given to save_checkpoint), " +
			"or load the file in Python with torch.load(weights_only=False), drop the object and torch.save it again"
	}
	return &fileError{pe: pe, hint: hint}
}

// fileError is a ptfile error with a hint for dszero's users.
type fileError struct {
	pe   *ptfile.Error
	hint string
}

func (e *fileError) Error() string { return e.pe.Message() + ": " + e.hint }
func (e *fileError) Unwrap() error { return e.pe }

// streamMin is the size from which a storage of a streamed file is read
// where its values go rather than loaded: smaller ones (steps, scalars,
// the pickled client state's tensors) are loaded at open.
const streamMin = 64 << 10

// readChecked opens name, checking its size against the manifest, and
// the storages it declares against the model l. Its tensors are read from
// the file when their values are asked for (readStreamed), and its sha256
// is computed from those reads (hashingReader), so that a load reads it
// from the disk once. The caller must call done once, with the error its
// reading of the file came to (or nil): done hashes what the reads left,
// closes the file and returns the manifest's mismatch — which says why
// anything else failed — or else that error. Nothing read from the file
// may be used before done returns nil. A file of a foreign checkpoint (no
// manifest, no sha256) is read whole.
func readChecked(path, name string, man manifest, l *model.Layout) (root any, done func(error) error, err error) {
	p := filepath.Join(path, name)
	if man.foreign {
		root, err := readFile(p, l, man.World)
		return root, func(err error) error { return err }, err
	}
	var want *manifestEntry
	for i := range man.Files {
		if man.Files[i].Name == name {
			want = &man.Files[i]
		}
	}
	if want == nil {
		return nil, nil, fmt.Errorf("checkpoint: %s is not in rank %d's manifest", p, man.Rank)
	}
	fd, err := os.Open(p)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	fi, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	if fi.Size() != want.Bytes {
		fd.Close()
		return nil, nil, fmt.Errorf("checkpoint: %s has %d bytes, the manifest says %d: the file is truncated or was replaced", p, fi.Size(), want.Bytes)
	}
	hr := newHashingReader(fd, fi.Size())
	verdict := func(err error) error {
		defer fd.Close()
		sum, serr := hr.sum()
		switch {
		case serr != nil:
			return serr
		case sum != want.SHA256:
			return fmt.Errorf("checkpoint: %s does not match its sha256 in the manifest: the file is corrupted", p)
		}
		return err
	}
	f, err := ptfile.NewReader(hr, fi.Size(), p, ptfile.Options{DeepSpeed: true})
	if err != nil {
		return nil, nil, verdict(userError(err))
	}
	if err := streamFile(f, l, man.World); err != nil {
		f.Close()
		return nil, nil, verdict(err)
	}
	return f.Root, func(err error) error {
		f.Close()
		return verdict(err)
	}, nil
}

// streamFile makes an opened checkpoint file of a model of layout l saved
// on world ranks readable where its values go: its storages are checked
// as readFile checks them, its small ones loaded, and the others read,
// when their values are asked for (values), from the file
// (ptfile.File.Stream), each checked against its CRC-32 as it is read.
func streamFile(f *ptfile.File, l *model.Layout, world int) error {
	if err := checkStorages(f, l.Numel, len(l.Specs), world); err != nil {
		return err
	}
	for _, s := range f.Storages {
		if s.NBytes() < streamMin {
			if err := f.Load(s); err != nil {
				return userError(err)
			}
		}
	}
	f.Stream()
	return nil
}

// values reads a floating tensor's elements as float32: into dst when it
// has the tensor's size (the engine's own buffer), into a new slice
// otherwise.
func values(t *ptfile.Tensor, dst []float32) ([]float32, error) {
	if !t.Contiguous() {
		return t.Float32s()
	}
	if int64(len(dst)) != t.Numel() {
		dst = make([]float32, t.Numel())
	}
	if err := t.ReadFloat32(dst); err != nil {
		return nil, userError(err)
	}
	return dst, nil
}

// paddedValues reads the first len(dst) elements of a contiguous
// floating tensor longer than dst into dst, and checks that the others —
// a partition's padding — are zero, reading them a piece at a time.
func paddedValues(t *ptfile.Tensor, dst []float32) ([]float32, error) {
	n := t.Numel()
	if !t.Contiguous() || len(t.Shape) != 1 {
		return nil, fmt.Errorf("a tensor of shape %v stride %v, not a flat partition", t.Shape, t.Stride)
	}
	head, err := t.View(t.Offset, []int64{int64(len(dst))}, []int64{1})
	if err != nil {
		return nil, err
	}
	if err := head.ReadFloat32(dst); err != nil {
		return nil, userError(err)
	}
	pad := make([]float32, min(n-int64(len(dst)), padPiece))
	for off := int64(len(dst)); off < n; off += int64(len(pad)) {
		p := pad[:min(int64(len(pad)), n-off)]
		tail, err := t.View(t.Offset+off, []int64{int64(len(p))}, []int64{1})
		if err != nil {
			return nil, err
		}
		if err := tail.ReadFloat32(p); err != nil {
			return nil, userError(err)
		}
		for _, x := range p {
			if x != 0 {
				return nil, fmt.Errorf("%d elements, the fp32 partition %d, and the extra ones are not the partition's zero padding", n, len(dst))
			}
		}
	}
	return dst, nil
}

// padPiece is the most padding elements paddedValues reads at once: a
// partition's padding is under 2·world of them.
const padPiece = 16 << 10

func groupMaster(g *zcore.GroupState) []float32 {
	if g == nil {
		return nil
	}
	return g.Master
}

func groupState(g *zcore.GroupState) map[string][]float32 {
	if g == nil {
		return nil
	}
	return g.Optim.State
}
