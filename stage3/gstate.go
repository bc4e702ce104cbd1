package stage3

import "fmt"

// groupState is where a group's full parameters are, FSDP2's
// ShardedState for one FSDPParamGroup: a group is released (only the
// partitions exist, and its range of the gathered buffer is free),
// gathering (its all-gather is in flight into that range) or gathered
// (the range holds the full values until the group is released).
type groupState uint8

const (
	released  groupState = iota // partitions only; the range of s.full is free
	gathering                   // the all-gather is in flight (gstate.flight)
	gathered                    // the full values are in s.full
)

var groupStateNames = [...]string{"released", "gathering", "gathered"}

func (s groupState) String() string {
	if int(s) < len(groupStateNames) {
		return groupStateNames[s]
	}
	return fmt.Sprintf("groupState(%d)", int(s))
}

// groupMoves are the legal transitions: issue (released → gathering),
// land (gathering → gathered, or → released when the gather failed) and
// release (gathered → released).
var groupMoves = [...][3]bool{
	released:  {gathering: true},
	gathering: {gathered: true, released: true},
	gathered:  {released: true},
}

// gstate is one group's gathering state.
type gstate struct {
	state  groupState
	flight *flight // the all-gather in flight, while gathering
	holds  int     // hooks between Before and After that use the group
}

// to moves the group to next; an illegal move is a programmer error.
func (g *gstate) to(next groupState) {
	if !groupMoves[g.state][next] {
		panic(fmt.Sprintf("stage 3: a group moved from %v to %v", g.state, next))
	}
	g.state = next
}

// phase is where the model is in a pass: between passes, or inside its
// forward or backward. A pass begins at the first hook and ends after the
// last backward hook (fetcher.end).
type phase uint8

const (
	idle phase = iota
	forward
	backward
)

var phaseNames = [...]string{"idle", "forward", "backward"}

func (p phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// to moves the pass to next. A pass ends only from its backward; forward
// and backward may follow each other freely (a forward that failed part
// way is followed by the next micro-step's forward).
func (f *fetcher) to(next phase) {
	if next == idle && f.phase != backward {
		panic(fmt.Sprintf("stage 3: a pass ended in its %v", f.phase))
	}
	f.phase = next
}
