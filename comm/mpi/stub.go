//go:build !mpi

package mpi

import (
	"errors"

	"github.com/dszero/dszero/comm"
)

// ErrNoMPI is Init's error in a binary built without the mpi build tag.
var ErrNoMPI = errors.New("built without MPI support: rebuild with -tags mpi (Debian: apt-get install openmpi-bin libopenmpi-dev)")

// World is this process's MPI library. Without the mpi build tag there is
// none: Init always fails with ErrNoMPI.
type World struct{}

// Init fails with ErrNoMPI: this binary was built without the mpi tag.
func Init(opts Options) (*World, error) {
	if _, err := opts.validate(); err != nil {
		return nil, err
	}
	return nil, ErrNoMPI
}

// Comm is never reached: Init returns no World without the mpi tag.
func (w *World) Comm() comm.Comm { panic("mpi: " + ErrNoMPI.Error()) }

// Finalize fails with ErrNoMPI.
func (w *World) Finalize() error { return ErrNoMPI }

// AwaitAbort returns at once: without MPI no job is ever being aborted.
func (w *World) AwaitAbort() {}
