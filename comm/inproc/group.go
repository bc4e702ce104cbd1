package inproc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dszero/dszero/comm"
)

// group is the state a communicator's members share: the rendezvous of the
// current collective and the first fault, if any.
type group struct {
	job     *job
	name    string
	members []int // world ranks, by rank in the group
	timeout time.Duration

	registered bool // in job.groups; guarded by job.mu

	mu      sync.Mutex
	rounds  [2]*round     // by seq%2: the current collective and the one before
	fault   *fault        // the first fault; nil while healthy
	aborted chan struct{} // closed when fault is set
	copying int           // ranks inside a data phase
	idle    sync.Cond     // signalled when copying drops to 0
}

// fault is why a group broke: the ranks at fault (in the group) and what
// happened to them.
type fault struct {
	peers []int
	err   error
}

// A collective passes two phases: every rank has arrived (its buffers are
// published), and every rank is done with the others' buffers.
const (
	phaseArrive = iota
	phaseDone
	numPhases
)

// round is the rendezvous of one collective, by sequence number.
type round struct {
	seq     uint64
	calls   []*call // by rank, set on arrival
	first   int     // the rank that arrived first; the others must match it
	reached []uint8 // by rank: how many phases it has reached
	count   [numPhases]int
	ch      [numPhases]chan struct{} // closed when count reaches the group size
	split   map[int]*group           // a Split's new groups by color; made once
}

func (j *job) newGroup(name string, members []int) *group {
	g := &group{job: j, name: name, members: members, timeout: j.w.opts.Timeout, aborted: make(chan struct{})}
	g.idle.L = &g.mu
	return g
}

func (g *group) size() int { return len(g.members) }

// who names ranks of the group for messages (see comm.Who).
func (g *group) who(peers []int) string { return comm.Who(g.name, g.members, peers) }

func (g *group) rankOf(worldRank int) int {
	for i, m := range g.members {
		if m == worldRank {
			return i
		}
	}
	panic(fmt.Sprintf("inproc: world rank %d is not in %s", worldRank, g.name))
}

func (g *group) departed(worldRank int, d *departure) *fault {
	p := g.rankOf(worldRank)
	return &fault{peers: []int{p}, err: &comm.FaultError{Msg: g.who([]int{p}) + " " + d.verb, Kind: d.kind, Cause: d.cause}}
}

// failed is the fault of rank p failing with cause.
func (g *group) failed(p int, cause error) *fault {
	return &fault{peers: []int{p}, err: &comm.FaultError{Msg: g.who([]int{p}) + " failed", Kind: comm.ErrRankFailed, Cause: cause}}
}

func (g *group) abort(f *fault) {
	g.mu.Lock()
	g.abortLocked(f)
	g.mu.Unlock()
}

func (g *group) abortLocked(f *fault) {
	if g.fault == nil {
		g.fault = f
		close(g.aborted)
		g.job.broke()
	}
}

// arrive publishes rank me's call for its sequence number and returns the
// round, or the group's fault.
func (g *group) arrive(me int, c *call) (*round, *fault) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fault != nil {
		return nil, g.fault
	}
	rd := g.rounds[c.seq%2]
	if rd == nil || rd.seq != c.seq {
		if rd != nil && rd.seq > c.seq {
			panic(fmt.Sprintf("inproc: %s: rank %d arrived at #%d after #%d began", g.name, me, c.seq, rd.seq))
		}
		n := g.size()
		rd = &round{seq: c.seq, calls: make([]*call, n), first: me, reached: make([]uint8, n)}
		for i := range rd.ch {
			rd.ch[i] = make(chan struct{})
		}
		g.rounds[c.seq%2] = rd
	}
	rd.calls[me] = c
	if f := rd.calls[rd.first]; f.sig() != c.sig() {
		g.abortLocked(&fault{peers: []int{me, rd.first}, err: &comm.FaultError{
			Msg:  fmt.Sprintf("%s issued %v but %s issued %v", g.who([]int{me}), c.sig(), g.who([]int{rd.first}), f.sig()),
			Kind: comm.ErrMismatch,
		}})
		return nil, g.fault
	}
	g.reachLocked(rd, me, phaseArrive)
	if rd.count[phaseArrive] == g.size() {
		if f := g.overlaps(rd); f != nil {
			g.abortLocked(f)
		}
	}
	return rd, nil
}

