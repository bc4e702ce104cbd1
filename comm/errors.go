package comm

import (
	"errors"
	"fmt"
)

// The causes a collective can fail with. Test with errors.Is on the error a
// Handle returns; errors.As to *Error gives the collective and the ranks.
var (
	// ErrTimeout: ranks did not arrive (or did not finish) within the
	// communicator's timeout or the context's deadline.
	ErrTimeout = errors.New("timeout")
	// ErrRankFailed: a rank returned an error, panicked, had a fault
	// injected, or cancelled its context; the rank's own error is wrapped
	// too.
	ErrRankFailed = errors.New("rank failed")
	// ErrRankExited: a rank finished its work (its function returned) while
	// others still issued collectives that need it.
	ErrRankExited = errors.New("rank exited")
	// ErrMismatch: ranks issued different collectives under one sequence
	// number, or with different dtypes, lengths, ops or roots, or with
	// overlapping buffers.
	ErrMismatch = errors.New("mismatched collectives")
	// ErrClosed: the communicator was used after its rank's work ended.
	ErrClosed = errors.New("communicator closed")
)

// Error is a collective that could not complete, as one rank saw it.
type Error struct {
	Group string // the communicator: "world", or "group[0 2]" with world ranks
	Kind  Kind   // the collective this rank was running
	Seq   uint64 // its sequence number on the communicator, from 1
	Rank  int    // the reporting rank, in the communicator
	Size  int    // the communicator's size
	Peers []int  // the ranks at fault, in the communicator; may include Rank
	Err   error  // what happened; wraps one of the Err* causes above
}

func (e *Error) Error() string {
	return fmt.Sprintf("comm: %s #%d on %s (rank %d of %d): %v", e.Kind, e.Seq, e.Group, e.Rank, e.Size, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }
