package inproc

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/dszero/dszero/comm"
)

// DefaultTimeout bounds every collective when Options.Timeout is zero
// (comm.DefaultTimeout, 30 minutes).
const DefaultTimeout = comm.DefaultTimeout

// DefaultGrace is Options.Grace when zero.
const DefaultGrace = 5 * time.Second

// Options configure a World.
type Options struct {
	// Timeout bounds each collective on each rank, from the moment the rank
	// starts it (after the collectives queued before it) until it completes;
	// a context deadline that comes earlier wins. Zero means DefaultTimeout.
	// A collective that times out names the ranks that did not arrive.
	Timeout time.Duration

	// Grace is how long Run still waits for a rank that a timed-out
	// collective named as missing, after the timeout, before it returns
	// without that rank (see Run). Zero means DefaultGrace.
	Grace time.Duration

	// Inject, when set, is asked before every collective on every rank
	// (sub-communicators included) what fault to simulate there. It is
	// called from several goroutines at once and must be safe for that.
	Inject func(Site) Fault
}

// Site is one collective on one rank, as Options.Inject sees it.
type Site struct {
	Group     string    // "world" or "group[…]" (world ranks)
	Rank      int       // in the group
	WorldRank int       // in the world
	Kind      comm.Kind // the collective
	Seq       uint64    // its sequence number in the group, from 1
}

// Fault is what Options.Inject simulates at one Site.
type Fault struct {
	// Delay holds the rank back before it starts the collective (as if it
	// were still computing), so the collective's timeout starts after it.
	// A delay longer than the others' timeout simulates a rank that never
	// arrives. The delay ends early when the communicator breaks.
	Delay time.Duration
	// Err, when not nil, fails the collective on this rank after the delay,
	// as if the rank had failed there: the communicator breaks, and every
	// rank's collective returns a *comm.Error naming this rank and wrapping
	// comm.ErrRankFailed and Err.
	Err error
}

// World is n in-process ranks. It holds only configuration: every Run
// starts fresh communicators, so a World can be run many times, even
// concurrently.
type World struct {
	n    int
	opts Options
}

// New is a world of n ranks. n < 1, a negative timeout or grace is a
// programmer error and panics (validate --nproc and --comm-timeout
// before).
func New(n int, opts Options) *World {
	if n < 1 {
		panic(fmt.Sprintf("inproc: world of %d ranks", n))
	}
	var err error
	if opts.Timeout, err = comm.CheckTimeout("inproc: timeout", opts.Timeout); err != nil {
		panic(err.Error())
	}
	if opts.Grace < 0 {
		panic(fmt.Sprintf("inproc: negative grace %v", opts.Grace))
	}
	if opts.Grace == 0 {
		opts.Grace = DefaultGrace
	}
	return &World{n: n, opts: opts}
}

// Size is the number of ranks.
func (w *World) Size() int { return w.n }