// overlaps finds two ranks whose buffers share memory.
func (g *group) overlaps(rd *round) *fault {
	for a := range rd.calls {
		for b := a + 1; b < len(rd.calls); b++ {
			for _, x := range rd.calls[a].buffers() {
				for _, y := range rd.calls[b].buffers() {
					if comm.Overlap(x, y) {
						return &fault{peers: []int{a, b}, err: &comm.FaultError{
							Msg:  fmt.Sprintf("the buffers of %s and %s overlap", g.who([]int{a}), g.who([]int{b})),
							Kind: comm.ErrMismatch,
						}}
					}
				}
			}
		}
	}
	return nil
}

func (g *group) reach(rd *round, me, ph int) {
	g.mu.Lock()
	g.reachLocked(rd, me, ph)
	g.mu.Unlock()
}

func (g *group) reachLocked(rd *round, me, ph int) {
	rd.reached[me] = uint8(ph + 1)
	rd.count[ph]++
	if rd.count[ph] == g.size() {
		close(rd.ch[ph])
	}
}

// waiter is one rank's limits while it runs one collective.
type waiter struct {
	ctx    context.Context
	timer  <-chan time.Time
	budget time.Duration // the timer's duration, for messages
	me     int
}

// wait blocks until every rank has reached phase ph of rd, the group
// breaks, the timer fires or the context ends. The last three break the
// group (if it is not broken yet) and return its fault. When the phase
// completes and the group breaks at the same moment, completion wins.
func (g *group) wait(rd *round, ph int, w *waiter) *fault {
	done := rd.ch[ph]
	select {
	case <-done:
		return nil
	default:
	}
	select {
	case <-done:
		return nil
	case <-g.aborted:
	case <-w.timer:
		g.timedOut(rd, ph, w, nil)
	case <-w.ctx.Done():
		if err := w.ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
			g.timedOut(rd, ph, w, err)
		} else {
			g.abort(g.failed(w.me, err))
		}
	}
	select {
	case <-done:
		return nil
	default:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fault
}

// timedOut breaks the group naming the ranks that have not reached phase
// ph, unless the phase completed meanwhile, and tells the job (Run waits
// for them only a grace period more).
func (g *group) timedOut(rd *round, ph int, w *waiter, cause error) {
	g.mu.Lock()
	var missing, worldRanks []int
	for r, n := range rd.reached {
		if int(n) <= ph {
			missing = append(missing, r)
			worldRanks = append(worldRanks, g.members[r])
		}
	}
	if len(missing) == 0 {
		g.mu.Unlock()
		return
	}
	stragglers := make([]comm.Straggler, len(missing))
	for i, r := range missing {
		stragglers[i].Rank = r
	}
	g.abortLocked(&fault{peers: missing, err: comm.TimedOut(w.budget, g.name, g.members, stragglers, ph == phaseDone, cause)})
	g.mu.Unlock()
	g.job.named(worldRanks)
}

// sleep is an injected delay: it ends early, with the fault, when the group
// breaks or the context ends.
func (g *group) sleep(ctx context.Context, me int, d time.Duration) *fault {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-g.aborted:
	case <-ctx.Done():
		g.abort(g.failed(me, ctx.Err()))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fault
}

// beginCopy admits a rank into its data phase, unless the group is broken.
// A rank that returns an error waits (settle) until no rank is inside a
// data phase, so that nobody touches its buffers once it has returned.
func (g *group) beginCopy() *fault {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fault != nil {
		return g.fault
	}
	g.copying++
	return nil
}

func (g *group) endCopy() {
	g.mu.Lock()
	g.copying--
	if g.copying == 0 {
		g.idle.Broadcast()
	}
	g.mu.Unlock()
}

func (g *group) settle() {
	g.mu.Lock()
	for g.copying > 0 {
		g.idle.Wait()
	}
	g.mu.Unlock()
}
