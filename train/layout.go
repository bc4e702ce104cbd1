package train

import (
	"context"
	"fmt"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/zero"
)

// A SaveLayout places each checkpoint and completes it. Without one
// (Config.Layout nil) every save is DeepSpeed's save_checkpoint into
// Config.SaveDir: SaveDir/global_stepN and SaveDir/latest. The Trainer's
// layout (package hfstate) puts each save in a checkpoint-N folder of its
// own, assembled in a staging folder and renamed into place, with the
// Trainer's files beside DeepSpeed's and the oldest folders rotated out.
//
// A save runs: checkpoint.Save(Dir(step)) on every rank, then Rank on
// every rank, then — once every rank has succeeded — Commit on rank 0. A
// rank that fails stops every rank, naming it, and nothing is committed.
type SaveLayout interface {
	// Dir is the folder the DeepSpeed-layout files of the save after
	// global step step are written in.
	Dir(step int64) string
	// Rank writes rank's own files of that save into dir, beside
	// DeepSpeed's.
	Rank(dir string, step int64, rank int) error
	// Commit completes the save in dir once every rank's files are there
	// and returns the checkpoint's path, as users resume from it.
	Commit(dir string, step int64) (string, error)
}

// StateFormat is how a save writes each rank's training state into its
// folder: DeepSpeed's files (package checkpoint's Save, the default), or
// Accelerate's SHARDED_STATE_DICT or FULL_STATE_DICT. A resume reads any
// of them, whichever the folder holds.
type StateFormat int

const (
	DeepSpeedFiles StateFormat = iota // global_stepN/ and latest (save_checkpoint)
	Sharded                           // pytorch_model_fsdp_0/, optimizer_0/ (torch.distributed.checkpoint)
	Full                              // pytorch_model_fsdp.bin, optimizer.bin (rank 0's torch.save)
)

// save writes the engine's state into dir in format f.
func (f StateFormat) save(dir string, e *zero.Engine, o checkpoint.Options) error {
	switch f {
	case Sharded:
		return checkpoint.SaveSharded(dir, e, o)
	case Full:
		return checkpoint.SaveFull(dir, e, o)
	}
	return checkpoint.Save(dir, "", e, o)
}

// load restores the engine's state from dir, in the format dir holds.
func load(dir, tag string, e *zero.Engine, o checkpoint.Options) error {
	switch {
	case checkpoint.IsSharded(dir):
		return checkpoint.LoadSharded(dir, e, o)
	case checkpoint.IsFull(dir):
		return checkpoint.LoadFull(dir, e, o)
	}
	return checkpoint.Load(dir, tag, e, o)
}

// agree is checkpoint.Agree with the rank that failed and the step named.
func agree(ctx context.Context, c comm.Comm, err error, step int, what string) error {
	if err != nil {
		err = fmt.Errorf("rank %d could not %s: %w", c.Rank(), what, err)
	}
	if err := checkpoint.Agree(ctx, c, err, what); err != nil {
		return fmt.Errorf("step %d: %w", step, err)
	}
	return nil
}

// finishSave runs the layout's part of the save after global step step,
// whose DeepSpeed files every rank has written in dir, and returns the
// checkpoint's path (on rank 0; "" elsewhere).
func finishSave(ctx context.Context, c comm.Comm, l SaveLayout, dir string, step int) (string, error) {
	err := l.Rank(dir, int64(step), c.Rank())
	if err := agree(ctx, c, err, step, "write its files of the checkpoint in "+dir); err != nil {
		return "", err
	}
	var path string
	if c.Rank() == 0 {
		path, err = l.Commit(dir, int64(step))
	}
	if err := agree(ctx, c, err, step, "complete the checkpoint in "+dir); err != nil {
		return "", err
	}
	return path, nil
}
