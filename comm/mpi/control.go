//go:build mpi

package mpi

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dszero/dszero/comm"
)

// The control channel: how a rank whose collective timed out learns which
// ranks did not arrive, and how it tells the others that the job is being
// aborted. MPI itself cannot say who is missing from a blocked collective,
// so each process keeps, for each of its communicators, how far it got —
// the last collective it issued, started and finished there — and answers
// questions about it on a private duplicate of MPI_COMM_WORLD:
//
//   - query: "how far are you on communicator C?", from a rank whose
//     collective #N on C timed out, to every other member of C. A member
//     that has started #N arrived; one that has not is busy elsewhere
//     (computing, or blocked on another communicator); one that does not
//     answer within queryWindow is stopped (SIGSTOP, a debugger) or hung
//     so that even Go's scheduler does not run — it is named as such.
//   - abort: "the job is being aborted, because …", from a rank whose
//     collective failed, to every other rank: each fails its own
//     collectives at once with that cause (naming the same ranks), so that
//     every live rank reports the error before MPI_Abort ends the job.
//
// Messages are small JSON objects, sent with MPI_Isend from buffers in C
// memory and never waited for (a stopped peer never receives them), and
// received by a goroutine that polls MPI_Improbe every pollInterval: no
// thread spins in MPI on behalf of the channel, and a healthy job pays
// one MPI_Improbe per interval.
type control struct {
	h    handle
	me   int // world rank
	size int // world size
	w    *World

	mu      sync.Mutex
	nextQID int64
	waiting map[int64]chan answer // open queries by id
	// Sends in flight: their requests, and what frees their buffers. The
	// requests have a slice of their own, since cgo passes &reqs[i] to C
	// only when the memory around it holds no Go pointers.
	reqs   []request
	frees  []func()
	broken error // the first MPI error on the channel; it then stops

	stop    chan struct{}
	stopped chan struct{}
}

// pollInterval is how often the control goroutine looks for messages.
const pollInterval = 20 * time.Millisecond

// queryWindow is how long a timed-out rank waits for the answers to its
// query; a rank that has not answered by then does not run at all.
const queryWindow = time.Second

// relayWait bounds how long a rank told of another's failure waits for its
// own collectives in flight to stop touching their buffers.
const relayWait = time.Second

const (
	tagQuery = 1
	tagReply = 2
	tagAbort = 3
)

// message is every control message; which fields count depends on the
// tag.
type message struct {
	QID  int64  `json:"qid,omitempty"`  // query, reply
	Comm string `json:"comm,omitempty"` // query: the communicator's id
	progress
	Msg     string `json:"msg,omitempty"`     // abort: the error that ends the job
	Timeout bool   `json:"timeout,omitempty"` // abort: it is a timeout
	Peers   []int  `json:"peers,omitempty"`   // abort: the world ranks at fault
}

// progress is how far one rank got on one communicator, and the
// collective it has been waiting in longest, on any communicator.
type progress struct {
	Known    bool     `json:"known,omitempty"`    // the rank has this communicator
	Issued   uint64   `json:"issued,omitempty"`   // the last sequence number issued
	Started  uint64   `json:"started,omitempty"`  // the last one its worker started
	Finished uint64   `json:"finished,omitempty"` // the last one that completed
	Broken   bool     `json:"broken,omitempty"`   // the communicator has failed
	Waiting  *waiting `json:"waiting,omitempty"`  // nil: in no collective
}

// waiting is a collective in progress on one rank.
type waiting struct {
	Comm    string        `json:"comm"`    // the communicator's id
	Name    string        `json:"name"`    // its name, for messages
	Members []int         `json:"members"` // its world ranks
	Kind    comm.Kind     `json:"kind"`
	Seq     uint64        `json:"seq"`
	For     time.Duration `json:"for"` // since it started
}

// maxHops bounds how far stragglers follows a rank that waits in another
// communicator's collective (each hop is one more query round).
const maxHops = 2

// answer is one rank's reply to a query.
type answer struct {
	from int
	progress
}

// newControl duplicates MPI_COMM_WORLD for the channel and starts its
// goroutine. Init calls it on every rank (MPI_Comm_dup is collective).
func newControl(w *World) (*control, error) {
	h, err := dupWorld()
	if err != nil {
		return nil, fmt.Errorf("mpi: the control channel: %w", err)
	}
	me, members, err := describe(h)
	if err != nil {
		return nil, fmt.Errorf("mpi: the control channel: %w", err)
	}
	k := &control{h: h, me: me, size: len(members), w: w, waiting: map[int64]chan answer{}, stop: make(chan struct{}), stopped: make(chan struct{})}
	go k.loop()
	return k, nil
}

// close stops the goroutine; Finalize calls it before MPI_Finalize.
func (k *control) close() {
	close(k.stop)
	<-k.stopped
}

func (k *control) loop() {
	defer close(k.stopped)
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
		}
		if !k.poll() {
			return
		}
	}
}

