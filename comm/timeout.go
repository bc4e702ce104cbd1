package comm

import (
	"fmt"
	"strings"
	"time"
)

// The timeout contract every backend keeps (see "Timeout and failure" in
// the package documentation):
//
//   - Each collective on each rank completes or fails within the
//     communicator's timeout, counted from the moment the rank starts it
//     (after the collectives queued before it on the same communicator); a
//     context deadline that comes earlier wins. Zero means DefaultTimeout.
//   - A collective that times out fails with a *Error whose Err wraps
//     ErrTimeout, whose Peers are the ranks that did not arrive (or did not
//     finish), and whose message says so, in the words of TimedOut.
//   - The communicator is broken from then on, and every rank still alive
//     that needs it fails too, instead of waiting: no rank hangs silently
//     because another one stopped.
//
// The step is the caller's to add (train wraps errors with "step N: ").

// DefaultTimeout bounds every collective when a backend's timeout is zero:
// 30 minutes, DeepSpeed's default_pg_timeout and torch.distributed's
// default for init_process_group (dszero train --comm-timeout).
const DefaultTimeout = 30 * time.Minute

// CheckTimeout returns d, DefaultTimeout for zero, and an error naming
// what for a negative d (what: "--comm-timeout", "inproc: timeout").
func CheckTimeout(what string, d time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("%s %v: a timeout must be positive (e.g. 30m, 90s)", what, d)
	case d == 0:
		return DefaultTimeout, nil
	}
	return d, nil
}

// Straggler is a rank that a timed-out collective waited for: its rank in
// the communicator and, when the backend can tell, what it was doing
// instead ("stopped or hung: it does not answer", "busy: its last
// collective here is #640"); "" when unknown.
type Straggler struct {
	Rank  int
	State string
}

// TimedOut is the fault of a collective that timed out after budget on
// the communicator group (members: its world ranks by rank, as for Who)
// while the stragglers had not arrived — or, with finishing, had arrived
// but not finished. With no stragglers every rank arrived and the
// collective itself did not complete (a stalled transport).
//
//	timed out after 5s: rank 1 did not arrive (stopped or hung: no answer within 1s)
//	timed out after 5s: ranks 1 (world rank 3), 2 (world rank 5) did not arrive
func TimedOut(budget time.Duration, group string, members []int, stragglers []Straggler, finishing bool, cause error) *FaultError {
	msg := fmt.Sprintf("timed out after %v: ", budget)
	if len(stragglers) == 0 {
		msg += "every rank arrived, but the collective did not complete"
	} else {
		msg += Missing(group, members, stragglers, finishing)
	}
	return &FaultError{Msg: msg, Kind: ErrTimeout, Cause: cause}
}

// Missing says which ranks of a communicator a collective waited for, and
// what each was doing when the backend can tell: "rank 1 did not arrive
// (stopped or hung: …)", "ranks 1, 2 did not finish", "ranks 1 (world
// rank 3), 2 (world rank 5) did not arrive (rank 1 (world rank 3): busy
// …; rank 2 (world rank 5): …)".
func Missing(group string, members []int, stragglers []Straggler, finishing bool) string {
	ranks := make([]int, len(stragglers))
	var states []string
	for i, s := range stragglers {
		ranks[i] = s.Rank
		if s.State != "" {
			states = append(states, s.State)
		}
	}
	verb := "did not arrive"
	if finishing {
		verb = "did not finish"
	}
	msg := Who(group, members, ranks) + " " + verb
	switch {
	case len(states) == 1 && len(stragglers) == 1:
		msg += " (" + states[0] + ")"
	case len(states) > 0:
		var parts []string
		for _, s := range stragglers {
			if s.State != "" {
				parts = append(parts, fmt.Sprintf("%s: %s", Who(group, members, []int{s.Rank}), s.State))
			}
		}
		msg += " (" + strings.Join(parts, "; ") + ")"
	}
	return msg
}
