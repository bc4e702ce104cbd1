package checkpoint

import (
	"fmt"

	"github.com/dszero/dszero/zero"
)

// Saving without a copy. A save writes each file straight from the
// buffers that hold the rank's state: the engine's view of it
// (zero.Engine.ViewState — the master partitions and optimizer state in
// place) and its working parameters, each tensor a ptfile.Source that the
// writer reads a piece at a time. The extra memory of a save is then the
// writer's (ptfile.ScratchBytes: the I/O buffer and one piece) and the
// pickles, whatever the model's size; the rank must not step until the
// save returns. An asynchronous save (async.go) writes from a snapshot
// instead, so that the next step can run during the write.

// view is what a rank's files are written from.
type view struct {
	st   zero.State
	work []float32 // the working parameters (stages 0–2 write them)
}

// viewOf is the engine's state in place.
func viewOf(e *zero.Engine) (view, error) {
	st, err := e.ViewState()
	if err != nil {
		return view{}, fmt.Errorf("checkpoint: %w", err)
	}
	work, _ := e.ModelBuffers()
	return view{st: st, work: work}, nil
}