// poll handles every message that has arrived and reaps finished sends;
// false when the channel has failed.
func (k *control) poll() bool {
	for {
		raw, src, tag, ok, err := take(k.h)
		if err != nil {
			k.fail(err)
			return false
		}
		if !ok {
			break
		}
		var m message
		if json.Unmarshal(raw, &m) != nil {
			continue // not ours; nothing else sends on this communicator
		}
		switch tag {
		case tagQuery:
			p := k.w.progress(m.Comm)
			k.send(src, tagReply, message{QID: m.QID, progress: p})
		case tagReply:
			k.mu.Lock()
			ch := k.waiting[m.QID]
			k.mu.Unlock()
			if ch != nil {
				select {
				case ch <- answer{from: src, progress: m.progress}:
				default: // an answer beyond the question's peers: ignore
				}
			}
		case tagAbort:
			k.w.relay(src, m)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	live := 0
	for i := range k.reqs {
		done, err := testSend(&k.reqs[i])
		switch {
		case err != nil:
			// Leave the buffer: MPI may still read it.
		case done:
			k.frees[i]()
		default:
			k.reqs[live], k.frees[live] = k.reqs[i], k.frees[i]
			live++
		}
	}
	clear(k.frees[live:])
	k.reqs, k.frees = k.reqs[:live], k.frees[:live]
	return true
}

func (k *control) fail(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.broken == nil {
		k.broken = err
	}
}

// send starts sending m to world rank dest; it never waits for dest.
func (k *control) send(dest, tag int, m message) {
	raw, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("mpi: control message %+v: %v", m, err))
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.broken != nil {
		return
	}
	req, free, err := sendBytes(k.h, raw, dest, tag)
	if err != nil {
		k.broken = err
		return
	}
	k.reqs = append(k.reqs, req)
	k.frees = append(k.frees, free)
}

// ask queries the world ranks peers about communicator id and returns the
// answers that came within queryWindow, by world rank.
func (k *control) ask(id string, peers []int) map[int]progress {
	k.mu.Lock()
	k.nextQID++
	qid := k.nextQID
	ch := make(chan answer, len(peers))
	k.waiting[qid] = ch
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		delete(k.waiting, qid)
		k.mu.Unlock()
	}()
	for _, p := range peers {
		k.send(p, tagQuery, message{QID: qid, Comm: id})
	}
	got := make(map[int]progress, len(peers))
	t := time.NewTimer(queryWindow)
	defer t.Stop()
	for len(got) < len(peers) {
		select {
		case a := <-ch:
			if slices.Contains(peers, a.from) {
				got[a.from] = a.progress
			}
		case <-t.C:
			return got
		case <-k.stopped:
			return got
		}
	}
	return got
}

// tellAll sends the abort notice to every other rank of the world.
func (k *control) tellAll(m message) {
	for r := range k.size {
		if r != k.me {
			k.send(r, tagAbort, m)
		}
	}
}

// stragglers asks the other members of c how far they got and returns the
// ones that have not started collective seq there, as ranks of c, with
// what each does instead, and the roots of the stall (see World.stragglers).
func (c *communicator) stragglers(seq uint64) ([]comm.Straggler, []int) {
	return c.w.stragglers(c.id, c.name, c.members, seq, 0, map[string]bool{})
}

// stragglers is the members (world ranks) of the communicator id (named
// name) that have not started its collective seq, as ranks of it. A
// straggler that waits in a collective of another communicator instead is
// followed there, up to maxHops, to name the ranks that one waits for in
// turn: a rank blocked in its shard group because a member of that group
// stopped is reported with that member. roots are the world ranks where
// the chains end — stopped, busy, or not followed further: the ranks at
// fault. This rank, when a member, answers from its own state.
func (w *World) stragglers(id, name string, members []int, seq uint64, hop int, seen map[string]bool) (out []comm.Straggler, roots []int) {
	seen[fmt.Sprintf("%s#%d", id, seq)] = true
	me := w.ctl.me
	var peers []int
	for _, wr := range members {
		if wr != me {
			peers = append(peers, wr)
		}
	}
	got := w.ctl.ask(id, peers)
	if slices.Contains(members, me) {
		got[me] = w.progress(id)
	}
	for r, wr := range members {
		p, answered := got[wr]
		var state string
		root := true
		switch {
		case !answered:
			state = fmt.Sprintf("stopped or hung: no answer within %v", queryWindow)
		case !p.Known:
			state = "it has not made this communicator yet"
		case p.Started >= seq:
			continue // it arrived
		case p.Broken:
			state = "its own collectives here have failed"
		case p.Waiting != nil:
			wt := p.Waiting
			state = fmt.Sprintf("waiting in %v #%d on %s for %v", wt.Kind, wt.Seq, wt.Name, wt.For.Round(time.Millisecond))
			if key := fmt.Sprintf("%s#%d", wt.Comm, wt.Seq); hop < maxHops && !seen[key] {
				if next, nextRoots := w.stragglers(wt.Comm, wt.Name, wt.Members, wt.Seq, hop+1, seen); len(next) > 0 {
					state += ", where " + comm.Missing(wt.Name, wt.Members, next, false)
					roots, root = append(roots, nextRoots...), false
				}
			}
		default:
			state = fmt.Sprintf("busy outside collectives: the last it issued here is #%d", p.Issued)
		}
		if wr == me {
			state = "this rank: " + state
		}
		if root && !slices.Contains(roots, wr) {
			roots = append(roots, wr)
		}
		out = append(out, comm.Straggler{Rank: r, State: state})
	}
	return out, roots
}