// Run calls fn once per rank, each in its own goroutine with that rank's
// world communicator, and waits for all of them. It returns the ranks'
// errors joined, each prefixed "rank r: ", or nil. A panic in fn is
// recovered and becomes that rank's error, with its stack.
//
// When a rank's fn returns an error or panics, every communicator it belongs
// to breaks at once: the other ranks' pending and later collectives there
// fail with comm.ErrRankFailed naming it. When a rank's fn returns nil, its
// queued collectives still run to completion; after that, collectives of
// the others that need it fail with comm.ErrRankExited. A Comm must not be
// used after its rank's fn has returned (calls fail with comm.ErrClosed).
//
// A rank that stops — blocked forever outside any collective — cannot be
// ended from outside its goroutine. Once the job has failed, Run therefore
// waits for each rank a bounded time only: Options.Grace after a timed-out
// collective named it as missing, and the communicator timeout after the
// first failure for any other rank (a rank that reaches no collective in
// that time would have been named missing by one). A rank that does not
// return by then is reported as stopped or hung (its error wraps
// comm.ErrTimeout), and Run returns without it: its goroutine is left
// behind, blocked where it stopped, and must not be relied on. Otherwise
// Run returns only after every goroutine it started has ended.
func (w *World) Run(fn func(c comm.Comm) error) error {
	j := &job{
		w:       w,
		groups:  make([][]*group, w.n),
		gone:    make([]*departure, w.n),
		comms:   make([][]*rankComm, w.n),
		missing: make(map[int]time.Time),
		failed:  make(chan struct{}),
	}
	members := make([]int, w.n)
	for r := range members {
		members[r] = r
	}
	world := j.newGroup("world", members)
	j.register(world)
	comms := make([]*rankComm, w.n)
	for r := range comms {
		comms[r] = j.newRankComm(world, r)
	}
	type result struct {
		rank int
		err  error
	}
	// Buffered: a rank left behind may still send, long after Run returned.
	results := make(chan result, w.n)
	for r := range w.n {
		go func() {
			var err error
			defer func() { results <- result{r, err} }() // deferred: fn may runtime.Goexit
			j.runRank(r, comms[r], fn, &err)
		}()
	}
	errs := make([]error, w.n)
	running := make([]bool, w.n)
	for r := range running {
		running[r] = true
	}
	failed := j.failed
	var tick <-chan time.Time
	for left := w.n; left > 0; {
		select {
		case res := <-results:
			errs[res.rank], running[res.rank] = res.err, false
			left--
		case <-failed:
			failed = nil // from now on each rank has a deadline; check them
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			tick = t.C
		case now := <-tick:
			for r, run := range running {
				if run {
					if err := j.overdue(r, now); err != nil {
						errs[r], running[r] = fmt.Errorf("rank %d: %w", r, err), false
						left--
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

// job is the state of one Run: which groups each rank belongs to, which
// ranks are gone, and each rank's communicators.
type job struct {
	w  *World
	mu sync.Mutex
	// by world rank
	groups [][]*group
	gone   []*departure
	comms  [][]*rankComm
	// missing: when a timed-out collective first named each world rank
	// as not arrived (or not finished).
	missing map[int]time.Time

	failOnce sync.Once
	failedAt time.Time     // set before failed is closed
	failed   chan struct{} // closed when the first group of the job breaks
}

// broke records that a group of the job broke (the first time counts).
func (j *job) broke() {
	j.failOnce.Do(func() {
		j.failedAt = time.Now()
		close(j.failed)
	})
}

// named records that a timed-out collective found these world ranks
// missing.
func (j *job) named(worldRanks []int) {
	now := time.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, r := range worldRanks {
		if _, ok := j.missing[r]; !ok {
			j.missing[r] = now
		}
	}
}

// overdue is the error of world rank r still running at now, after the job
// failed, past its deadline (see Run); nil while it may still return.
func (j *job) overdue(r int, now time.Time) error {
	j.mu.Lock()
	at, named := j.missing[r]
	j.mu.Unlock()
	if named {
		if now.Sub(at) < j.w.opts.Grace {
			return nil
		}
		return &stuckError{fmt.Sprintf("a collective timed out waiting for it, and it did not return within %v after", j.w.opts.Grace)}
	}
	if now.Sub(j.failedAt) < j.w.opts.Timeout {
		return nil
	}
	return &stuckError{fmt.Sprintf("it neither reached a collective nor returned within %v after the job failed", j.w.opts.Timeout)}
}

// stuckError is a rank that Run stopped waiting for.
type stuckError struct{ why string }

func (e *stuckError) Error() string {
	return "stopped or hung: " + e.why + "; its goroutine is left behind"
}

func (e *stuckError) Unwrap() error { return comm.ErrTimeout }

// departure is why a rank left: its fn failed, panicked or returned.
type departure struct {
	verb  string // "failed", "panicked", "exited"
	kind  error  // comm.ErrRankFailed or comm.ErrRankExited
	cause error  // the rank's error; nil for "exited"
}

// runRank runs fn for rank r and then retires the rank: it breaks the
// rank's groups if fn failed, lets its queued collectives finish, stops its
// workers, and finally marks it exited. The cleanup is deferred so that it
// also runs when fn calls runtime.Goexit (t.FailNow).
func (j *job) runRank(r int, c *rankComm, fn func(comm.Comm) error, result *error) {
	returned := false
	defer func() {
		var d *departure
		if !returned {
			if v := recover(); v != nil {
				cause, ok := v.(error)
				if !ok {
					cause = fmt.Errorf("%v", v)
				}
				d = &departure{verb: "panicked", kind: comm.ErrRankFailed, cause: cause}
				*result = fmt.Errorf("rank %d panicked: %w\n%s", r, cause, debug.Stack())
			} else {
				cause := errors.New("runtime.Goexit (t.FailNow?)")
				d = &departure{verb: "failed", kind: comm.ErrRankFailed, cause: cause}
				*result = fmt.Errorf("rank %d: %w", r, cause)
			}
		} else if *result != nil {
			d = &departure{verb: "failed", kind: comm.ErrRankFailed, cause: *result}
			*result = fmt.Errorf("rank %d: %w", r, *result)
		}
		if d != nil {
			j.depart(r, d)
		}
		j.closeRank(r)
		if d == nil {
			j.depart(r, &departure{verb: "exited", kind: comm.ErrRankExited})
		}
	}()
	*result = fn(c)
	returned = true
}

// depart records that world rank r is gone and breaks every group it is
// in (the first fault of a group wins).
func (j *job) depart(r int, d *departure) {
	j.mu.Lock()
	if j.gone[r] == nil || j.gone[r].kind == comm.ErrRankExited {
		j.gone[r] = d
	}
	groups := append([]*group(nil), j.groups[r]...)
	j.mu.Unlock()
	for _, g := range groups {
		g.abort(g.departed(r, d))
	}
}

// register records g under each of its members; a member already gone
// breaks it at once. Registering twice is a no-op.
func (j *job) register(g *group) {
	j.mu.Lock()
	if g.registered {
		j.mu.Unlock()
		return
	}
	g.registered = true
	var f *fault
	for _, m := range g.members {
		j.groups[m] = append(j.groups[m], g)
		if d := j.gone[m]; d != nil && f == nil {
			f = g.departed(m, d)
		}
	}
	j.mu.Unlock()
	if f != nil {
		g.abort(f)
	}
}

// newRankComm is rank's handle on g, with its worker running.
func (j *job) newRankComm(g *group, rank int) *rankComm {
	c := &rankComm{g: g, rank: rank, job: j, exited: make(chan struct{})}
	c.Issuer = comm.Issuer{Issue: c.issue}
	c.queue.Init(&c.mu)
	j.mu.Lock()
	j.comms[g.members[rank]] = append(j.comms[g.members[rank]], c)
	j.mu.Unlock()
	go c.loop()
	return c
}

// closeRank closes every communicator of world rank r and waits for their
// workers, including communicators that a draining Split creates meanwhile.
func (j *job) closeRank(r int) {
	for i := 0; ; i++ {
		j.mu.Lock()
		if i == len(j.comms[r]) {
			j.mu.Unlock()
			return
		}
		c := j.comms[r][i]
		j.mu.Unlock()
		c.close()
		<-c.exited
	}
}
