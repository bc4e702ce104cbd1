package mpi

import (
	"fmt"
	"io"
	"time"

	"github.com/dszero/dszero/comm"
)

// DefaultTimeout bounds every collective when Options.Timeout is zero
// (comm.DefaultTimeout, 30 minutes, the in-process backend's default too).
const DefaultTimeout = comm.DefaultTimeout

// DefaultAbortGrace is the time between a collective's timeout (when its
// Wait returns the error) and MPI_Abort, when Options.AbortGrace is zero.
const DefaultAbortGrace = 2 * time.Second

// AbortCode is the exit status MPI_Abort gives the job after a collective
// timed out or failed: timeout(1)'s 124.
const AbortCode = 124

// Options configure Init. They apply to the world communicator and to every
// communicator split from it.
type Options struct {
	// Timeout bounds each collective on each rank, from the moment it
	// starts on its communicator's worker (after the collectives queued
	// before it) until it completes; a context deadline that comes earlier
	// wins. Zero means DefaultTimeout. The error names the ranks that did
	// not arrive; MPI cannot cancel a collective, so a timeout aborts the
	// job (see the package documentation).
	Timeout time.Duration

	// AbortGrace is how long a rank whose collective timed out or failed
	// waits, after that collective's Wait has returned the error, before it
	// calls MPI_Abort: time to log the error. Zero means
	// DefaultAbortGrace.
	AbortGrace time.Duration

	// Verify checks before every collective that all ranks issued the same
	// one (kind, dtype, length, op, root, sequence number), at the cost of
	// one small MPI_Allgather per collective — what
	// TORCH_DISTRIBUTED_DEBUG=DETAIL does for torch.distributed. A mismatch
	// then fails that collective on every rank with comm.ErrMismatch, and
	// the job goes on (no abort). Without Verify, mismatched collectives
	// are undefined behaviour in MPI: a wrong result, an MPI error, or a
	// hang until the timeout.
	Verify bool

	// Log receives the message written just before MPI_Abort. Nil means
	// os.Stderr.
	Log io.Writer
}

// validate checks o and fills in the defaults.
func (o Options) validate() (Options, error) {
	var err error
	if o.Timeout, err = comm.CheckTimeout("mpi: collective timeout", o.Timeout); err != nil {
		return o, err
	}
	if o.AbortGrace < 0 {
		return o, fmt.Errorf("mpi: negative abort grace %v", o.AbortGrace)
	}
	if o.AbortGrace == 0 {
		o.AbortGrace = DefaultAbortGrace
	}
	return o, nil
}
